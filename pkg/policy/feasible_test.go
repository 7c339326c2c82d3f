package policy

import (
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestPropFreeMapLens: whatever is taken from, returned to or held in a
// free map, and in its clones, lens counts its lists by length, maxFree
// is the longest list (unbounded from 16 GPUs on), and healthy holds each
// listed node's healthy GPUs (as isWholeNode counted them).
func TestPropFreeMapLens(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := domain.NewState()
		var all []events.Placement // every healthy GPU, by node
		for i, n := 0, rapid.IntRange(1, 8).Draw(t, "nodes"); i < n; i++ {
			name := fmt.Sprintf("n%02d", i)
			gs := make([]events.GPU, rapid.SampledFrom([]int{1, 2, 4, 8, 16, 20}).Draw(t, "gpus"))
			for g := range gs {
				gs[g] = events.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, g), Index: g, Model: "A100", MemoryMiB: 81920, Healthy: rapid.IntRange(0, 5).Draw(t, "bad") != 0}
			}
			s.Apply(events.Record{Seq: s.Seq + 1, Envelope: events.Envelope{Type: events.TypeAvailable},
				Event: events.Available{Node: name, GPUs: gs, FreeGPUs: len(gs)}})
			p := events.Placement{Node: name}
			for _, g := range gs {
				if g.Healthy {
					p.GPUs = append(p.GPUs, g.UUID)
				}
			}
			all = append(all, p)
		}
		f := newFreeMap(s)
		check := func(f *freeMap, what string) {
			var want [17]int
			longest := 0
			for _, gs := range f.gpus {
				want[min(len(gs), len(want)-1)]++
				longest = max(longest, len(gs))
			}
			if want != f.lens {
				t.Fatalf("%s: lens %v, want %v", what, f.lens, want)
			}
			if m := f.maxFree(); m != longest && !(longest >= 16 && m == math.MaxInt) {
				t.Fatalf("%s: maxFree %d, longest list %d", what, m, longest)
			}
			if len(f.healthy) != len(f.avail) {
				t.Fatalf("%s: %d healthy counts, %d nodes", what, len(f.healthy), len(f.avail))
			}
			for i, n := range f.avail {
				if !isWholeNode(s, n, f.healthy[i]) {
					t.Fatalf("%s: node %s: healthy count %d, not the node's", what, n, f.healthy[i])
				}
			}
		}
		check(f, "new")
		// some GPUs of a node, by a draw
		some := func(label string) []events.Placement {
			p := rapid.SampledFrom(all).Draw(t, label+"-node")
			q := events.Placement{Node: p.Node}
			for _, g := range p.GPUs {
				if rapid.Bool().Draw(t, label) {
					q.GPUs = append(q.GPUs, g)
				}
			}
			return []events.Placement{q}
		}
		for i, n := 0, rapid.IntRange(0, 30).Draw(t, "ops"); i < n; i++ {
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0:
				f.take(some("take"))
			case 1:
				// add returns GPUs a task held: only GPUs not free now.
				ps := some("add")
				free := map[string]bool{}
				for _, g := range f.on(ps[0].Node) {
					free[g.UUID] = true
				}
				var back []string
				for _, g := range ps[0].GPUs {
					if !free[g] {
						back = append(back, g)
					}
				}
				f.add(s, []events.Placement{{Node: ps[0].Node, GPUs: back}})
			case 2:
				h := some("hold")[0]
				for _, g := range h.GPUs {
					f.reserve(h.Node, g, time.Time{})
				}
				check(f.cloneUnheld(), "cloneUnheld")
			case 3:
				f = f.cloneReserved()
			}
			check(f, fmt.Sprintf("op %d", i))
		}
		check(scratchFreeMap(s), "scratch")
	})
}

// isWholeNode is how place and gangFits told a whole free node before the
// free map kept the nodes' healthy counts: the free count equals the
// node's healthy GPUs.
func isWholeNode(s *domain.State, node string, free int) bool {
	healthy := 0
	for _, g := range s.Nodes[node].GPUs {
		if g.Healthy {
			healthy++
		}
	}
	return free == healthy
}
