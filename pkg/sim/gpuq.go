package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/decide"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/service"
)

// Simulated hardware.
const (
	simGPUModel  = "A100"
	simGPUMemMiB = 81920
)

// driver runs the real scheduler step over an in-memory log in virtual
// time, playing the submitters and the agents:
//
//  1. At each instant, the agents report the tasks whose remaining real
//     duration has elapsed (Completed), then the trace's submissions of
//     that instant are appended (Submitted).
//  2. The scheduler folds the new records into its state (Apply; the
//     run-time predictor and, under estimates, the advisor's estimator
//     observe each record, as the services do) and calls decide.Plan; its
//     commands are appended with their message ids and expected
//     sequences, so the log's guards act as JetStream's would.
//  3. The agents react at the same instant: a dispatched task starts
//     (Started, its end scheduled after its remaining real duration); a
//     task asked to yield checkpoints at once (Checkpointed, Preempted) —
//     or, under the checkpoint model (Config.CheckpointEvery), runs on
//     for its grace and exits, losing the work since its last periodic
//     checkpoint and the grace (Preempted with LostGPUSeconds).
//  4. Steps 2–3 repeat until decide.Plan has nothing more to do; then the
//     clock jumps to the next instant.
type driver struct {
	ctx   context.Context
	tasks []Task
	byID  map[string]int
	epoch time.Time
	vt    time.Duration // virtual time since the epoch
	now   time.Time     // epoch + vt

	log   *memlog.Log
	st    *domain.State
	fl    *service.Fold // the runtime folding log into st
	hooks service.Hooks
	pol   *policy.Policy
	pred  *estimate.Predictor // the scheduler's run-time predictor
	// predicted memoises pred.Total until pred learns again; running
	// memoises the running and resumed tasks' predictions at one instant
	// (runningAt), which the passes of a settle ask again and again.
	predicted map[string]time.Duration
	running   map[*domain.Task]runPrediction
	runningAt time.Time
	read      uint64 // last sequence folded

	runs    []run
	ends    taskEnds
	toStart []int // dispatched, not yet started by their agent
	toYield []int // asked to yield, not yet checkpointed

	// The checkpoint model (Config.CheckpointEvery > 0): every running task
	// checkpoints each ckptEvery of its run (ckpts: the next one due, by
	// task), and a preempted one exits grace after the request.
	ckptEvery time.Duration
	grace     time.Duration
	ckpts     taskEnds

	// The progress model (Config.ProgressModel, progress.go): each
	// reporting task's planned total (nil: none reports) and its reports
	// due.
	plan          []time.Duration
	progressEvery time.Duration
	reportsDue    taskEnds

	queued   int
	out      *outcome
	est      *estimating // nil: no estimates
	progress func(submitted int)
	fault    *faulting // nil: none (fault.go)
	alarms   *alarming // nil: alarms not measured (alarms.go)
}

// run is a task's progress as its agent knows it.
type run struct {
	started time.Duration // start of the current run; -1 when not running
	done    time.Duration // real work done in earlier runs (kept by their checkpoints)
	gen     uint32        // bumped at each start, yield and end: older ends are stale
	// Checkpoint model: the last checkpoint of the current run (its
	// instant, or the run's start before the first) and the real work it
	// kept, earlier runs included.
	ckptAt   time.Duration
	ckptDone time.Duration
	ckptRef  string
}

