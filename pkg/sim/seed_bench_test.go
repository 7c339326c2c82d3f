package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"pgregory.net/rapid"
)

// BenchmarkSeedFormula: SeedFormula walks every task the state ever had;
// on a view of the queued ones it costs what the queue holds.
func BenchmarkSeedFormula(b *testing.B) {
	st := domain.NewState()
	seq := uint64(0)
	at := epoch
	apply := func(e events.Event) {
		seq++
		st.Apply(events.Record{Seq: seq, Envelope: events.Envelope{Type: e.EventType(), Time: at}, Event: e})
	}
	gs := make([]events.GPU, 8)
	for g := range gs {
		gs[g] = events.GPU{UUID: fmt.Sprintf("g%d", g), Index: g, Model: "A100", Healthy: true}
	}
	apply(events.Available{Node: "n1", GPUs: gs})
	for i := range 60000 {
		id := fmt.Sprintf("done-%d", i)
		apply(events.Submitted{TaskID: id, Priority: "medium", GPUs: 1, Hours: 1, SubmittedAt: at})
		apply(events.Dispatched{TaskID: id, Placements: []events.Placement{{Node: "n1", GPUs: []string{"g0"}}}})
		apply(events.Started{TaskID: id, Node: "n1"})
		at = at.Add(time.Second)
		apply(events.Completed{TaskID: id, Node: "n1"})
	}
	for i := range 200 {
		apply(events.Submitted{TaskID: fmt.Sprintf("q-%d", i), Priority: "medium", GPUs: 1, Hours: 1, SubmittedAt: at})
	}
	t := st.Tasks["q-199"]
	b.Run("state", func(b *testing.B) {
		for b.Loop() {
			estimate.SeedFormula(st, t)
		}
	})
	b.Run("queued-view", func(b *testing.B) {
		for b.Loop() {
			estimate.SeedFormula(queuedView(st, t.Priority), t)
		}
	})
}

// TestPropQueuedView: the seed formula on the view of the classes above
// the task's is the formula on the whole state, for tasks of every class
// among queued, running and finished ones (whole hours, so that the sums
// are exact in any order).
func TestPropQueuedView(t *testing.T) {
	classes := []string{"low", "medium", "high", "critical"}
	rapid.Check(t, func(rt *rapid.T) {
		st := domain.NewState()
		seq := uint64(0)
		apply := func(e events.Event) {
			seq++
			st.Apply(events.Record{Seq: seq, Envelope: events.Envelope{Type: e.EventType(), Time: epoch}, Event: e})
		}
		gs := make([]events.GPU, 8)
		for g := range gs {
			gs[g] = events.GPU{UUID: fmt.Sprintf("g%d", g), Index: g, Model: "A100", Healthy: true}
		}
		apply(events.Available{Node: "n1", GPUs: gs})
		n := rapid.IntRange(1, 30).Draw(rt, "tasks")
		for i := range n {
			id := fmt.Sprintf("t%d", i)
			apply(events.Submitted{TaskID: id, Priority: rapid.SampledFrom(classes).Draw(rt, "class"), GPUs: 1,
				Hours: float64(rapid.IntRange(1, 9).Draw(rt, "hours")), SubmittedAt: epoch})
			switch rapid.IntRange(0, 2).Draw(rt, "fate") {
			case 1: // running
				apply(events.Dispatched{TaskID: id, Placements: []events.Placement{{Node: "n1", GPUs: []string{fmt.Sprintf("g%d", i%8)}}}})
			case 2: // finished
				apply(events.Cancelled{TaskID: id})
			}
		}
		for _, tk := range st.Tasks {
			if got, want := estimate.SeedFormula(queuedView(st, tk.Priority), tk), estimate.SeedFormula(st, tk); got != want {
				rt.Fatalf("%s (%s): on the view %s, on the state %s", tk.ID, tk.Priority, got, want)
			}
		}
	})
}
