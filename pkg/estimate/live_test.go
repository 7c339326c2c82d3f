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

// liveLog is a log whose every record the estimator observes and the Live
// sees, as the advisor's fold does.
type liveLog struct {
	*logb
	live *estimate.Live
}

func (l *liveLog) add(at time.Time, e events.Event) {
	l.logb.add(at, e)
	l.live.Saw(l.st, events.Record{Seq: l.seq, Envelope: events.Envelope{Type: e.EventType(), Time: at}, Event: e})
}

// The advice Live keeps after random sequences of events equals a full
// recompute (Estimator.Advise) after each burst: an event Live treats as
// changing one task's advice, or none, changes no other.
func TestLiveEqualsFullRecompute(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			l := &liveLog{logb: newLog()}
			l.live = estimate.NewLive(l.est)
			l.live.MinInterval, l.live.Share, l.live.WhatIfEvery, l.live.WhatIfBudget = 0, 0, 0, 0
			for n := 0; n < 3; n++ {
				l.node(fmt.Sprintf("n%d", n), 4)
			}
			now := t0
			pol := policy.New(policy.Options{})
			ids := 0
			partial := 0
			for step := 0; step < 60; step++ {
				burst := 1 + rng.IntN(3)
				for b := 0; b < burst; b++ {
					queued, running := l.st.Queued(), runningOf(l.st)
					switch k := rng.IntN(10); {
					case k < 3:
						now = now.Add(time.Duration(rng.IntN(3600)) * time.Second)
						ids++
						l.add(now, events.Submitted{TaskID: fmt.Sprintf("t%d", ids), Name: fmt.Sprintf("exp-%d", ids%3), Team: "a",
							Priority: []string{"low", "medium", "high", "critical"}[rng.IntN(4)], GPUs: 1 << rng.IntN(3),
							Hours: 0.1 + rng.Float64()*3, Hypothesis: "h", Command: "c", Preemptible: true, SubmittedAt: now})
					case k < 6 && len(queued) > 0:
						q := queued[rng.IntN(len(queued))]
						l.add(now, events.ChecklistUpdated{TaskID: q.ID, Item: domain.ChecklistItems[rng.IntN(len(domain.ChecklistItems))], Done: rng.IntN(4) > 0})
					case k < 7 && len(running) > 0:
						r := running[rng.IntN(len(running))]
						l.add(now, events.ProgressReported{TaskID: r.ID, Node: r.Node, Fraction: rng.Float64()})
					case k < 9 && len(running) > 0:
						now = now.Add(time.Duration(rng.IntN(1800)) * time.Second)
						r := running[rng.IntN(len(running))]
						l.add(now, events.Completed{TaskID: r.ID, Node: r.Node})
					case len(queued) > 0 && rng.IntN(2) == 0:
						l.add(now, events.Cancelled{TaskID: queued[rng.IntN(len(queued))].ID})
					default:
						// The scheduler's pass.
						for _, d := range pol.Plan(policy.Input{State: l.st, Now: now}).Decisions {
							if d.Kind == policy.Dispatch {
								l.add(now, events.Dispatched{TaskID: d.TaskID, Placements: d.Placements})
								l.add(now, events.Started{TaskID: d.TaskID, Node: d.Placements[0].Node})
							}
						}
					}
				}
				_, before := l.live.Counts()
				got := append([]estimate.Advice(nil), l.live.Advise(l.st, now)...)
				if _, after := l.live.Counts(); after > before {
					partial++
				}
				want := l.est.Advise(l.st, now)
				// A partial advice leaves the others' record and time as
				// they were: the same advice, based on an earlier record.
				if d := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(estimate.Advice{}, "BasedOnSeq", "At")); d != "" {
					t.Fatalf("step %d: Live differs from a full recompute (-full +live):\n%s", step, d)
				}
			}
			if full, _ := l.live.Counts(); partial == 0 || full == 0 {
				t.Errorf("%d partial advices, %d full: the sequence did not exercise both", partial, full)
			}
		})
	}
}

