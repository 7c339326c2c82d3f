package policy

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestPropGangFits: for a task without constraints larger than any node,
// gangFits answers exactly whether place succeeds on a map without
// reservations, whatever the nodes' sizes, health and free GPUs.
func TestPropGangFits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := domain.NewState()
		nodes := rapid.IntRange(1, 12).Draw(t, "nodes")
		f := &freeMap{reserved: map[string]time.Time{}}
		for i := 0; i < nodes; i++ {
			name := fmt.Sprintf("n%02d", i)
			gpus := rapid.IntRange(1, 8).Draw(t, "gpus")
			gs := make([]events.GPU, gpus)
			healthy := 0
			for g := range gs {
				ok := rapid.IntRange(0, 5).Draw(t, "bad") != 0
				gs[g] = events.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, g), Index: g, Model: "A100", MemoryMiB: 81920, Healthy: ok}
				if ok {
					healthy++
				}
			}
			s.Apply(events.Record{Seq: s.Seq + 1, Envelope: events.Envelope{Type: events.TypeAvailable},
				Event: events.Available{Node: name, GPUs: gs, FreeGPUs: gpus}})
			f.maxNode = max(f.maxNode, healthy)
			// None, all or some of the healthy GPUs are free, in index
			// order (whole free nodes are what a gang takes first).
			mode := rapid.IntRange(0, 2).Draw(t, "mode")
			var free []domain.GPU
			for _, g := range s.Nodes[name].GPUs {
				if g.Healthy && (mode == 1 || mode == 2 && rapid.Bool().Draw(t, "free")) {
					free = append(free, g)
				}
			}
			if len(free) > 0 {
				f.push(name, free, healthy)
			}
		}
		if f.maxNode == 0 {
			t.Skip("no healthy GPU")
		}
		for g := f.maxNode + 1; g <= f.count+1; g++ {
			_, placed := place(&domain.Task{ID: "x", GPUs: g}, f, s, time.Time{})
			if got := gangFits(g, f); got != placed {
				t.Fatalf("gangFits(%d) = %v, place succeeds: %v; free %v", g, got, placed, counts(f))
			}
		}
	})
}

func counts(f *freeMap) map[string]int {
	out := map[string]int{}
	for i, n := range f.avail {
		out[n] = len(f.gpus[i])
	}
	return out
}
