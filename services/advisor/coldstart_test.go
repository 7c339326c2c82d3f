package advisor

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/api"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
)

// Issue 25's day one, live: the advisor on JetStream with a fake clock.
// Three tasks declared 2 h end within seconds (the demo's quick tasks);
// then r, declared 3 min, holds the whole node for 100 s while q waits
// for it. q's P50 at submission rests on r's own estimate, not on the
// three quick runs (it is within [30 s, 10 min]), and no alarm fires
// while q waits — before the prior, the three runs made r's end "in
// seconds", q's P50 5 s, and the 2× alert fired at 30 s.
func TestColdStartLive(t *testing.T) {
	e := start(t, dt.Node("n1").GPUs(8).Available())
	at := func(d time.Duration) { e.clk.Set(t0.Add(d)) }

	// 1. Three quick runs, declared 2 h each, done in 3 s.
	for i, id := range []string{"demo-1", "demo-2", "demo-3"} {
		e.append(dt.Task().ID(id).Name(id).GPUs(2).Hours(2).SubmittedAt(t0).Submitted())
		e.append(dt.Dispatch(id, dt.On("n1", 2*i, 2*i+1)))
		e.append(events.Started{TaskID: id, Node: "n1"})
	}
	at(3 * time.Second)
	for _, id := range []string{"demo-1", "demo-2", "demo-3"} {
		e.append(events.Completed{TaskID: id, Node: "n1"})
	}

	// 2. r, declared 3 min, holds all 8 GPUs from 5 s; q arrives at 6 s.
	at(5 * time.Second)
	e.append(dt.Task().ID("r").Name("demo-holder").GPUs(8).Hours(0.05).Preemptible(false).SubmittedAt(t0.Add(5 * time.Second)).Submitted())
	e.append(dt.Dispatch("r", dt.On("n1", 0, 1, 2, 3, 4, 5, 6, 7)))
	e.append(events.Started{TaskID: "r", Node: "n1"})
	at(6 * time.Second)
	seen(e, e.append(dt.Task().ID("q").Name("demo-waiter").GPUs(8).Hours(0.05).SubmittedAt(t0.Add(6*time.Second)).Submitted()))

	a := e.next() // the advice published at q's submission
	if p50 := time.Duration(a.P50WaitS * float64(time.Second)); p50 < 30*time.Second || p50 > 10*time.Minute {
		t.Errorf("q's P50 at submission %s (advice %+v), want within [30s, 10m]", p50, a)
	}
	t.Logf("q at submission: P50 %.0f s, P90 %.0f s, basis %q", a.P50WaitS, a.P90WaitS, a.Basis)
	if a.Basis == "" {
		t.Errorf("advice %+v says nothing of what it rests on", a)
	}

	// 3. While q waits (r runs 100 s in all), every estimate is free of
	//    alarms.
	for d := 10 * time.Second; d <= 105*time.Second; d += 5 * time.Second {
		at(d)
		if a := e.estimate(api.EstimateRequest{TaskID: "q"}); a.Alert != "" {
			t.Fatalf("at %s: alert %q (P50 %.0f s)", d, a.Alert, a.P50WaitS)
		}
	}
	e.append(events.Completed{TaskID: "r", Node: "n1"})
	at(106 * time.Second)
	e.append(dt.Dispatch("q", dt.On("n1", 0, 1, 2, 3, 4, 5, 6, 7)))
	seen(e, e.append(events.Started{TaskID: "q", Node: "n1"}))
	if s := e.stats(); s.AlertsRaised != 0 || s.Alerts != 0 {
		t.Errorf("stats %+v: alarms raised on a healthy cluster", s)
	}
}

// seen waits until the advisor has folded the log up to seq (as folded,
// asking about q, which may not be known yet).
func seen(e *env, seq uint64) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var a estimate.Advice
		if err := e.cli.Call(api.OpEstimate, api.EstimateRequest{TaskID: "q"}, &a); err == nil && a.BasedOnSeq >= seq {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("advisor did not fold seq %d within 10s", seq)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
}
