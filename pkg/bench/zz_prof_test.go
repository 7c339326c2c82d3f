package bench

import (
	"context"
	"testing"
)

func TestZZProf(t *testing.T) {
	r, err := Advisor(context.Background(), AdvisorOptions{Nodes: 1000, PerNode: 8, Queued: 10000, Events: 6})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("all %v advise %v p50 %v p99 %v heap %d", r.EstimateAll, r.Advise, r.P50, r.P99, r.HeapBytes>>20)
}
