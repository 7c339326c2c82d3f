package sim

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/policy"
)

// No class waits unboundedly under the starvation guard: on one node, a
// stream of whole-node HIGH tasks arriving faster than the node serves
// them keeps it busy for good, and LOW tasks arrive among them (no task
// can backfill: each takes the whole node). Without ClassAging a LOW task
// starts only when no HIGH task is queued, which the stream delays ever
// longer; with it, no task submitted more than 2 × ClassAging after a
// LOW task (a HIGH one's head start) starts before it, so it waits at
// most for the tasks submitted before that.
func TestPropClassAgingBoundsWait(t *testing.T) {
	var maxOff, maxOn time.Duration
	rapid.Check(t, func(t *rapid.T) {
		aging := time.Duration(rapid.IntRange(1, 24).Draw(t, "aging-h")) * time.Hour
		gap := time.Duration(rapid.IntRange(30, 120).Draw(t, "gap-min")) * time.Minute
		run := gap + time.Duration(rapid.IntRange(1, 60).Draw(t, "over-min"))*time.Minute // > gap: overload
		lowEvery := rapid.IntRange(3, 10).Draw(t, "low-every")
		n := rapid.IntRange(40, 120).Draw(t, "tasks")
		var tasks []Task
		for i := range n {
			p := domain.High
			if i%lowEvery == lowEvery-1 {
				p = domain.Low
			}
			tasks = append(tasks, Task{ID: fmt.Sprintf("t%03d", i), Team: SingleTeam, Priority: p, Submit: time.Duration(i) * gap,
				Duration: run, GPUs: 8, Hours: run.Hours()})
		}
		waits := func(a time.Duration) []time.Duration {
			cfg := Config{Nodes: 1, GPUsPerNode: 8, Policies: []string{GPUQ}, Epoch: epoch, Options: policy.Options{ClassAging: a}}
			rep, err := Run(context.Background(), cfg, Scenario{Trace: "aging", Format: "test"}, tasks)
			if err != nil {
				t.Fatal(err)
			}
			return rep.Waits[GPUQ]
		}
		off, on := waits(0), waits(aging)
		for i, tk := range tasks {
			if tk.Priority != domain.Low {
				continue
			}
			// Off: strict class order — no HIGH task queued when the LOW
			// one starts, i.e. none submitted before it starts after it.
			start := tk.Submit + off[i]
			for j, u := range tasks {
				if u.Priority == domain.High && u.Submit < start && u.Submit+off[j] > start {
					t.Fatalf("off: LOW %s started at %s, ahead of HIGH %s queued since %s", tk.ID, start, u.ID, u.Submit)
				}
			}
			maxOff, maxOn = max(maxOff, off[i]), max(maxOn, on[i])
			start = tk.Submit + on[i]
			ahead := 0 // tasks that may go before it: submitted before its submit + 2 × aging
			for j, u := range tasks {
				if u.Submit <= tk.Submit+2*aging {
					ahead++
				} else if u.Submit+on[j] < start {
					t.Fatalf("on: %s, submitted at %s, started at %s, before LOW %s submitted at %s (aging %s)", u.ID, u.Submit, u.Submit+on[j], tk.ID, tk.Submit, aging)
				}
			}
			if bound := time.Duration(ahead) * run; on[i] > bound {
				t.Fatalf("on: LOW %s waited %s, more than %s", tk.ID, on[i], bound)
			}
		}
	})
	t.Logf("longest LOW wait over the cases: %s without the guard, %s with it", maxOff, maxOn)
}
