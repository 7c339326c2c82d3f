// Package gpuagent runs on every GPU host: it discovers the GPUs through
// NVML (inventory), publishes the node's availability and heartbeats, runs
// the tasks dispatched to the node as real processes (runner) with
// CUDA_VISIBLE_DEVICES set, delivers preemption signals with the grace
// period, and appends started / completed / failed / preempted.
//
// The agent folds the event log like every other service; it keeps no
// state of its own except the processes it started. It appends started
// before it starts a process, guarded by the task's last sequence, so a
// cancel that raced ahead wins and a restarted agent never runs a task
// twice: a task the log says is running here but that this boot did not
// start is reported failed ("agent restarted; process lost").
//
// A task spanning several nodes (a gang) runs its command once, on its first
// placement's node (rank 0), with GPUQ_PLACEMENTS describing every node's
// GPUs for the job's own launcher (torchrun, mpirun); the other nodes hold
// their GPUs for it.
package gpuagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/service"
	"github.com/gpuq/gpuq/services/gpuagent/inventory"
	"github.com/gpuq/gpuq/services/gpuagent/runner"
)

// Config of one agent.
type Config struct {
	Log  events.Log
	JS   jetstream.JetStream // heartbeat bucket
	Node string
	// DataDir keeps task logs under <DataDir>/tasks/<id>/output.log.
	DataDir string
	// CheckpointRoot is where tasks save checkpoints, shared by all nodes
	// (GPUQ_CHECKPOINT_DIR = <CheckpointRoot>/<task id>).
	CheckpointRoot string
	// NATSURL is passed to tasks as GPUQ_NATS_URL.
	NATSURL   string
	Inventory inventory.Options
	// Inv, when set, is used instead of opening one from Inventory (tests
	// inject GPU faults through it).
	Inv    *inventory.Inventory
	Logger zerolog.Logger
	Now    func() time.Time
	// Heartbeat interval (default 5 s).
	Heartbeat time.Duration
	// KillAfter is the wait between SIGTERM and SIGKILL (default 10 s).
	KillAfter time.Duration
	Ready     func()
	// Replicas of the heartbeat bucket (0: 1; 3 on a 3-node NATS cluster).
	Replicas int
}

// criticalXid lists Xid errors after which a GPU must not get new work:
// uncorrectable ECC, fallen off the bus, row-remap failure, NVLink and
// uncontained errors.
var criticalXid = map[uint64]bool{48: true, 63: true, 64: true, 74: true, 79: true, 92: true, 94: true, 95: true}

type proc struct {
	orphan    bool // the log no longer places the task here: stop, report nothing
	p         *runner.Proc
	task      string
	dispatch  uint64
	signalled bool
	termAt    time.Time // when to send SIGTERM (grace over)
	killAt    time.Time // when to send SIGKILL
	forced    bool
	cancelled bool
	preempt   bool
}

type exit struct {
	task string
	res  runner.Result
}

// Agent is one running agent.
type Agent struct {
	cfg   Config
	inv   *inventory.Inventory
	st    *domain.State
	procs map[string]*proc
	exits chan exit
	wake  chan struct{} // poked after each exit is queued
	boot  string
	gpus  []inventory.GPU
	// failedLost remembers lost tasks already reported this boot.
	reported map[string]bool
}

