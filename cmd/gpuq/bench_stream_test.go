package main

import (
	"context"
	"slices"
	"strings"
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

// --only stream runs the stream group alone, with its goals and rows and
// no other group's.
func TestBenchOnlyStream(t *testing.T) {
	cfg := bench.Quick()
	cfg.Dir, cfg.Only, cfg.Stream = t.TempDir(), []string{"stream"}, serviceStream
	cfg.StreamRun = bench.StreamOptions{Followers: 20, Events: 20, Rate: 200}
	var steps []string
	cfg.Progress = func(s string) { name, _, _ := strings.Cut(s, ":"); steps = append(steps, name) }
	r, err := bench.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var goals []string
	for _, g := range r.Goals {
		goals = append(goals, g.Metric)
	}
	if !slices.Equal(steps, []string{"stream"}) || !slices.Equal(goals, []string{"stream_p99_ms", "stream_heap_growth_mb"}) {
		t.Errorf("steps %q, goals %q; want the stream's alone", steps, goals)
	}
	if r.Detail.Stream == nil || r.Detail.Stream.Delivered != 20*20 {
		t.Errorf("detail.stream %+v", r.Detail.Stream)
	}
	var buf strings.Builder
	if err := r.WriteTable(&buf); err != nil || !strings.Contains(buf.String(), "stream_p99_ms") ||
		strings.Contains(buf.String(), "raw_publish_dedup_per_s") || strings.Contains(buf.String(), "estimate_all_100k_s") {
		t.Errorf("table (%v) has rows of groups not run, or not the stream's:\n%s", err, buf.String())
	}
}
