package estimate

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
)

var progEpoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// completedWithProgress is a task of team "vision" named "resnet-…" that
// ran for run, estimated at est, whose last report (fraction f) came at
// at into its single run.
func completedWithProgress(est, run, at time.Duration, f float64) *domain.Task {
	return &domain.Task{Name: "resnet-1", Team: "vision", Hours: est.Hours(), State: domain.Completed,
		DispatchedAt: progEpoch, FirstStarted: progEpoch, EndedAt: progEpoch.Add(run), RunSeconds: run.Seconds(),
		ProgressAt: progEpoch.Add(at), ProgressFraction: f}
}

// running is the same task running for elapsed, with a report of
// fraction f at `at` into the run (f 0: none).
func running(est, elapsed, at time.Duration, f float64) (*domain.Task, time.Time) {
	t := &domain.Task{Name: "resnet-1", Team: "vision", Hours: est.Hours(), State: domain.Running,
		DispatchedAt: progEpoch, StartedAt: progEpoch, FirstStarted: progEpoch, Placements: nil}
	if f > 0 {
		t.ProgressAt, t.ProgressFraction = progEpoch.Add(at), f
	}
	return t, progEpoch.Add(elapsed)
}

// trusted is a predictor that learned from 300 runs of the group whose
// progress held exactly (the users' estimates ran 4× over).
func trusted() *Predictor {
	p := NewPredictor(0)
	for range 300 {
		p.Observe(completedWithProgress(time.Hour, 4*time.Hour, 3*time.Hour, 0.75))
	}
	return p
}

// TestProgressSharpens: a task at 90 % after 1 h predicts about 6.7 min
// remaining when its group's progress has held; without progress the
// learned prediction stands; the conditional-remaining rule still holds.
func TestProgressSharpens(t *testing.T) {
	tests := map[string]struct {
		pred            func() *Predictor
		est, el, at     time.Duration
		f               float64
		lo, hi          time.Duration
		basisHas        string
		minWeight, maxW float64
	}{
		"90 % after 1 h, trusted group": {pred: trusted, est: time.Hour, el: time.Hour, at: time.Hour, f: 0.9,
			lo: 6 * time.Minute, hi: 7*time.Minute + 30*time.Second, basisHas: "progress 90 %", minWeight: 0.95, maxW: 1},
		"no report: the learned ratio (about 3.3 h total, the prior's 50 runs against 300)": {pred: trusted, est: time.Hour, el: time.Hour,
			lo: 2 * time.Hour, hi: 3 * time.Hour, basisHas: "learned from 300 runs", maxW: 0},
		"a report 10 min old counts the time since (100 min extrapolated, 40 left)": {pred: trusted, est: time.Hour, el: time.Hour, at: 50 * time.Minute, f: 0.5,
			lo: 38 * time.Minute, hi: 45 * time.Minute, basisHas: "progress 50 %", minWeight: 0.95, maxW: 1},
		"no evidence: the default weight, between the two": {pred: func() *Predictor { return NewPredictor(0) }, est: 4 * time.Hour,
			el: time.Hour, at: time.Hour, f: 0.9, lo: 15 * time.Minute, hi: 2 * time.Hour, basisHas: "progress 90 %",
			minWeight: DefaultProgressWeight, maxW: DefaultProgressWeight},
		"past its extrapolated end: soon, not now": {pred: trusted, est: time.Hour, el: 2 * time.Hour, at: time.Hour, f: 1,
			lo: 12 * time.Minute, hi: 20 * time.Minute, basisHas: "progress 100 %", minWeight: 0.95, maxW: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := tc.pred()
			tk, now := running(tc.est, tc.el, tc.at, tc.f)
			rem := p.PolicyRun(tk, now) - tc.el
			if rem < tc.lo || rem > tc.hi {
				t.Errorf("remaining %s, want %s–%s", rem, tc.lo, tc.hi)
			}
			if b := p.Basis(tk); !strings.Contains(b, tc.basisHas) {
				t.Errorf("basis %q, want it to say %q", b, tc.basisHas)
			}
			if w := p.ProgressWeight(tk); w < tc.minWeight || w > tc.maxW {
				t.Errorf("progress weight %.3f, want %.3f–%.3f", w, tc.minWeight, tc.maxW)
			}
			if s := p.Snapshot(); s.Remaining(tk, tc.el, 0.5) != p.Remaining(tk, tc.el, 0.5) {
				t.Error("a snapshot predicts otherwise")
			}
		})
	}
}