// Run blocks until ctx ends. Processes still running then are left alone
// (a restart reports them lost); use Stop semantics through cancel events.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 5 * time.Second
	}
	if cfg.KillAfter == 0 {
		cfg.KillAfter = 10 * time.Second
	}
	if !events.ValidKey(cfg.Node) {
		return fmt.Errorf("gpuagent: invalid node name %q", cfg.Node)
	}
	inv := cfg.Inv
	if inv == nil {
		cfg.Inventory.Node = cfg.Node
		var err error
		if inv, err = inventory.Open(cfg.Inventory); err != nil {
			return err
		}
		defer inv.Close()
	}
	if r := inv.FallbackReason(); r != "" {
		cfg.Logger.Warn().Str("backend", inv.Backend()).Str("why", r).Msg("gpuagent: no NVIDIA driver; using mock GPUs")
	}
	// Critical Xid errors mark a GPU unhealthy; the next announce reports it.
	go func() {
		_ = inv.WatchXid(ctx, func(uuid string, xid uint64) {
			if criticalXid[xid] {
				inv.MarkUnhealthy(uuid, fmt.Sprintf("Xid %d", xid))
			}
		})
	}()
	a := &Agent{cfg: cfg, inv: inv, st: domain.NewState(), procs: map[string]*proc{}, exits: make(chan exit, 64), wake: make(chan struct{}, 1),
		boot: uuid.NewString(), reported: map[string]bool{}}
	return a.run(ctx)
}

func (a *Agent) run(ctx context.Context) error {
	hb, err := a.cfg.JS.CreateOrUpdateKeyValue(ctx, events.HeartbeatKV(a.cfg.Replicas))
	if err != nil {
		return events.Replicated("bucket "+events.HeartbeatBucket, a.cfg.Replicas, err)
	}
	// The runtime folds the log and follows it; the agent's reaction runs
	// with the fold's lock held, after each batch, every 200 ms and at
	// each process exit.
	f := service.New("gpuagent", a.cfg.Log, a.cfg.Logger, nil)
	var lastBeat time.Time
	err = f.Run(ctx, service.Hooks{
		CaughtUp: func(ctx context.Context) error {
			var err error
			f.Read(func(st *domain.State) {
				a.st = st
				// Announce the inventory.
				if err = a.announce(ctx, true); err != nil {
					return
				}
				a.beat(ctx, hb)
				lastBeat = a.cfg.Now()
			})
			if err == nil && a.cfg.Ready != nil {
				a.cfg.Ready()
			}
			return err
		},
		React: func(ctx context.Context) error {
			f.Read(func(st *domain.State) {
				a.st = st
				for drained := false; !drained; {
					select {
					case x := <-a.exits:
						a.exited(ctx, x)
					default:
						drained = true
					}
				}
				a.escalate()
				if now := a.cfg.Now(); now.Sub(lastBeat) >= a.cfg.Heartbeat {
					lastBeat = now
					a.beat(ctx, hb)
					if err := a.announce(ctx, false); err != nil {
						a.cfg.Logger.Warn().Err(err).Msg("gpuagent: announce failed")
					}
				}
				a.reconcile(ctx)
			})
			return nil
		},
		Tick: 200 * time.Millisecond,
		Wake: a.wake,
	})
	f.Read(func(st *domain.State) { a.stopAll() })
	return err
}

func (a *Agent) beat(ctx context.Context, kv jetstream.KeyValue) {
	v, _ := json.Marshal(map[string]any{"node": a.cfg.Node, "boot_id": a.boot, "time": a.cfg.Now().UTC(), "running": len(a.procs)})
	if _, err := kv.Put(ctx, a.cfg.Node, v); err != nil && ctx.Err() == nil {
		a.cfg.Logger.Warn().Err(err).Msg("gpuagent: heartbeat failed")
	}
}

// announce publishes available on start and whenever the inventory or
// health changed; health changes also publish unhealthy.
func (a *Agent) announce(ctx context.Context, force bool) error {
	gpus, err := a.inv.GPUs()
	if err != nil {
		return err
	}
	if !force && reflect.DeepEqual(gpus, a.gpus) {
		return nil
	}
	var bad []string
	for _, g := range gpus {
		if !g.Healthy {
			bad = append(bad, g.UUID)
		}
	}
	prevBad := map[string]bool{}
	for _, g := range a.gpus {
		if !g.Healthy {
			prevBad[g.UUID] = true
		}
	}
	a.gpus = gpus
	ev := events.Available{Node: a.cfg.Node, BootID: a.boot, Driver: a.inv.Driver()}
	for _, g := range gpus {
		ev.GPUs = append(ev.GPUs, events.GPU{UUID: g.UUID, Index: g.Index, Model: g.Model, MemoryMiB: g.MemoryMiB, Healthy: g.Healthy})
		if g.Healthy && a.st.Owner[g.UUID] == "" {
			ev.FreeGPUs++
		}
	}
	if _, err := events.Append(ctx, a.cfg.Log, ev, events.Meta{Time: a.cfg.Now()}, "", nil); err != nil {
		return err
	}
	var newBad []string
	for _, u := range bad {
		if !prevBad[u] {
			newBad = append(newBad, u)
		}
	}
	if len(newBad) > 0 {
		_, err = events.Append(ctx, a.cfg.Log, events.Unhealthy{Node: a.cfg.Node, GPUs: newBad, Reason: "NVML reports the GPU unhealthy"}, events.Meta{Time: a.cfg.Now()}, "", nil)
	}
	return err
}

