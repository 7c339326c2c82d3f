package policy

import (
	"sort"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
)

// refSetCost is setCost as it was: the classes sorted highest first,
// compared in turn, then the total cost.
type refSetCost struct {
	classes []domain.Priority
	lost    float64
}

func refCostOf(vs []*victim) refSetCost {
	c := refSetCost{classes: make([]domain.Priority, len(vs))}
	for i, v := range vs {
		c.classes[i] = v.t.Priority
		c.lost += v.cost
	}
	sort.Slice(c.classes, func(i, j int) bool { return c.classes[i] > c.classes[j] })
	return c
}

func (a refSetCost) less(b refSetCost) bool {
	for i := range a.classes {
		if a.classes[i] != b.classes[i] {
			return a.classes[i] < b.classes[i]
		}
	}
	return a.lost < b.lost
}

// setCost, kept as counts by class, orders victim sets of one size as the
// sorted lists of classes did, on random sets (a class outside
// LOW..CRITICAL now and then), and sums the same total cost.
func TestPropSetCostSameOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.IntRange(1, 6).Draw(t, "k")
		class := rapid.SampledFrom([]domain.Priority{domain.Low, domain.Medium, domain.High, domain.Critical, domain.Low, domain.Medium, domain.High, 0, 7, -1})
		cost := rapid.SampledFrom([]float64{0, 0.5, 1, 1.5, 3600, 7200.25, 1e9})
		gen := func(name string) ([]local, []int, []*victim) {
			n := k + rapid.IntRange(0, 3).Draw(t, name+" extra")
			ls := make([]local, n)
			for i := range ls {
				p := class.Draw(t, name+" class")
				ls[i] = local{v: &victim{t: &domain.Task{Priority: p}, prio: p, cost: cost.Draw(t, name+" cost")}}
			}
			perm := rapid.Permutation(func() []int {
				p := make([]int, n)
				for i := range p {
					p[i] = i
				}
				return p
			}()).Draw(t, name+" idx")[:k]
			sort.Ints(perm)
			vs := make([]*victim, k)
			for j, i := range perm {
				vs[j] = ls[i].v
			}
			return ls, perm, vs
		}
		la, ia, va := gen("a")
		lb, ib, vb := gen("b")
		a, b := costOf(la, ia), costOf(lb, ib)
		ra, rb := refCostOf(va), refCostOf(vb)
		if a.lost != ra.lost {
			t.Fatalf("lost %v, want %v", a.lost, ra.lost)
		}
		if got, want := a.less(b), ra.less(rb); got != want {
			t.Fatalf("a %v < b %v: %v, want %v", ra.classes, rb.classes, got, want)
		}
		if got, want := b.less(a), rb.less(ra); got != want {
			t.Fatalf("b %v < a %v: %v, want %v", rb.classes, ra.classes, got, want)
		}
	})
}