// Bursts are coalesced: within MinInterval of a full re-estimate, events
// that may change every estimate leave the advice as it was and Pending
// set; once it has passed, the next Advise re-estimates.
func TestLiveCoalescesBursts(t *testing.T) {
	wall := time.Unix(0, 0)
	l := &liveLog{logb: newLog()}
	l.live = estimate.NewLive(l.est)
	l.live.Now = func() time.Time { return wall }
	l.live.MinInterval = 100 * time.Millisecond
	l.node("n", 8)
	l.submit(t0, "a", "medium", 8, 1)
	l.run(t0, "a")
	l.live.Saw(l.st, events.Record{Event: events.Started{TaskID: "a"}})
	l.add(t0, events.Submitted{TaskID: "b", Name: "b", Team: "a", Priority: "medium", GPUs: 8, Hours: 1, Hypothesis: "h", Command: "c", SubmittedAt: t0})
	first := l.live.Advise(l.st, t0)
	if len(first) != 1 || l.live.Pending() {
		t.Fatalf("first advice %d entries, pending %v; want 1, false", len(first), l.live.Pending())
	}
	l.add(t0, events.Submitted{TaskID: "c", Name: "c", Team: "a", Priority: "high", GPUs: 8, Hours: 1, Hypothesis: "h", Command: "c", SubmittedAt: t0})
	wall = wall.Add(50 * time.Millisecond)
	if got := l.live.Advise(l.st, t0); len(got) != 1 || !l.live.Pending() {
		t.Errorf("within the interval: %d entries, pending %v; want the old 1 and pending", len(got), l.live.Pending())
	}
	if !l.live.Due().Equal(time.Unix(0, 0).Add(100 * time.Millisecond)) {
		t.Errorf("due %v, want 100 ms after the first", l.live.Due())
	}
	wall = wall.Add(50 * time.Millisecond)
	if got := l.live.Advise(l.st, t0); len(got) != 2 || l.live.Pending() {
		t.Errorf("after the interval: %d entries, pending %v; want 2, not pending", len(got), l.live.Pending())
	}
	if full, _ := l.live.Counts(); full != 2 {
		t.Errorf("%d full re-estimates, want 2", full)
	}
}

func runningOf(st *domain.State) []*domain.Task {
	var out []*domain.Task
	for _, t := range st.Active() {
		if t.State == domain.Running {
			out = append(out, t)
		}
	}
	return out
}

// With a Share, a full re-estimate that took d is followed by the next
// no sooner than d/Share after its start: the events meanwhile wait
// (Pending, Due), then one re-estimate has them all.
func TestLiveShare(t *testing.T) {
	for _, tc := range []struct {
		name  string
		share float64
		took  time.Duration
		due   time.Duration // after the first re-estimate's start
	}{
		{"half the clock", 0.5, 300 * time.Millisecond, 600 * time.Millisecond},
		{"a tenth", 0.1, 300 * time.Millisecond, 3 * time.Second},
		{"faster than the interval", 0.5, 10 * time.Millisecond, 100 * time.Millisecond},
		{"no share", 0, 300 * time.Millisecond, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(0, 0)
			wall, step := start, tc.took
			l := &liveLog{logb: newLog()}
			l.live = estimate.NewLive(l.est)
			// Each reading of the clock during the first re-estimate moves
			// it on by took: read at its start and at its end.
			l.live.Now = func() time.Time { w := wall; wall = wall.Add(step); return w }
			l.live.MinInterval, l.live.Share, l.live.WhatIfBudget = 100*time.Millisecond, tc.share, 0
			l.node("n", 8)
			l.submit(t0, "a", "medium", 8, 1)
			l.run(t0, "a")
			l.add(t0, events.Submitted{TaskID: "b", Name: "b", Team: "a", Priority: "medium", GPUs: 8, Hours: 1, Hypothesis: "h", Command: "c", SubmittedAt: t0})
			l.live.Advise(l.st, t0)
			step = 0
			if got, want := l.live.Due(), start.Add(tc.due); !got.Equal(want) {
				t.Fatalf("due %v after the start, want %v", got.Sub(start), tc.due)
			}
			l.add(t0, events.Submitted{TaskID: "c", Name: "c", Team: "a", Priority: "high", GPUs: 8, Hours: 1, Hypothesis: "h", Command: "c", SubmittedAt: t0})
			l.live.Saw(l.st, events.Record{Event: events.Submitted{TaskID: "c"}})
			wall = start.Add(tc.due - time.Millisecond)
			if got := l.live.Advise(l.st, t0); len(got) != 1 || !l.live.Pending() {
				t.Errorf("before due: %d entries, pending %v; want the old 1 and pending", len(got), l.live.Pending())
			}
			wall = start.Add(tc.due)
			if got := l.live.Advise(l.st, t0); len(got) != 2 || l.live.Pending() {
				t.Errorf("at due: %d entries, pending %v; want 2, not pending", len(got), l.live.Pending())
			}
		})
	}
}