// mine returns this node's placement of t (ok false if none); rank0 is
// true when this node runs the command.
func (a *Agent) mine(t *domain.Task) (p events.Placement, rank0, ok bool) {
	for i, pl := range t.Placements {
		if pl.Node == a.cfg.Node {
			return pl, i == 0, true
		}
	}
	return events.Placement{}, false, false
}

// reconcile compares the folded log with the processes of this boot.
func (a *Agent) reconcile(ctx context.Context) {
	// Processes the log no longer places here (requeued after this node was
	// declared lost, say) are stopped without a report.
	for id, pr := range a.procs {
		t := a.st.Tasks[id]
		if pr.p == nil || pr.signalled {
			continue
		}
		placed := false
		if t != nil {
			_, _, placed = a.mine(t)
		}
		if !placed || t.DispatchSeq != pr.dispatch {
			if t != nil && t.State == domain.Cancelled {
				continue // handled below: cancelled tasks are reported
			}
			pr.orphan, pr.signalled, pr.termAt = true, true, a.cfg.Now()
			a.cfg.Logger.Warn().Str("task", id).Msg("gpuagent: task no longer placed here; stopping its process")
		}
	}
	for _, t := range a.st.Active() {
		pl, rank0, ok := a.mine(t)
		if !ok || !rank0 {
			continue
		}
		pr := a.procs[t.ID]
		switch {
		case t.State == domain.Dispatched && pr == nil:
			a.start(ctx, t, pl)
		case (t.State == domain.Running || t.State == domain.Preempting || t.State == domain.Cancelled) && pr == nil && !a.reported[t.ID]:
			// Started by an earlier boot: the process is gone with it.
			a.reported[t.ID] = true
			if t.State == domain.Preempting {
				a.append(ctx, events.Preempted{TaskID: t.ID, Node: a.cfg.Node, Checkpoint: t.Checkpoint, Forced: true, ExitCode: -1,
					LostGPUSeconds: a.lost(t)}, fmt.Sprintf("preempted:%s:%d", t.ID, t.DispatchSeq))
				continue
			}
			a.append(ctx, events.Failed{TaskID: t.ID, Node: a.cfg.Node, ExitCode: -1, Error: "agent restarted; the task's process was lost"},
				fmt.Sprintf("exit:%s:%d", t.ID, t.DispatchSeq))
		case t.State == domain.Preempting && pr != nil && !pr.signalled:
			sig := domain.Signals[t.PreemptSignal]
			if sig == 0 {
				sig = syscall.SIGUSR1
			}
			grace := time.Duration(t.GraceS * float64(time.Second))
			pr.signalled, pr.preempt, pr.termAt = true, true, a.cfg.Now().Add(grace)
			a.cfg.Logger.Info().Str("task", t.ID).Str("signal", t.PreemptSignal).Dur("grace", grace).Msg("gpuagent: preempting")
			_ = pr.p.SignalJob(sig)
		case t.State == domain.Cancelled && pr != nil && !pr.signalled:
			pr.signalled, pr.cancelled = true, true
			pr.termAt = a.cfg.Now() // SIGTERM at once
		}
	}
}

