package estimate_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// playQueue runs a small busy cluster through the estimator: 400 tasks
// arriving faster than two 8-GPU nodes serve them, dispatched by the
// default policy, each ending after a random multiple of its estimate. It
// returns every estimate made at submission and the estimator's stats.
func playQueue(t *testing.T, workers int) (map[string]estimate.Estimate, estimate.Stats) {
	t.Helper()
	l := newLog()
	l.est.Workers = workers
	defer l.est.Close()
	l.node("n1", 8)
	l.node("n2", 8)
	pol := policy.New(policy.Options{})
	rng := rand.New(rand.NewPCG(7, 11))
	type running struct {
		id  string
		end time.Time
	}
	var live []running
	later := map[string]func() estimate.Estimate{}
	now := t0
	for i := 0; i < 400; i++ {
		now = now.Add(time.Duration(60+rng.IntN(900)) * time.Second)
		kept := live[:0]
		for _, r := range live {
			if r.end.After(now) {
				kept = append(kept, r)
				continue
			}
			l.add(r.end, events.Completed{TaskID: r.id, Node: l.st.Tasks[r.id].Node})
		}
		live = kept
		id := fmt.Sprintf("t%03d", i)
		hours := 0.1 + rng.Float64()*2
		l.submit(now, id, []string{"low", "medium", "high"}[rng.IntN(3)], 1+rng.IntN(8), hours)
		get, ok := l.est.AtSubmitLater(id)
		if !ok {
			t.Fatalf("no estimate at submission of %s", id)
		}
		later[id] = get
		for _, d := range pol.Plan(policy.Input{State: l.st, Now: now}).Decisions {
			if d.Kind != policy.Dispatch {
				continue
			}
			l.add(now, events.Dispatched{TaskID: d.TaskID, Placements: d.Placements})
			l.add(now, events.Started{TaskID: d.TaskID, Node: d.Placements[0].Node})
			tk := l.st.Tasks[d.TaskID]
			run := time.Duration(tk.Hours * float64(time.Hour) * (0.3 + rng.Float64()))
			live = append(live, running{d.TaskID, now.Add(run)})
		}
	}
	out := map[string]estimate.Estimate{}
	for id, get := range later {
		out[id] = get()
	}
	return out, l.est.Stats()
}

// With workers, the forward simulations run on other goroutines while the
// log goes on; the estimates and the judging must be exactly those of one
// goroutine.
func TestWorkersEstimateAlike(t *testing.T) {
	want, wantStats := playQueue(t, 0)
	if wantStats.N < 50 {
		t.Fatalf("only %d tasks judged: the queue is not busy enough to test anything", wantStats.N)
	}
	waited := 0
	for _, e := range want {
		if e.Raw > 0 {
			waited++
		}
	}
	if waited < 100 {
		t.Fatalf("only %d estimates with a wait", waited)
	}
	for _, workers := range []int{2, 5} {
		got, gotStats := playQueue(t, workers)
		if diff := cmp.Diff(want, got, cmpopts.EquateApproxTime(0)); diff != "" {
			t.Errorf("%d workers: estimates differ (-one goroutine +workers):\n%s", workers, diff)
		}
		if diff := cmp.Diff(wantStats, gotStats, cmpopts.IgnoreUnexported(estimate.Stats{})); diff != "" {
			t.Errorf("%d workers: stats differ:\n%s", workers, diff)
		}
	}
}

// A snapshot predicts as the predictor did when it was taken, whatever the
// predictor learns after; snapshots are shared until it learns.
func TestPredictorSnapshot(t *testing.T) {
	p := estimate.NewPredictor(0)
	done := func(name string, hours, ran float64) *domain.Task {
		return &domain.Task{ID: name, Name: name, Team: "a", Hours: hours, RunSeconds: ran}
	}
	for i := 0; i < 30; i++ {
		p.Observe(done("train", 1, 1800))
	}
	probe := done("train", 2, 0)
	s := p.Snapshot()
	if s != p.Snapshot() {
		t.Error("two snapshots without learning in between are not the same copy")
	}
	before := s.Total(probe, 0.5)
	if got := p.Total(probe, 0.5); got != before {
		t.Fatalf("snapshot predicts %s, the predictor %s", before, got)
	}
	for i := 0; i < 30; i++ {
		p.Observe(done("train", 1, 7200))
	}
	if got := s.Total(probe, 0.5); got != before {
		t.Errorf("the snapshot moved with the predictor: %s, was %s", got, before)
	}
	if p.Total(probe, 0.5) == before {
		t.Error("the predictor did not learn (the test proves nothing)")
	}
	if s2 := p.Snapshot(); s2 == s || s2.Total(probe, 0.5) != p.Total(probe, 0.5) {
		t.Error("a snapshot after learning is not a fresh copy of the predictor")
	}
}
