package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
)

// SchedulerFunc runs a scheduler on log until ctx ends, with its metrics
// registered in reg, calling ready once it has folded the log and
// decides. Lifecycle runs services/scheduler itself with it (cmd/gpuq
// passes one; this module cannot import the services).
type SchedulerFunc func(ctx context.Context, log *jetstream.Log, reg prometheus.Registerer, ready func()) error

// LifecycleOptions size a Lifecycle run.
type LifecycleOptions struct {
	Tasks int // submitted, each of 1 GPU
	Nodes int // of 8 GPUs each
	// Scheduler decides (required): services/scheduler under gpuq bench.
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
	// From the scheduler's own metrics (gpuq_scheduler_*), over the whole
	// run: its passes that appended something, the time from each such
	// pass's decision to its appends' outcome, the decisions appended,
	// and those refused by an expected sequence.
	Passes    int           `json:"passes,omitempty"`
	PassTime  time.Duration `json:"pass_ns,omitempty"`
	Decisions int           `json:"decisions,omitempty"`
	Conflicts int           `json:"conflicts,omitempty"`
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

// perPass is the scheduler's mean decisions per pass.
func perPass(r LifecycleResult) float64 {
	if r.Passes == 0 {
		return 0
	}
	return float64(r.Decisions) / float64(r.Passes)
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
//   - the scheduler o.Scheduler — services/scheduler under gpuq bench,
//     with its lease, its live digest, its snapshots and its metrics, as
//     it runs in production, less the node timeout (the mock agents send
//     no heartbeats) and the logging;
//   - mock agents (one connection and one follower of dispatched events
//     for all nodes): for each dispatch they append started (guarded by
//     the dispatch's sequence, as the agent does) and completed at once,
//     asynchronously.
func Lifecycle(ctx context.Context, dir string, o LifecycleOptions) (LifecycleResult, error) {
	const per = 8
	if o.Tasks < 1 || o.Nodes < 1 {
		return LifecycleResult{}, fmt.Errorf("bench: lifecycle needs tasks and nodes (got %d, %d)", o.Tasks, o.Nodes)
	}
	if o.Scheduler == nil {
		return LifecycleResult{}, errors.New("bench: lifecycle needs a scheduler (gpuq bench passes services/scheduler)")
	}
	res := LifecycleResult{Tasks: o.Tasks, GPUs: o.Nodes * per, Scheduler: "services/scheduler"}
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
	reg := prometheus.NewRegistry()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := o.Scheduler(ctx, nd.log, reg, markReady); err != nil && ctx.Err() == nil {
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
	case <-time.After(10 * time.Second): // the server's shutdown ends what is left
	}
	res.Passes, res.PassTime, res.Decisions, res.Conflicts = schedulerFigures(reg)
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

// schedulerFigures reads the scheduler's passes, their time, its
// decisions and the decisions refused from its metrics (zero where it
// registered none).
func schedulerFigures(g prometheus.Gatherer) (passes int, took time.Duration, decisions, refused int) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, 0, 0, 0
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "gpuq_scheduler_pass_duration_seconds":
				passes += int(m.GetHistogram().GetSampleCount())
				took += time.Duration(m.GetHistogram().GetSampleSum() * float64(time.Second))
			case "gpuq_scheduler_decisions_total":
				decisions += int(m.GetCounter().GetValue())
			case "gpuq_scheduler_decisions_refused_total":
				refused += int(m.GetCounter().GetValue())
			}
		}
	}
	return passes, took, decisions, refused
}
