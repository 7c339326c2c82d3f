package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
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
			estimate.SeedFormula(queuedView(st), t)
		}
	})
}
