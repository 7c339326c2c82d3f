package estimate_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

// TestLogOfTinyEstimates: the advisor replays a log holding tasks
// estimated at 1e-300 hours (refused by validation today, but a log keeps
// what older versions accepted): the estimates that follow are finite,
// quick and not "never". Before, the ratio learned from them (e^683)
// overflowed every prediction to a negative duration, a simulation's next
// end fell before its clock, and each one ran its 100,000 passes without
// time moving (issue 22: a replay of 3 s took 94 s), ending "never".
func TestLogOfTinyEstimates(t *testing.T) {
	cases := map[string]struct {
		hours float64
	}{
		"1e-300 hours":    {1e-300},
		"5e-324 hours":    {5e-324}, // the smallest float above 0
		"half a second":   {0.5 / 3600},
		"a normal minute": {1.0 / 60},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			l := newLog()
			l.node("n1", 8)
			at := t0
			for i := 0; i < 2; i++ {
				id := fmt.Sprintf("tiny%d", i)
				l.submit(at, id, "medium", 1, c.hours) // straight into the log: no validation
				l.run(at, id)
				at = at.Add(3 * time.Second)
				l.add(at, events.Completed{TaskID: id, Node: "n1"})
			}
			l.submit(at, "a", "medium", 8, 1)
			l.run(at, "a")
			start := time.Now()
			for i := 0; i < 3; i++ {
				id := fmt.Sprint("b", i)
				l.submit(at, id, "medium", 4, 2)
				e := l.est.Estimate(l.st, id, at)
				if e.Never || e.Capped || e.P50Wait <= 0 || e.P50Wait > 1000*time.Hour {
					t.Errorf("%s: estimate %+v, want a finite wait behind task a", id, e)
				}
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("three estimates took %s", took)
			}
			if p := l.est.Pred.Total(l.st.Tasks["b0"], 0.9); p <= 0 || p > 10*365*24*time.Hour {
				t.Errorf("predicted run %s, want positive and bounded", p)
			}
		})
	}
}

// TestCappedEstimate: an estimate whose simulation spends its budget is
// the start where it stopped, marked capped, counted and listed (Stats,
// OnCapped) — not "never".
func TestCappedEstimate(t *testing.T) {
	l := newLog()
	l.node("n1", 1)
	var mu sync.Mutex
	var told []string
	l.est.OnCapped = func(id string, simulated time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, fmt.Sprintf("%s %s", id, simulated))
	}
	for i := 0; i < 30; i++ {
		id := fmt.Sprint("t", i)
		l.submit(t0, id, "medium", 1, 1)
		if i == 0 {
			l.run(t0, id)
		}
	}
	l.est.Steps = 2 // two passes (twenty for the whole queue): the last task is not reached
	e := l.est.Estimate(l.st, "t29", t0)
	if !e.Capped || e.Never || e.Raw <= 0 {
		t.Errorf("estimate %+v, want capped with a positive wait", e)
	}
	s := l.est.Stats()
	if s.Capped == 0 || len(s.CappedTasks) == 0 || s.CappedTasks[len(s.CappedTasks)-1] != "t29" {
		t.Errorf("stats capped %d %v, want t29 listed", s.Capped, s.CappedTasks)
	}
	mu.Lock()
	if len(told) == 0 || !strings.HasPrefix(told[len(told)-1], "t29 ") {
		t.Errorf("OnCapped told %v", told)
	}
	mu.Unlock()
	for _, a := range l.est.Advise(l.st, t0) {
		if a.TaskID == "t29" && a.Method != "capped" {
			t.Errorf("advice method %q, want capped", a.Method)
		}
	}
	l.est.Steps = 0
	if e := l.est.Estimate(l.st, "t29", t0); e.Capped || e.Never {
		t.Errorf("with the default budget: %+v", e)
	}
}