func newDriver(ctx context.Context, cfg Config, pol *policy.Policy, tasks []Task, withEstimates bool) *driver {
	d := &driver{ctx: ctx, tasks: tasks, byID: make(map[string]int, len(tasks)), epoch: cfg.Epoch,
		log: memlog.New(), st: domain.NewState(), pol: pol, pred: estimate.NewPredictor(0),
		predicted: map[string]time.Duration{}, running: map[*domain.Task]runPrediction{}, runs: make([]run, len(tasks)), out: newOutcome(len(tasks))}
	d.now = d.epoch
	d.pred.PriorRuns = cfg.priorRuns()
	if cfg.PolicyPriorRuns != 0 {
		d.pred.PriorRuns = Config{PriorRuns: cfg.PolicyPriorRuns}.priorRuns()
	}
	d.pred.NoProgress = cfg.PolicyNoProgress
	d.ckptEvery = cfg.CheckpointEvery
	if d.ckptEvery > 0 {
		d.grace = simGrace
	}
	if d.plan = cfg.ProgressModel.plans(tasks); d.plan != nil {
		d.progressEvery = cfg.ProgressModel.Every
		if d.progressEvery <= 0 {
			d.progressEvery = DefaultProgressEvery
		}
	}
	d.log.Now = func() time.Time { return d.now }
	for i, t := range tasks {
		d.byID[t.ID] = i
		d.runs[i].started = -1
	}
	if withEstimates {
		d.est = newEstimating(pol, len(tasks), cfg.EstimateWindow, cfg.EstimateWorkers)
		d.est.est.Pred.PriorRuns = cfg.priorRuns()
	}
	return d
}

// predict is the policy's run-time prediction, as the scheduler service
// passes it (estimate.Predictor.ForPolicy): a running task's is
// conditioned on how long it has run; a queued task's, the learned P50 of
// its whole run, is memoised until the predictor learns again (it depends
// only on the predictor and the task's submitted fields, which nothing in
// a simulation amends).
func (d *driver) predict(t *domain.Task) time.Duration {
	if (t.State == domain.Running && d.now.After(t.StartedAt)) || t.RunSeconds > 0 {
		// Running: conditioned on the run so far; resumed: what is left
		// changes with each run. Memoised for this instant only.
		if !d.runningAt.Equal(d.now) {
			clear(d.running)
			d.runningAt = d.now
		}
		key := runPrediction{state: t.State, started: t.StartedAt, ran: t.RunSeconds, progress: t.ProgressAt}
		if m, ok := d.running[t]; ok && m.state == key.state && m.started.Equal(key.started) && m.ran == key.ran && m.progress.Equal(key.progress) {
			return m.v
		}
		key.v = d.pred.PolicyRun(t, d.now)
		d.running[t] = key
		return key.v
	}
	if v, ok := d.predicted[t.ID]; ok {
		return v
	}
	v := d.pred.Total(t, 0.5)
	d.predicted[t.ID] = v
	return v
}

// runPrediction is a memoised prediction and what it was made from.
type runPrediction struct {
	v       time.Duration
	state   domain.TaskState
	started time.Time
	ran     float64
	// progress: the time of the task's latest progress report.
	progress time.Time
}

func (d *driver) at(vt time.Duration) {
	d.vt = vt
	d.now = d.epoch.Add(vt)
}

func (d *driver) append(e events.Event, msgID string, expect *events.Expect) (events.Ack, error) {
	return events.Append(d.ctx, d.log, e, events.Meta{Time: d.now}, msgID, expect)
}

