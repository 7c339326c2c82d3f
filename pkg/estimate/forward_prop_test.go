package estimate

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// genBusy is a random cluster: nodes of 8 GPUs, most of them held by
// running tasks of every class (some not preemptible, some with a grace),
// and a queue of every class and size, one in three of them gangs or
// too large for any node.
func genBusy(t *rapid.T) (*domain.State, time.Time) {
	st := domain.NewState()
	at := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	seq := uint64(0)
	apply := func(e events.Event) {
		seq++
		st.Apply(events.Record{Seq: seq, Envelope: events.Envelope{Type: e.EventType(), Time: at}, Event: e})
	}
	prios := []string{"low", "medium", "high", "critical"}
	nodes := rapid.IntRange(1, 6).Draw(t, "nodes")
	for n := 0; n < nodes; n++ {
		var gs []events.GPU
		for i := 0; i < 8; i++ {
			gs = append(gs, events.GPU{UUID: fmt.Sprintf("n%d-g%d", n, i), Index: i, Model: "A100", MemoryMiB: 40960, Healthy: true})
		}
		apply(events.Available{Node: fmt.Sprintf("n%d", n), GPUs: gs})
	}
	for n := 0; n < nodes; n++ {
		for g := 0; g < 8; {
			k := min(rapid.IntRange(1, 8).Draw(t, "k"), 8-g)
			if rapid.IntRange(0, 4).Draw(t, "idle") == 0 {
				g += k
				continue
			}
			id := fmt.Sprintf("r%d-%d", n, g)
			at = at.Add(time.Duration(rapid.IntRange(0, 90).Draw(t, "gap")) * time.Minute)
			apply(events.Submitted{TaskID: id, Name: id, Team: "a", Priority: rapid.SampledFrom(prios).Draw(t, "rprio"), GPUs: k,
				Hours: float64(rapid.IntRange(1, 80).Draw(t, "rtenths")) / 10, Hypothesis: "h", Command: "c",
				Preemptible: rapid.IntRange(0, 3).Draw(t, "rfixed") > 0, GraceS: float64(rapid.SampledFrom([]int{0, 0, 60, 600}).Draw(t, "grace")), SubmittedAt: at})
			var ids []string
			for x := g; x < g+k; x++ {
				ids = append(ids, fmt.Sprintf("n%d-g%d", n, x))
			}
			apply(events.Dispatched{TaskID: id, Placements: []events.Placement{{Node: fmt.Sprintf("n%d", n), GPUs: ids}}})
			apply(events.Started{TaskID: id, Node: fmt.Sprintf("n%d", n)})
			g += k
		}
	}
	for i, n := 0, rapid.IntRange(0, 60).Draw(t, "queued"); i < n; i++ {
		at = at.Add(time.Duration(rapid.IntRange(0, 30).Draw(t, "qgap")) * time.Minute)
		id := fmt.Sprintf("q%d", i)
		apply(events.Submitted{TaskID: id, Name: id, Team: "a", Priority: rapid.SampledFrom(prios).Draw(t, "qprio"),
			GPUs: rapid.SampledFrom([]int{1, 1, 2, 4, 8, 16, 64}).Draw(t, "qgpus"), Hours: float64(rapid.IntRange(1, 120).Draw(t, "qtenths")) / 10,
			Hypothesis: "h", Command: "c", Preemptible: true, SubmittedAt: at})
	}
	if st.Ignored > 0 {
		t.Fatalf("the fold refused %d events", st.Ignored)
	}
	return st, at.Add(time.Duration(rapid.IntRange(0, 600).Draw(t, "later")) * time.Minute)
}

// The forward simulation (its ends by task pointer, in a heap of its
// own) gives every start exactly as the reference it replaced
// (forward_ref_test.go): the whole queue's, and one task's, with and
// without a window, arrivals and a horizon that caps it.
func TestPropForwardSameAsReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		st, now := genBusy(t)
		o := policy.DefaultOptions()
		o.Preemption = rapid.SampledFrom([]string{policy.CriticalOnly, policy.Ladder}).Draw(t, "preemption")
		pol := policy.New(o)
		pred := NewPredictor(0)
		window := rapid.SampledFrom([]float64{0, DefaultCoarse, 0.5}).Draw(t, "window")
		steps := rapid.SampledFrom([]int{3, 20, forwardSteps}).Draw(t, "steps")
		var arr []Arrival
		for i, n := 0, rapid.IntRange(0, 5).Draw(t, "arrivals"); i < n; i++ {
			arr = append(arr, Arrival{At: now.Add(time.Duration(i+1) * 20 * time.Minute), GPUs: rapid.SampledFrom([]int{1, 2, 8}).Draw(t, "agpus"),
				Hours: 1, Priority: domain.Priority(rapid.IntRange(int(domain.Low), int(domain.Critical)).Draw(t, "aprio"))})
		}
		target := ""
		if q := st.Queued(); len(q) > 0 && rapid.Bool().Draw(t, "one") {
			target = q[rapid.IntRange(0, len(q)-1).Draw(t, "target")].ID
		}
		before := st.Seq
		want, wf := refForward(st, pol, pred, now, target, 0.5, arr, steps, window)
		got, gf := forward(st, pol, pred, now, target, 0.5, arr, steps, window)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("starts differ (-reference +forward):\n%s", diff)
		}
		if (wf == nil) != (gf == nil) || wf != nil && (wf.capped != gf.capped || !wf.vnow.Equal(gf.vnow)) {
			t.Fatalf("the simulations stopped apart: reference %+v, forward %+v", wf, gf)
		}
		if st.Seq != before {
			t.Fatalf("the state moved from seq %d to %d", before, st.Seq)
		}
	})
}
