package bench

import (
	"context"
	"errors"
	"fmt"
	"github.com/rs/zerolog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/decide"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/service"
)

// SchedulerFunc runs a scheduler on log until ctx ends, calling ready once
// it has folded the log and decides. Lifecycle uses it to run
// services/scheduler itself (cmd/gpuq passes one; this module cannot
// import the services).
type SchedulerFunc func(ctx context.Context, log *jetstream.Log, ready func()) error

// LifecycleOptions size a Lifecycle run.
type LifecycleOptions struct {
	Tasks int // submitted, each of 1 GPU
	Nodes int // of 8 GPUs each
	// Scheduler: nil runs the pipelined shell of this package (see
	// Lifecycle); else this one.
	Scheduler SchedulerFunc
	// Replicas: 1 (default), one server; 3, a 3-server cluster on
	// loopback with the stream at R3.
	Replicas int
}

// LifecycleResult is one Lifecycle run.
type LifecycleResult struct {
	Tasks     int           `json:"tasks"`
	GPUs      int           `json:"gpus"`
	Took      time.Duration `json:"took_ns"`
	CPU       time.Duration `json:"cpu_ns"`    // the process's, over Took
	Events    uint64        `json:"events"`    // in the log at the end
	Scheduler string        `json:"scheduler"` // what decided
	// Of the pipelined shell only:
	Passes    int           `json:"passes,omitempty"`    // decide.Plan calls
	PlanTime  time.Duration `json:"plan_ns,omitempty"`   // spent in decide.Plan
	Conflicts int           `json:"conflicts,omitempty"` // appends refused by an expected sequence
	MaxBatch  int           `json:"max_batch,omitempty"` // most commands of one pass
	// StartsRefused: mock agents' guarded started appends refused with
	// "wrong last sequence" although they followed the dispatch. Seen
	// rarely on a cluster under load: the consumer delivered the dispatch
	// before the stream's leader had applied it. The task's completed is
	// appended anyway (unguarded), so the run still ends; the count says
	// how often.
	StartsRefused int64 `json:"starts_refused,omitempty"`
}

// PerS is completed tasks per second.
func (r LifecycleResult) PerS() float64 {
	return perSecond(int64(r.Tasks), r.Took)
}

// EventsPerS is log appends per second.
func (r LifecycleResult) EventsPerS() float64 {
	return perSecond(int64(r.Events), r.Took)
}