// simulate runs the whole trace.
func (d *driver) simulate(nodes, perNode int) (*outcome, error) {
	// The cluster: nodes n001… with GPUs GPU-n001-0…, all healthy.
	width := max(3, len(fmt.Sprint(nodes)))
	for n := 0; n < nodes; n++ {
		name := fmt.Sprintf("n%0*d", width, n+1)
		gs := make([]events.GPU, perNode)
		for g := range gs {
			gs[g] = events.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, g), Index: g, Model: simGPUModel, MemoryMiB: simGPUMemMiB, Healthy: true}
		}
		if _, err := d.append(events.Available{Node: name, GPUs: gs, FreeGPUs: perNode, BootID: "sim"}, "", nil); err != nil {
			return nil, err
		}
	}
	if err := d.fold(); err != nil {
		return nil, err
	}
	next := 0
	for {
		if err := d.ctx.Err(); err != nil {
			return nil, err
		}
		d.dropStaleEnds()
		// The next instant: a submission, an end or a checkpoint, whichever
		// is first.
		has := false
		var vt time.Duration
		if next < len(d.tasks) {
			vt, has = d.tasks[next].Submit, true
		}
		if d.ends.Len() > 0 && (!has || d.ends[0].at <= vt) {
			vt, has = d.ends[0].at, true
		}
		onlyCkpt := false
		if d.ckpts.Len() > 0 && (!has || d.ckpts[0].at < vt) {
			vt, has, onlyCkpt = d.ckpts[0].at, true, true
		}
		// Progress reports, like checkpoints, free no GPU and queue no
		// task: an instant of reports alone has no pass (a
		// simplification: the live scheduler plans again on them; here
		// the next submission's or end's pass reads them).
		if d.reportsDue.Len() > 0 && (!has || d.reportsDue[0].at < vt) {
			vt, has, onlyCkpt = d.reportsDue[0].at, true, true
		}
		if b, ok := d.faultInstant(); ok && has && b <= vt {
			vt, onlyCkpt = b, false
		}
		if !has {
			break
		}
		d.at(vt)
		d.passFault(vt)
		if err := d.faultEnds(); err != nil {
			return nil, err
		}
		// 1. Ends (completions, and exits after a grace), checkpoints, then
		//    submissions.
		for d.ends.Len() > 0 && d.ends[0].at == vt {
			e := heap.Pop(&d.ends).(taskEnd)
			if d.runs[e.task].gen != e.gen {
				continue
			}
			if e.yield {
				if err := d.exit(e.task); err != nil {
					return nil, err
				}
				continue
			}
			d.runs[e.task].started = -1
			d.runs[e.task].gen++
			t := d.st.Tasks[d.tasks[e.task].ID]
			if _, err := d.append(events.Completed{TaskID: t.ID, Node: t.Node}, "", nil); err != nil {
				return nil, err
			}
		}
		if err := d.checkpoints(); err != nil {
			return nil, err
		}
		if err := d.reports(); err != nil {
			return nil, err
		}
		if onlyCkpt {
			// Nothing the scheduler decides on changed: no pass, as a
			// checkpoint neither frees GPUs nor queues a task.
			if err := d.fold(); err != nil {
				return nil, err
			}
			continue
		}
		for ; next < len(d.tasks) && d.tasks[next].Submit == vt; next++ {
			if d.progress != nil && (next+1)*100/len(d.tasks) > next*100/len(d.tasks) {
				d.progress(next + 1)
			}
			t := d.tasks[next]
			sub := events.Submitted{TaskID: t.ID, Name: t.ID, Team: t.Team, Priority: t.Priority.String(), GPUs: t.GPUs,
				Hours: t.Hours, Hypothesis: "trace job", Preemptible: !t.Fixed, GraceS: d.grace.Seconds(), SubmittedAt: d.now}
			if _, err := d.append(sub, "", nil); err != nil {
				return nil, err
			}
		}
		if err := d.fold(); err != nil {
			return nil, err
		}
		// 2–4. Decide and react until nothing more happens at this instant
		//      (nothing at all while the scheduler is stalled by a fault).
		if !d.stalled() {
			if err := d.settle(); err != nil {
				return nil, err
			}
		}
		d.alarmStep()
		d.out.queueLen.add(vt, d.queued)
	}
	for i, t := range d.tasks {
		if d.out.end[i] < 0 {
			return nil, fmt.Errorf("sim: task %s never ended (state %s)", t.ID, d.st.Tasks[t.ID].State)
		}
	}
	// What the log recorded: run time, preemptions and work lost.
	for _, t := range d.tasks {
		ft := d.st.Tasks[t.ID]
		d.out.busyGPUSeconds += float64(ft.GPUs) * ft.RunSeconds
		d.out.preemptions += ft.Preemptions
		d.out.lostGPUSeconds += ft.LostGPUSecs
	}
	return d.out, nil
}

// maxRounds bounds the decide–react rounds at one instant.
const maxRounds = 10000

func (d *driver) settle() error {
	for round := 0; ; round++ {
		if round == maxRounds {
			return fmt.Errorf("sim: at %s, decisions still change after %d rounds", d.vt, maxRounds)
		}
		cmds := decide.Plan(d.st, d.pol, d.now, d.liveness(), d.predict)
		if len(cmds) == 0 {
			return nil
		}
		appended := 0
		for _, c := range cmds {
			ack, err := d.append(c.Event, c.MsgID, c.Expect)
			if errors.Is(err, events.ErrConflict) {
				// One writer, so a refused guard means the fold and the log
				// disagree: a bug, not a race.
				return fmt.Errorf("sim: at %s, the log refused %s of %s: %w", d.vt, c.Event.EventType(), c.Event.Key(), err)
			}
			if err != nil {
				return err
			}
			if !ack.Duplicate {
				appended++
			}
		}
		if err := d.fold(); err != nil {
			return err
		}
		if err := d.react(); err != nil {
			return err
		}
		if appended == 0 {
			return nil // only duplicates: deciding again changes nothing
		}
	}
}

