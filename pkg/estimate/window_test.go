package estimate_test

import (
	"fmt"
	"testing"

	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/policy"
)

// A coarse forward simulation stays within its window of the exact one
// (one pass per event) for a target behind a queue of short tasks while
// longer ones end around them: without the bound on a batch by the runs
// of the tasks started in the simulation, each batch ran one wave of the
// short tasks and jumped half a span, and the start drifted later with
// every wave (Alibaba at 3 nodes, docs/performance.md).
func TestForwardWindowShortTaskPipeline(t *testing.T) {
	for name, tc := range map[string]struct {
		long   int     // running 1-GPU tasks, ending 1 h apart
		short  int     // queued 1-GPU tasks ahead of the target
		hours  float64 // each short task's estimate
		window float64
	}{
		"300 tasks of 3 min, 7 long ones ending an hour apart": {long: 7, short: 300, hours: 0.05, window: 0.1},
		"1,000 tasks of 1 min":                                 {long: 7, short: 1000, hours: 1.0 / 60, window: 0.1},
		"100 tasks of 30 min":                                  {long: 6, short: 100, hours: 0.5, window: 0.1},
		"window 0.2":                                           {long: 7, short: 300, hours: 0.05, window: 0.2},
	} {
		t.Run(name, func(t *testing.T) {
			l := newLog()
			l.quiet = true
			l.node("n1", 8)
			for i := range tc.long {
				id := fmt.Sprintf("long-%d", i)
				l.submit(t0, id, "medium", 1, float64(i+1))
				l.run(t0, id)
			}
			for i := range tc.short {
				l.submit(t0, fmt.Sprintf("short-%04d", i), "medium", 1, tc.hours)
			}
			l.submit(t0, "target", "medium", 1, tc.hours)
			pol := policy.New(policy.Options{})
			pred := estimate.NewPredictor(0) // no history: the estimates are the medians
			exact, ok := estimate.ForwardWindow(l.st, pol, pred, t0, "target", 0.5, nil, 0)
			if !ok {
				t.Fatal("the exact simulation never starts the target")
			}
			coarse, ok := estimate.ForwardWindow(l.st, pol, pred, t0, "target", 0.5, nil, tc.window)
			if !ok {
				t.Fatal("the coarse simulation never starts the target")
			}
			we, wc := exact.Sub(t0), coarse.Sub(t0)
			if d := (wc - we).Abs(); d.Seconds() > tc.window*we.Seconds() {
				t.Errorf("coarse wait %s, exact %s: off by %s, more than the window %.2f of it", wc, we, d, tc.window)
			}
		})
	}
}