// Lifecycle measures tasks per second through the whole protocol on one
// fresh server: the clock starts when the first of o.Tasks submissions is
// published and stops when the last task's completed event is
// acknowledged. In the loop, all on the same JetStream stream:
//
//   - the submit path of Ingest (validate, encode, async publish with the
//     idempotency message id);
//   - a scheduler: it folds the log as it follows it and, whenever its own
//     appends are acknowledged and folded, runs decide.Plan with the
//     default policy and appends the dispatches with the same message ids
//     and expected sequences as services/scheduler, as the service does
//     (events.AppendAll: all of a pass published, then the acks awaited),
//     but folding on while the acks are awaited (the service waits for
//     them). Without a lease or heartbeats. With o.Scheduler set, that
//     scheduler instead;
//   - mock agents (one connection and one follower of dispatched events
//     for all nodes): for each dispatch they append started (guarded by
//     the dispatch's sequence, as the agent does) and completed at once,
//     asynchronously.
func Lifecycle(ctx context.Context, dir string, o LifecycleOptions) (LifecycleResult, error) {
	const per = 8
	if o.Tasks < 1 || o.Nodes < 1 {
		return LifecycleResult{}, fmt.Errorf("bench: lifecycle needs tasks and nodes (got %d, %d)", o.Tasks, o.Nodes)
	}
	res := LifecycleResult{Tasks: o.Tasks, GPUs: o.Nodes * per, Scheduler: "pkg/bench shell: decide.Plan, async appends"}
	if o.Scheduler != nil {
		res.Scheduler = "services/scheduler"
	}
	nd, err := startNodes(ctx, dir, o.Replicas)
	if err != nil {
		return res, err
	}
	defer nd.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// 1. The cluster.
	for i := 0; i < o.Nodes; i++ {
		if _, err := events.Append(ctx, nd.log, available(nodeName(i), per), events.Meta{Time: time.Now()}, "", nil); err != nil {
			return res, err
		}
	}

	// 2. The scheduler, ready once it has folded the cluster.
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	ready := make(chan struct{})
	var once sync.Once
	markReady := func() { once.Do(func() { close(ready) }) }
	var sh *shell
	sched := o.Scheduler
	if sched == nil {
		sh = &shell{pol: policy.New(policy.DefaultOptions())}
		sched = sh.run
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := sched(ctx, nd.log, markReady); err != nil && ctx.Err() == nil {
			errc <- fmt.Errorf("scheduler: %w", err)
		}
	}()
	select {
	case <-ready:
	case err := <-errc:
		return res, err
	case <-ctx.Done():
		return res, ctx.Err()
	}

	// 3. The agents; done closes when the last completion is acknowledged.
	done := make(chan struct{})
	var completed atomic.Int64
	ap, err := nd.publisher(func(_ js.JetStream, m *nats.Msg, _ *js.PubAck) {
		if strings.HasSuffix(m.Subject, "."+string(events.TypeCompleted)) && completed.Add(1) == int64(o.Tasks) {
			close(done)
		}
	})
	if err != nil {
		return res, err
	}
	ap.tolerate = func(m *nats.Msg, err error) bool {
		return strings.HasSuffix(m.Subject, "."+string(events.TypeStarted)) && jetstream.WrongLastSequence(err)
	}
	defer ap.close()
	alog, err := jetstream.Attach(ctx, ap.nc, "")
	if err != nil {
		return res, err
	}
	f, err := alog.Follow(ctx, 1, events.TaskPrefix+"*."+string(events.TypeDispatched))
	if err != nil {
		return res, err
	}
	defer f.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := agents(ctx, f, ap.js); err != nil && ctx.Err() == nil {
			errc <- fmt.Errorf("agents: %w", err)
		}
	}()

	// 4. Submissions, timed from the first.
	sp, err := nd.publisher(nil)
	if err != nil {
		return res, err
	}
	defer sp.close()
	start, cpu := time.Now(), cpuTime()
	sub := newSubmitter(sp.js)
	for i := 0; i < o.Tasks; i++ {
		if i%1024 == 0 && ctx.Err() != nil {
			return res, ctx.Err()
		}
		r := request(i)
		r.Priority = []string{"low", "medium", "high"}[i%3]
		if err := sub.submit(r, time.Now()); err != nil {
			return res, err
		}
	}
	if err := sp.wait(ctx); err != nil {
		return res, err
	}
	select {
	case <-done:
	case err := <-errc:
		return res, err
	case err := <-ap.errs:
		return res, fmt.Errorf("agents: %w", err)
	case <-ctx.Done():
		return res, ctx.Err()
	}
	res.Took, res.CPU = time.Since(start), cpuTime()-cpu
	res.StartsRefused = ap.tolerated.Load()
	res.Events, _ = nd.lastSeq(ctx)
	cancel()
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
		if sh != nil {
			res.Passes, res.PlanTime, res.Conflicts, res.MaxBatch = sh.passes, sh.planTime, sh.conflicts, sh.maxBatch
		}
	case <-time.After(10 * time.Second): // the server's shutdown ends what is left
	}
	return res, nil
}

// agents plays every node's agent for tasks that finish at once: for each
// dispatched event, started (guarded: the task's last event must still be
// the dispatch) and completed, with the agent's message ids.
func agents(ctx context.Context, f events.Follower, j js.JetStream) error {
	for {
		m, err := f.Next(ctx)
		if err != nil {
			return err
		}
		r, err := events.Decode(m)
		if err != nil {
			return err
		}
		d, ok := r.Event.(events.Dispatched)
		if !ok || len(d.Placements) == 0 {
			continue
		}
		now := time.Now()
		node := d.Placements[0].Node
		seq := strconv.FormatUint(m.Seq, 10)
		subj, data, _, err := events.Encode(events.Started{TaskID: d.TaskID, Node: node, PID: 4242,
			LogDir: "/var/lib/gpuq/tasks/" + d.TaskID}, events.Meta{Time: now, CausationID: r.Envelope.ID})
		if err != nil {
			return err
		}
		msg := nats.NewMsg(subj)
		msg.Data = data
		msg.Header.Set(js.MsgIDHeader, "started:"+d.TaskID+":"+seq)
		msg.Header.Set(js.ExpectedLastSubjSeqHeader, seq)
		msg.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", events.TaskSubjects(d.TaskID))
		if _, err := j.PublishMsgAsync(msg, stall); err != nil {
			return err
		}
		subj, data, _, err = events.Encode(events.Completed{TaskID: d.TaskID, Node: node}, events.Meta{Time: now})
		if err != nil {
			return err
		}
		if _, err := j.PublishAsync(subj, data, js.WithMsgID("exit:"+d.TaskID+":"+seq), stall); err != nil {
			return err
		}
	}
}

