package main

import (
	"context"
	"testing"

	"github.com/gpuq/gpuq/pkg/bench"
)

// The stream group on services/submitter itself, small: every record
// reaches every follower, and the figures are filled in.
func TestBenchStream(t *testing.T) {
	r, err := bench.Stream(context.Background(), t.TempDir(), bench.StreamOptions{Followers: 50, Events: 40, Rate: 200}, serviceStream)
	if err != nil {
		t.Fatal(err)
	}
	if r.Delivered != 50*40 || r.Missing != 0 || r.Ended != 0 {
		t.Errorf("delivered %d, missing %d, behind %d; want 2000, 0, 0", r.Delivered, r.Missing, r.Ended)
	}
	if r.P99 <= 0 || r.P99 < r.P50 || r.Max < r.P99 || r.HeapBefore == 0 || r.CPU <= 0 {
		t.Errorf("figures not filled in: %+v", r)
	}
}
