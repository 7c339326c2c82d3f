package advisor

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/embedded/embeddedtest"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
	"github.com/gpuq/gpuq/pkg/policy"
)

var t0 = dt.Epoch

// clock is a fake Now that moves only when the test sets it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// env is an advisor running on an embedded JetStream, with a client
// connection that subscribes to the advice of task q.
type env struct {
	t      *testing.T
	ctx    context.Context
	log    *memlog.Log
	clk    *clock
	cli    *api.Client
	advice chan *nats.Msg
}

func start(t *testing.T, before ...events.Event) *env {
	t.Helper()
	return startWith(t, 0, before...)
}

// startWith is start with Config.AdviseEvery set.
func startWith(t *testing.T, adviseEvery time.Duration, before ...events.Event) *env {
	t.Helper()
	srv := embeddedtest.Server(t)
	svcNC := embeddedtest.Connect(t, srv, "advisor")
	cliNC := embeddedtest.Connect(t, srv, "cli")
	ctx, cancel := context.WithCancel(context.Background())
	// The log is in memory, stamped by the fake clock: the fold's clock is
	// the log's. The advice stream is real JetStream.
	clk := &clock{t: t0}
	log := memlog.New()
	log.Now = clk.Now
	js, err := jetstream.New(svcNC)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, log: log, clk: clk, cli: &api.Client{NC: cliNC, Timeout: 10 * time.Second},
		advice: make(chan *nats.Msg, 64)}
	sub, err := cliNC.ChanSubscribe(events.AdviceSubject("q"), e.advice)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := cliNC.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, ev := range before {
		e.append(ev)
	}
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Log: log, JS: js, NC: svcNC, Policy: policy.New(policy.Options{}),
			Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
			Now:    e.clk.Now, Tick: time.Hour, AdviseEvery: adviseEvery, Ready: func() { close(ready) }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run returned before ready: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("advisor not ready after 20s")
	}
	return e
}

// append writes an event to the log as the submitter, the scheduler or an
// agent would, at the fake clock's time.
func (e *env) append(ev events.Event) uint64 {
	e.t.Helper()
	ack, err := events.Append(e.ctx, e.log, ev, events.Meta{Time: e.clk.Now()}, "", nil)
	if err != nil {
		e.t.Fatalf("append %s: %v", ev.EventType(), err)
	}
	return ack.Seq
}

// next is the next advice published for q.
func (e *env) next() estimate.Advice {
	e.t.Helper()
	select {
	case m := <-e.advice:
		var a estimate.Advice
		if err := json.Unmarshal(m.Data, &a); err != nil {
			e.t.Fatalf("advice %s: %v", m.Data, err)
		}
		return a
	case <-time.After(10 * time.Second):
		e.t.Fatal("no advice for q within 10s")
	}
	return estimate.Advice{}
}

func (e *env) estimate(req api.EstimateRequest) estimate.Advice {
	e.t.Helper()
	var a estimate.Advice
	if err := e.cli.Call(api.OpEstimate, req, &a); err != nil {
		e.t.Fatalf("estimate %+v: %v", req, err)
	}
	return a
}