// stopAll stops this boot's processes when the agent stops: a restarted
// agent cannot adopt them (it reports them lost), so leaving them running
// would let their GPUs be given out twice. SIGTERM, then SIGKILL after
// KillAfter (at most 5 s here, shutdown must not hang).
func (a *Agent) stopAll() {
	if len(a.procs) == 0 {
		return
	}
	wait := a.cfg.KillAfter
	if wait > 5*time.Second {
		wait = 5 * time.Second
	}
	for _, pr := range a.procs {
		if pr.p != nil {
			_ = pr.p.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		alive := 0
		for _, pr := range a.procs {
			if pr.p != nil && !pr.p.Exited() {
				alive++
			}
		}
		if alive == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, pr := range a.procs {
		if pr.p != nil && !pr.p.Exited() {
			_ = pr.p.Signal(syscall.SIGKILL)
		}
	}
}

// escalate sends SIGTERM after the grace period and SIGKILL after that.
func (a *Agent) escalate() {
	now := a.cfg.Now()
	for _, pr := range a.procs {
		switch {
		case pr.signalled && pr.killAt.IsZero() && !pr.termAt.IsZero() && !now.Before(pr.termAt):
			pr.forced = pr.preempt
			pr.killAt = now.Add(a.cfg.KillAfter)
			_ = pr.p.Signal(syscall.SIGTERM)
		case !pr.killAt.IsZero() && !now.Before(pr.killAt):
			_ = pr.p.Signal(syscall.SIGKILL)
			pr.killAt = now.Add(time.Hour)
		}
	}
}

func (a *Agent) start(ctx context.Context, t *domain.Task, pl events.Placement) {
	taskDir := filepath.Join(a.cfg.DataDir, "tasks", t.ID)
	ckpt := filepath.Join(a.cfg.CheckpointRoot, t.ID)
	// 0. The exported environment is in the task's submitted event only.
	sub, err := events.ReadSubmitted(ctx, a.cfg.Log, t.ID, t.SubmitSeq)
	if errors.Is(err, events.ErrNotSubmitted) {
		a.procs[t.ID] = &proc{task: t.ID, dispatch: t.DispatchSeq} // placeholder until the failure folds
		a.append(ctx, events.Failed{TaskID: t.ID, Node: a.cfg.Node, ExitCode: -1, Error: "could not start: " + err.Error()},
			fmt.Sprintf("exit:%s:%d", t.ID, t.DispatchSeq))
		delete(a.procs, t.ID)
		a.reported[t.ID] = true
		return
	}
	if err != nil {
		a.cfg.Logger.Warn().Err(err).Str("task", t.ID).Msg("gpuagent: could not read the task's submission; retrying")
		return // the next pass tries again
	}
	// 1. Claim the start in the log, guarded: a cancel that came first wins.
	_, err = events.Append(ctx, a.cfg.Log, events.Started{TaskID: t.ID, Node: a.cfg.Node, LogDir: taskDir}, events.Meta{Time: a.cfg.Now()},
		fmt.Sprintf("started:%s:%d", t.ID, t.DispatchSeq), &events.Expect{Filter: events.TaskSubjects(t.ID), LastSeq: t.LastSeq})
	if errors.Is(err, events.ErrConflict) {
		return // the task changed; the next pass sees why
	}
	if err != nil {
		a.cfg.Logger.Error().Err(err).Str("task", t.ID).Msg("gpuagent: could not record start")
		return
	}
	// 2. Start the process.
	placements, _ := json.Marshal(t.Placements)
	var env []string
	for _, k := range sortedKeys(sub.Env) {
		env = append(env, k+"="+sub.Env[k])
	}
	env = append(env,
		"CUDA_VISIBLE_DEVICES="+strings.Join(pl.GPUs, ","),
		"GPUQ_TASK_ID="+t.ID,
		"GPUQ_CHECKPOINT_DIR="+ckpt,
		"GPUQ_NATS_URL="+a.cfg.NATSURL,
		"GPUQ_NODE="+a.cfg.Node,
		"GPUQ_PLACEMENTS="+string(placements),
	)
	if t.ResumeFrom != "" {
		env = append(env, "GPUQ_RESUME_FROM="+t.ResumeFrom)
	}
	_ = os.MkdirAll(ckpt, 0o755)
	dir := taskDir
	if st, err := os.Stat(t.Dir); t.Dir != "" && err == nil && st.IsDir() {
		dir = t.Dir // the submitter's working directory, when this node has it
	}
	_ = os.MkdirAll(taskDir, 0o755)
	p, err := runner.Start(runner.Spec{TaskID: t.ID, Command: t.Command, Env: env, LogPath: filepath.Join(taskDir, "output.log"), Dir: dir})
	if err != nil {
		a.procs[t.ID] = &proc{task: t.ID, dispatch: t.DispatchSeq} // placeholder until the failure folds
		a.append(ctx, events.Failed{TaskID: t.ID, Node: a.cfg.Node, ExitCode: -1, Error: "could not start: " + err.Error()},
			fmt.Sprintf("exit:%s:%d", t.ID, t.DispatchSeq))
		delete(a.procs, t.ID)
		a.reported[t.ID] = true
		return
	}
	a.cfg.Logger.Info().Str("task", t.ID).Int("pid", p.PID()).Str("gpus", strings.Join(pl.GPUs, ",")).Msg("gpuagent: started")
	a.procs[t.ID] = &proc{p: p, task: t.ID, dispatch: t.DispatchSeq}
	go func() {
		a.exits <- exit{task: t.ID, res: <-p.Wait()}
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}()
}

// exited reports a process's end according to what the log says of it.
func (a *Agent) exited(ctx context.Context, x exit) {
	pr := a.procs[x.task]
	delete(a.procs, x.task)
	if pr == nil {
		return
	}
	a.reported[x.task] = true
	if pr.orphan {
		return
	}
	t := a.st.Tasks[x.task]
	msgID := fmt.Sprintf("exit:%s:%d", x.task, pr.dispatch)
	switch {
	case t != nil && (t.State == domain.Preempting || pr.preempt) && t.State != domain.Cancelled:
		a.append(ctx, events.Preempted{TaskID: x.task, Node: a.cfg.Node, Checkpoint: t.Checkpoint, Forced: pr.forced,
			LostGPUSeconds: map[bool]float64{true: a.lost(t), false: 0}[pr.forced], ExitCode: x.res.ExitCode},
			fmt.Sprintf("preempted:%s:%d", x.task, pr.dispatch))
	case x.res.ExitCode == 0 && !pr.cancelled:
		a.append(ctx, events.Completed{TaskID: x.task, Node: a.cfg.Node}, msgID)
	default:
		msg := fmt.Sprintf("exit code %d", x.res.ExitCode)
		if pr.cancelled {
			msg = "stopped: task cancelled"
		}
		if x.res.Err != nil {
			msg += ": " + x.res.Err.Error()
		}
		a.append(ctx, events.Failed{TaskID: x.task, Node: a.cfg.Node, ExitCode: x.res.ExitCode, Error: msg, StderrTail: pr.p.StderrTail()}, msgID)
	}
}

// lost is the GPU-seconds of work since the task's last checkpoint.
func (a *Agent) lost(t *domain.Task) float64 {
	from := t.StartedAt
	if t.CheckpointAt.After(from) {
		from = t.CheckpointAt
	}
	if from.IsZero() {
		return 0
	}
	return a.cfg.Now().Sub(from).Seconds() * float64(len(t.GPUUUIDs()))
}

func (a *Agent) append(ctx context.Context, e events.Event, msgID string) {
	if _, err := events.Append(ctx, a.cfg.Log, e, events.Meta{Time: a.cfg.Now()}, msgID, nil); err != nil && ctx.Err() == nil {
		a.cfg.Logger.Error().Err(err).Str("event", string(e.EventType())).Str("task", e.Key()).Msg("gpuagent: append failed")
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