// react plays the agents: start what was dispatched, checkpoint and yield
// what was asked to.
func (d *driver) react() error {
	if len(d.toStart) == 0 && len(d.toYield) == 0 {
		return nil
	}
	for _, i := range d.toStart {
		t := d.st.Tasks[d.tasks[i].ID]
		if _, err := d.append(events.Started{TaskID: t.ID, Node: t.Node, PID: i + 1}, "", nil); err != nil {
			return err
		}
		r := &d.runs[i]
		r.started = d.vt
		r.gen++
		heap.Push(&d.ends, taskEnd{at: d.vt + d.tasks[i].Duration - r.done, task: i, gen: r.gen})
		if d.ckptEvery > 0 {
			r.ckptAt, r.ckptDone = d.vt, r.done
			heap.Push(&d.ckpts, taskEnd{at: d.vt + d.ckptEvery, task: i, gen: r.gen})
		}
		d.scheduleReport(i)
	}
	for _, i := range d.toYield {
		t := d.st.Tasks[d.tasks[i].ID]
		r := &d.runs[i]
		if d.ckptEvery > 0 && r.started >= 0 {
			// Runs on for its grace (its checkpoints stop), then exits.
			heap.Push(&d.ends, taskEnd{at: d.vt + d.grace, task: i, gen: r.gen, yield: true})
			continue
		}
		if r.started >= 0 {
			r.done += d.vt - r.started
		}
		r.started = -1
		r.gen++
		ref := fmt.Sprintf("sim://%s/%d", t.ID, int64(r.done.Seconds()))
		if _, err := d.append(events.Checkpointed{TaskID: t.ID, Ref: ref}, "", nil); err != nil {
			return err
		}
		if _, err := d.append(events.Preempted{TaskID: t.ID, Node: t.Node, Checkpoint: ref}, "", nil); err != nil {
			return err
		}
	}
	d.toStart, d.toYield = d.toStart[:0], d.toYield[:0]
	return d.fold()
}

// fold reads the records appended since the last fold, through the Log
// port, and applies them as the services do.
//
// It folds through the services' runtime (pkg/service), on this goroutine:
// CatchUp applies each record with State.Apply and calls d.folded.
func (d *driver) fold() error {
	if d.fl == nil {
		d.fl = service.New("sim", d.log, zerolog.Nop(), d.st)
		d.hooks = service.Hooks{Applied: func(_ *domain.State, r events.Record, _ string) { d.folded(r) }}
	}
	return d.fl.CatchUp(d.ctx, &d.hooks)
}

// folded follows one record the fold has just applied.
func (d *driver) folded(r events.Record) {
	{
		d.read = r.Seq
		if d.est != nil {
			d.est.observe(d, r)
		}
		id := r.Event.Key()
		i, known := d.byID[id]
		t := d.st.Tasks[id]
		switch e := r.Event.(type) {
		case events.Submitted:
			if t != nil && t.SubmitSeq == r.Seq {
				d.queued++
			}
		case events.Dispatched:
			if known && t.State == domain.Dispatched && t.DispatchSeq == r.Seq {
				d.queued--
				d.toStart = append(d.toStart, i)
				if e.Backfill {
					d.out.backfilled++
				}
			}
		case events.Started:
			if known && d.out.start[i] < 0 && t.State == domain.Running {
				d.out.start[i] = d.vt
			}
		case events.PreemptRequested:
			if known && t.State == domain.Preempting && t.HoldsGPUs() {
				d.toYield = append(d.toYield, i)
			}
		case events.Requeued:
			if t != nil && t.State == domain.Queued && t.LastSeq == r.Seq {
				d.queued++
				if known && d.runs[i].started >= 0 {
					// Its node was lost (a fault): the run stops, keeping
					// the work of its last checkpoint.
					r := &d.runs[i]
					if d.ckptEvery > 0 {
						r.done = r.ckptDone
					}
					r.started = -1
					r.gen++
				}
			}
		case events.Completed:
			if t != nil {
				d.pred.Observe(t)
				clear(d.predicted)
				clear(d.running)
				if known && t.State == domain.Completed {
					d.out.end[i] = d.vt
				}
			}
		}
	}
}