// folded waits until the advisor has folded the log up to seq, then a
// little longer, so that its publication for that batch is done before
// the test appends anything else.
func (e *env) folded(seq uint64) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.estimate(api.EstimateRequest{TaskID: "r"}).BasedOnSeq < seq {
		if time.Now().After(deadline) {
			e.t.Fatalf("advisor did not fold seq %d within 10s", seq)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
}

func (e *env) stats() StatsReply {
	e.t.Helper()
	var s StatsReply
	if err := e.cli.Call(api.OpStats, struct{}{}, &s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// The cluster: 8 GPUs, r (HIGH, not preemptible, 1 h) holds 6 of them; q
// (LOW, 4 GPUs, 1 h) waits for r.
func cluster() []events.Event {
	r := dt.Task().ID("r").Name("r").GPUs(6).Hours(1).Priority(domain.High).Preemptible(false).Submitted()
	return []events.Event{
		dt.Node("n1").GPUs(8).Available(),
		r, dt.Dispatch("r", dt.On("n1", 0, 1, 2, 3, 4, 5)), events.Started{TaskID: "r", Node: "n1"},
		dt.Task().ID("q").Name("q").GPUs(4).Hours(1).Priority(domain.Low).Submitted(),
	}
}

func TestEstimateOverNATS(t *testing.T) {
	e := start(t, cluster()...)

	// Advice is published for the queued task once folded.
	first := e.next()
	if first.State != "queued" || first.Reason != policy.ReasonNoCapacity || first.Position != 1 ||
		len(first.Blockers) != 1 || first.Blockers[0] != "r" || first.P50WaitS != 3600 || first.Action != domain.ItemCodeReview {
		t.Errorf("first advice %+v: want no-capacity behind r, P50 1h, code_review", first)
	}

	// The answer's keys, as scripts read them.
	var raw map[string]any
	if err := e.cli.Call(api.OpEstimate, api.EstimateRequest{TaskID: "q"}, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"task_id", "state", "position", "p50_wait_s", "p90_wait_s", "p50_start", "p90_start",
		"method", "reason", "blockers", "action", "action_text", "alert", "suggestions", "based_on_seq", "at"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("estimate answer lacks %q: %v", k, raw)
		}
	}
	plain := e.estimate(api.EstimateRequest{TaskID: "q"})
	if plain.Reason != policy.ReasonNoCapacity || plain.P50WaitS != 3600 || plain.Method != "forward-simulation" ||
		!plain.P50Start.Equal(t0.Add(time.Hour)) {
		t.Errorf("estimate %+v, want no-capacity, P50 1h", plain)
	}

	// What-ifs: the answer the task would have, changing nothing.
	seq, err := e.log.LastSeq(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	whatIfs := []struct {
		name   string
		req    api.EstimateRequest
		reason string
		p50    float64
	}{
		{"2 GPUs fit the free ones now", api.EstimateRequest{TaskID: "q", WhatIfGPUs: 2}, "starting", 0},
		{"CRITICAL cannot preempt r", api.EstimateRequest{TaskID: "q", WhatIfPriority: "critical"}, policy.ReasonNoCapacity, 3600},
		{"both", api.EstimateRequest{TaskID: "q", WhatIfGPUs: 2, WhatIfPriority: "HIGH"}, "starting", 0},
		{"8 GPUs wait for r too", api.EstimateRequest{TaskID: "q", WhatIfGPUs: 8}, policy.ReasonNoCapacity, 3600},
	}
	for _, w := range whatIfs {
		t.Run("what-if "+w.name, func(t *testing.T) {
			a := e.estimate(w.req)
			if a.Method != "forward-simulation (what-if)" || a.Reason != w.reason || a.P50WaitS != w.p50 || a.TaskID != "q" {
				t.Errorf("what-if %+v: %+v, want reason %s, P50 %gs", w.req, a, w.reason, w.p50)
			}
		})
	}
	if after, _ := e.log.LastSeq(e.ctx); after != seq {
		t.Errorf("what-ifs appended to the log: seq %d → %d", seq, after)
	}
	if again := e.estimate(api.EstimateRequest{TaskID: "q"}); again.P50WaitS != plain.P50WaitS || again.Reason != plain.Reason ||
		again.Position != plain.Position {
		t.Errorf("estimate after the what-ifs %+v, was %+v", again, plain)
	}

	// Bad input: a 4xx-style error naming the field (404 for a task that
	// does not exist, like the submitter's).
	bad := []struct {
		name     string
		body     string
		field    string
		notFound bool
	}{
		{"unknown task", `{"task_id":"nope"}`, "", true},
		{"no task id", `{}`, "task_id", false},
		{"what-if gpus 0", `{"task_id":"q","what_if_gpus":0}`, "what_if_gpus", false},
		{"what-if gpus negative", `{"task_id":"q","what_if_gpus":-2}`, "what_if_gpus", false},
		{"unknown priority", `{"task_id":"q","what_if_priority":"urgent"}`, "what_if_priority", false},
		{"what-if on a running task", `{"task_id":"r","what_if_gpus":2}`, "task_id", false},
		{"malformed", `{"task_id":`, "body", false},
		{"nested 65 deep", `{"task_id":"q","x":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`, "body", false},
		{"repeated key", `{"task_id":"q","task_id":"r"}`, "task_id", false},
	}
	for _, b := range bad {
		t.Run("bad input "+b.name, func(t *testing.T) {
			m, err := e.cli.NC.Request(api.SubjectPrefix+api.OpEstimate, []byte(b.body), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var r api.Reply
			if err := json.Unmarshal(m.Data, &r); err != nil {
				t.Fatal(err)
			}
			if r.Error == "" || r.Field != b.field || r.NotFound != b.notFound || r.Result != nil {
				t.Errorf("reply %+v, want an error on field %q (not found %v)", r, b.field, b.notFound)
			}
			if b.notFound && !strings.Contains(r.Error, "nope") {
				t.Errorf("not-found error %q does not name the task", r.Error)
			}
		})
	}
	// The same through the client, as the CLI sees them.
	if err := e.cli.Call(api.OpEstimate, api.EstimateRequest{TaskID: "nope"}, nil); !api.IsNotFound(err) {
		t.Errorf("unknown task: %v, want not found", err)
	}
	var fe *api.Error
	if err := e.cli.Call(api.OpEstimate, api.EstimateRequest{TaskID: "q", WhatIfGPUs: -1}, nil); !api.IsInvalid(err) ||
		!errors.As(err, &fe) || fe.Field != "what_if_gpus" {
		t.Errorf("what-if gpus -1: %v, want invalid what_if_gpus", err)
	}
	if err := e.cli.Call(api.OpEstimate, api.EstimateRequest{TaskID: "q", WhatIfPriority: "urgent"}, nil); !api.IsInvalid(err) ||
		!errors.As(err, &fe) || fe.Field != "what_if_priority" {
		t.Errorf("what-if priority urgent: %v, want invalid what_if_priority", err)
	}
}

// Advice is published on gpuq.advice.<id> when it changes materially, and
// only then; an alert counts once.
func TestAdvicePublishedOnChange(t *testing.T) {
	e := start(t, cluster()...)
	if a := e.next(); a.Action != domain.ItemCodeReview || a.Alert != "" {
		t.Fatalf("first advice %+v", a)
	}

	// Two GPUs of n1 fail (the two q does not wait for): nothing changes
	// for q's advice, but from now on the cluster is not whole.
	e.folded(e.append(events.Unhealthy{Node: "n1", GPUs: []string{dt.GPU("n1", 6), dt.GPU("n1", 7)}, Reason: "xid 79"}))

	// The playbook moves on: published.
	e.append(events.ChecklistUpdated{TaskID: "q", Item: domain.ItemCodeReview, Done: true})
	if a := e.next(); a.Action != domain.ItemExperimentPlan {
		t.Errorf("after code_review: action %s, want experiment_plan", a.Action)
	}

	// Nothing changes for q: nothing published; the next message is the
	// next material change.
	e.folded(e.append(events.ChecklistUpdated{TaskID: "r", Item: domain.ItemCodeReview, Done: true}))
	e.append(events.ChecklistUpdated{TaskID: "q", Item: domain.ItemExperimentPlan, Done: true})
	if a := e.next(); a.Action != domain.ItemDocumentation {
		t.Errorf("after an event that changes nothing for q, then experiment_plan: action %s, want documentation", a.Action)
	}
	if s := e.stats(); s.AlertsRaised != 0 || s.Queued != 1 {
		t.Errorf("stats before the alert %+v", s)
	}

	// Past 2× the P50 at submission (1 h), with unhealthy GPUs all along:
	// the alert, naming the cause and whom to tell, counted once.
	e.clk.Set(t0.Add(2*time.Hour + time.Second))
	e.folded(e.append(events.ChecklistUpdated{TaskID: "r", Item: domain.ItemExperimentPlan, Done: true}))
	a := e.next()
	if a.Late == nil || !a.Late.Alarm || a.Late.Cause != alarm.GPUsUnhealthy || a.Late.Tell != alarm.Operators ||
		!strings.Contains(a.Alert, "gpus_unhealthy") || !strings.Contains(a.Alert, "tell the operators") {
		t.Errorf("advice past 2× the estimate %+v (late %+v), want an alert for gpus_unhealthy to the operators", a, a.Late)
	}
	if s := e.stats(); s.AlertsRaised != 1 || s.AlertsByCause[alarm.GPUsUnhealthy] != 1 {
		t.Errorf("alerts raised %d (%v), want 1 gpus_unhealthy", s.AlertsRaised, s.AlertsByCause)
	}

	// A minute later the alert still stands (its text has the longer wait):
	// not material, not republished, not counted again.
	e.clk.Set(t0.Add(2*time.Hour + time.Minute + time.Second))
	e.folded(e.append(events.ChecklistUpdated{TaskID: "r", Item: domain.ItemDocumentation, Done: true}))
	e.append(events.ChecklistUpdated{TaskID: "q", Item: domain.ItemDocumentation, Done: true})
	if a := e.next(); a.Action != estimate.WaitCalmly || a.Alert == "" {
		t.Errorf("after documentation: %+v, want wait_calmly with the alert still set", a)
	}
	if s := e.stats(); s.AlertsRaised != 1 {
		t.Errorf("alerts raised %d, want still 1", s.AlertsRaised)
	}

	// The task leaves the queue, then starts, in separate batches: an
	// advice when it is dispatched, and a last one when it runs.
	e.append(events.Completed{TaskID: "r", Node: "n1"})
	e.folded(e.append(dt.Dispatch("q", dt.On("n1", 0, 1, 2, 3))))
	e.append(events.Started{TaskID: "q", Node: "n1"})
	var states []string
	for {
		a := e.next()
		states = append(states, a.State)
		if a.State == string(domain.Running) {
			if !a.P50Start.Equal(t0.Add(2*time.Hour+time.Minute+time.Second)) || a.Alert != "" {
				t.Errorf("last advice %+v, want the start time and no alert", a)
			}
			break
		}
		if a.State != string(domain.Queued) && a.State != string(domain.Dispatched) {
			t.Fatalf("advice in state %s (states %v)", a.State, states)
		}
	}
	if n := len(states); n < 2 || states[n-2] != string(domain.Dispatched) {
		t.Errorf("advice states %v, want dispatched then running", states)
	}
	if s := e.stats(); s.Queued != 0 || s.Alerts != 1 {
		t.Errorf("stats after the start %+v, want nothing queued and 1 alert judged", s)
	}
}

// A burst within AdviseEvery of the last re-estimate is coalesced: its
// advice is not published at once, but when the re-estimate is due —
// by the advisor's own wake, not its tick (an hour here).
func TestCoalescedAdvicePublishedWhenDue(t *testing.T) {
	const every = 2 * time.Second
	e := startWith(t, every, cluster()...)
	first := e.next()
	published := time.Now()
	if first.Position != 1 {
		t.Fatalf("first advice %+v, want position 1", first)
	}
	// A HIGH task queues ahead of q: q's position is material.
	e.append(dt.Task().ID("h").Name("h").GPUs(4).Hours(1).Priority(domain.High).Submitted())
	a := e.next()
	if a.Position != 2 {
		t.Errorf("advice after h %+v, want position 2", a)
	}
	// The first advice was published after its re-estimate; the next
	// re-estimate is due every after that one.
	if waited := time.Since(published); waited < every-200*time.Millisecond {
		t.Errorf("advice after %s, want coalesced until about %s after the first", waited, every)
	}
}