// shell is the scheduler of Lifecycle: services/scheduler's loop (fold,
// learning run times from completions; follow; decide when the own appends
// are folded), folding while a pass's acks are awaited.
type shell struct {
	pol  *policy.Policy
	pred *estimate.Predictor

	passes, conflicts, maxBatch int
	planTime                    time.Duration
}

// run is a SchedulerFunc. Its appends go out on the log's own connection,
// as the service's do.
func (s *shell) run(ctx context.Context, log *jetstream.Log, ready func()) error {
	// The services' runtime folds the log and follows it; the shell's
	// reaction is the scheduler's: decide once the own appends are folded,
	// fold on while a pass's acks are awaited.
	s.pred = estimate.NewPredictor(0)
	f := service.New("bench", log, zerolog.Nop(), nil)
	// waitFor is the highest sequence of the own appends; acked delivers
	// the outcome of the pass whose acks are awaited (nil: none is). The
	// next pass runs once both are done: its appends acknowledged and
	// folded.
	var (
		waitFor uint64
		acked   chan passAcks
	)
	wake := make(chan struct{}, 1)
	return f.Run(ctx, service.Hooks{
		Applied: func(st *domain.State, r events.Record, skipped string) {
			if skipped == "" {
				s.learn(st, r)
			}
		},
		CaughtUp: func(context.Context) error { ready(); return nil },
		React: func(ctx context.Context) error {
			if acked != nil {
				select {
				case a := <-acked:
					acked = nil
					if a.err != nil {
						return a.err
					}
					s.conflicts += a.conflicts
					waitFor = max(waitFor, a.last)
				default:
					return nil
				}
			}
			var (
				msgs []events.Msg
				err  error
			)
			f.Read(func(st *domain.State) {
				if st.Seq >= waitFor {
					msgs, err = s.pass(st)
				}
			})
			if err != nil || len(msgs) == 0 {
				return err
			}
			acked = make(chan passAcks, 1)
			go func(c chan<- passAcks) {
				c <- appendPass(ctx, log, msgs)
				select {
				case wake <- struct{}{}:
				default:
				}
			}(acked)
			return nil
		},
		Tick: time.Second,
		Wake: wake,
	})
}

// learn learns run times from a folded completion, as the service does.
func (s *shell) learn(st *domain.State, r events.Record) { s.pred.Learn(st, r) }

// pass runs decide.Plan and returns its commands as appends, with the
// same message ids and expected sequences as services/scheduler's.
func (s *shell) pass(st *domain.State) ([]events.Msg, error) {
	now := time.Now()
	cmds := decide.Plan(st, s.pol, now, decide.Liveness{}, s.pred.ForPolicy(now))
	s.planTime += time.Since(now)
	s.passes++
	s.maxBatch = max(s.maxBatch, len(cmds))
	msgs := make([]events.Msg, 0, len(cmds))
	for _, c := range cmds {
		subj, data, _, err := events.Encode(c.Event, events.Meta{Time: now})
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, events.Msg{Subject: subj, Data: data, MsgID: c.MsgID, Expect: c.Expect})
	}
	return msgs, nil
}

// passAcks is what the log answered to one pass's appends.
type passAcks struct {
	last      uint64 // highest sequence appended (not a duplicate)
	conflicts int    // appends refused by their expected sequence
	err       error  // any other failure
}

// appendPass appends msgs as services/scheduler does (events.AppendAll:
// all published, then the acks awaited) and sums up the answers.
func appendPass(ctx context.Context, log events.Log, msgs []events.Msg) passAcks {
	var a passAcks
	for _, r := range events.AppendAll(ctx, log, msgs) {
		switch {
		case errors.Is(r.Err, events.ErrConflict):
			a.conflicts++
		case r.Err != nil:
			a.err = r.Err
			return a
		case !r.Ack.Duplicate:
			a.last = max(a.last, r.Ack.Seq)
		}
	}
	return a
}