func (d *driver) dropStaleEnds() {
	for d.ends.Len() > 0 && d.runs[d.ends[0].task].gen != d.ends[0].gen {
		heap.Pop(&d.ends)
	}
	for d.ckpts.Len() > 0 && !d.ckptLive(d.ckpts[0]) {
		heap.Pop(&d.ckpts)
	}
	for d.reportsDue.Len() > 0 && !d.reportLive(d.reportsDue[0]) {
		heap.Pop(&d.reportsDue)
	}
}

// simGrace is the grace of every task under the checkpoint model: the
// submitter's default (domain.SubmitRequest).
const simGrace = 120 * time.Second

// ckptLive reports whether a checkpoint due is still the task's: the same
// run, running (not yielding).
func (d *driver) ckptLive(c taskEnd) bool {
	if d.runs[c.task].gen != c.gen {
		return false
	}
	t := d.st.Tasks[d.tasks[c.task].ID]
	return t != nil && t.State == domain.Running
}

// checkpoints appends the checkpoints due now (Checkpointed, with the work
// kept in its reference) and schedules each task's next one.
func (d *driver) checkpoints() error {
	for d.ckpts.Len() > 0 && d.ckpts[0].at <= d.vt {
		c := heap.Pop(&d.ckpts).(taskEnd)
		if !d.ckptLive(c) {
			continue
		}
		r := &d.runs[c.task]
		r.ckptAt, r.ckptDone = d.vt, r.done+d.vt-r.started
		id := d.tasks[c.task].ID
		r.ckptRef = fmt.Sprintf("sim://%s/%d", id, int64(r.ckptDone.Seconds()))
		if _, err := d.append(events.Checkpointed{TaskID: id, Ref: r.ckptRef}, "", nil); err != nil {
			return err
		}
		heap.Push(&d.ckpts, taskEnd{at: d.vt + d.ckptEvery, task: c.task, gen: c.gen})
	}
	return nil
}

// exit ends a preempted task's run after its grace (checkpoint model): it
// keeps the work of its last checkpoint and loses the rest of the run,
// grace included.
func (d *driver) exit(i int) error {
	r := &d.runs[i]
	t := d.st.Tasks[d.tasks[i].ID]
	if r.started < 0 || t == nil || t.State != domain.Preempting {
		return nil
	}
	lost := d.vt - r.ckptAt
	r.done = r.ckptDone
	r.started = -1
	r.gen++
	_, err := d.append(events.Preempted{TaskID: t.ID, Node: t.Node, Checkpoint: r.ckptRef,
		LostGPUSeconds: lost.Seconds() * float64(t.GPUs)}, "", nil)
	return err
}

// Log simulates pol over tasks on nodes × perNode GPUs, as runPolicy
// does for gpuq, and returns the whole log of the run in order: the
// agents' and submitters' records and the decisions. services/scheduler
// replays the first kind into its real loop and checks that it decides
// the second (TestSameDecisionsAsSimulator).
func Log(ctx context.Context, cfg Config, pol *policy.Policy, tasks []Task) ([]events.Stored, error) {
	d := newDriver(ctx, cfg, pol, tasks, false)
	if _, err := d.simulate(cfg.Nodes, cfg.GPUsPerNode); err != nil {
		return nil, err
	}
	var out []events.Stored
	_, err := d.log.Read(ctx, 1, "", func(m events.Stored) error {
		out = append(out, m)
		return nil
	})
	return out, err
}

// priorRuns is the predictors' PriorRuns for Config.PriorRuns.
func (c Config) priorRuns() float64 {
	switch {
	case c.PriorRuns == 0:
		return estimate.DefaultPriorRuns
	case c.PriorRuns < 0:
		return 0
	}
	return c.PriorRuns
}
