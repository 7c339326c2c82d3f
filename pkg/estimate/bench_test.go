package estimate_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

// benchLog builds nodes×8 GPUs, all busy, and queued tasks waiting.
func benchLog(_ testing.TB, nodes, queued int) *logb {
	l := newLog()
	l.quiet = true // build the state only; estimating every submission is not what is measured
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < nodes; n++ {
		var gs []events.GPU
		for i := 0; i < 8; i++ {
			gs = append(gs, events.GPU{UUID: fmt.Sprintf("n%d-g%d", n, i), Index: i, Model: "A100", MemoryMiB: 40960, Healthy: true})
		}
		l.add(t0, events.Available{Node: fmt.Sprintf("n%d", n), GPUs: gs})
	}
	for n := 0; n < nodes; n++ {
		id := fmt.Sprintf("run-%d", n)
		l.add(t0, events.Submitted{TaskID: id, Name: id, Team: "a", Priority: "medium", GPUs: 8, Hours: 1 + r.Float64()*4, Hypothesis: "h", Command: "c", Preemptible: true, SubmittedAt: t0})
		var gs []string
		for i := 0; i < 8; i++ {
			gs = append(gs, fmt.Sprintf("n%d-g%d", n, i))
		}
		l.add(t0, events.Dispatched{TaskID: id, Placements: []events.Placement{{Node: fmt.Sprintf("n%d", n), GPUs: gs}}})
		l.add(t0, events.Started{TaskID: id, Node: fmt.Sprintf("n%d", n)})
	}
	prios := []string{"low", "medium", "medium", "high"}
	for i := 0; i < queued; i++ {
		id := fmt.Sprintf("q-%d", i)
		at := t0.Add(time.Duration(i) * time.Second)
		l.add(at, events.Submitted{TaskID: id, Name: id, Team: "a", Priority: prios[r.IntN(4)], GPUs: 1 << r.IntN(4), Hours: 0.2 + r.Float64()*8,
			Hypothesis: "h", Command: "c", Preemptible: true, SubmittedAt: at})
	}
	return l
}

// One full re-estimate of 10,000 queued tasks on 100×8 busy GPUs: the
// advisor's work after an event.
func BenchmarkEstimateAll10k(b *testing.B) { benchEstimateAll(b, 10000) }
func BenchmarkEstimateAll1k(b *testing.B)  { benchEstimateAll(b, 1000) }

func benchEstimateAll(b *testing.B, n int) {
	l := benchLog(b, 100, n)
	now := t0.Add(3 * time.Hour)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if got := l.est.EstimateAll(l.st, now); len(got) != n {
			b.Fatalf("%d estimates", len(got))
		}
	}
}