// TestProgressDistrusted: a group whose reports overstated the whole run
// (its jobs ended at a third of what progress extrapolated, as failing
// runs do) weighs progress less than a group whose reports held.
func TestProgressDistrusted(t *testing.T) {
	p := NewPredictor(0)
	for i := range 300 {
		// Ends anywhere from 10 % to 100 % of the extrapolated run.
		share := 0.1 + 0.9*float64(i%10)/9
		run := time.Duration(share * float64(4*time.Hour))
		p.Observe(completedWithProgress(4*time.Hour, run, run/2, share/2))
	}
	tk, _ := running(4*time.Hour, time.Hour, time.Hour, 0.5)
	bad := p.ProgressWeight(tk)
	good := trusted().ProgressWeight(tk)
	if !(bad < good) || bad >= 0.9 {
		t.Errorf("progress weight %.3f for a group whose reports did not hold, %.3f for one whose did", bad, good)
	}
}

// TestProgressIgnored: reports that do not speak of the current run
// change nothing, nor does the Exact predictor use them.
func TestProgressIgnored(t *testing.T) {
	p := trusted()
	base, now := running(time.Hour, time.Hour, 0, 0)
	want := p.PolicyRun(base, now)
	tests := map[string]func(t *domain.Task){
		"from an earlier run": func(t *domain.Task) {
			t.ProgressAt, t.ProgressFraction = progEpoch.Add(-time.Minute), 0.9
		},
		"fraction 0":     func(t *domain.Task) { t.ProgressAt, t.ProgressFraction = progEpoch.Add(time.Minute), 0 },
		"fraction NaN":   func(t *domain.Task) { t.ProgressAt, t.ProgressFraction = progEpoch.Add(time.Minute), math.NaN() },
		"fraction above": func(t *domain.Task) { t.ProgressAt, t.ProgressFraction = progEpoch.Add(time.Minute), 1.5 },
	}
	for name, mod := range tests {
		t.Run(name, func(t *testing.T) {
			tk := *base
			mod(&tk)
			if got := p.PolicyRun(&tk, now); got != want {
				t.Errorf("predicted %s, want %s as without progress", got, want)
			}
		})
	}
	t.Run("exact", func(t *testing.T) {
		e := &Predictor{Exact: true}
		tk, now := running(time.Hour, 30*time.Minute, 30*time.Minute, 0.9)
		if got := e.PolicyRun(tk, now); got != time.Hour {
			t.Errorf("exact predicted %s, want the estimate, 1h", got)
		}
	})
}

// TestProgressSnapshotFormat1: a predictor snapshot of format 1 (before
// progress) still loads, with no progress learned; format 2 keeps it.
func TestProgressSnapshotFormat1(t *testing.T) {
	p := trusted()
	b, _ := p.MarshalBinary()
	q := NewPredictor(0)
	if err := q.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	tk, now := running(time.Hour, time.Hour, time.Hour, 0.9)
	if q.PolicyRun(tk, now) != p.PolicyRun(tk, now) {
		t.Error("restored predictor predicts otherwise")
	}
	// Format 1: the same bytes without the progress part.
	empty := NewPredictor(0)
	for range 300 {
		empty.Observe(&domain.Task{Name: "resnet-1", Team: "vision", Hours: 1, RunSeconds: 4 * 3600})
	}
	eb, _ := empty.MarshalBinary()
	// No progress learned: its part is four zeros (an empty ring's next
	// and count, no team, no prefix).
	if !strings.HasSuffix(string(eb), "\x00\x00\x00\x00") {
		t.Fatalf("no empty progress part at the end: % x", eb[len(eb)-8:])
	}
	v1 := append([]byte{1}, eb[1:len(eb)-4]...)
	r := NewPredictor(0)
	if err := r.UnmarshalBinary(v1); err != nil {
		t.Fatalf("format 1 refused: %v", err)
	}
	if r.Samples() != 300 || r.pglobal.n() != 0 {
		t.Errorf("format 1: %d runs, %d progress errors; want 300 and 0", r.Samples(), r.pglobal.n())
	}
}
