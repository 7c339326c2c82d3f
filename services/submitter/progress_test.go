package submitter

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestPredictedEnd: show's predicted end of a running task follows its
// reported progress once the predictor has seen progress hold; a task
// not running has none.
func TestPredictedEnd(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	m := &model{}
	st := domain.NewState()
	// 100 completions of the group whose last report (75 % at 3 h) held.
	for i := range 100 {
		done := &domain.Task{ID: "d", Name: "resnet-1", Team: "vision", Hours: 1, State: domain.Completed,
			DispatchedAt: t0, FirstStarted: t0, EndedAt: t0.Add(4 * time.Hour), RunSeconds: 4 * 3600,
			ProgressAt: t0.Add(3 * time.Hour), ProgressFraction: 0.75}
		st.Tasks["d"] = done
		m.saw(st, events.Record{Seq: uint64(i + 1), Event: events.Completed{TaskID: "d", Node: "n1"}}, "")
	}
	run := &domain.Task{ID: "t1", Name: "resnet-2", Team: "vision", Hours: 1, State: domain.Running,
		DispatchedAt: t0, StartedAt: t0, FirstStarted: t0, ProgressAt: t0.Add(time.Hour), ProgressFraction: 0.9}
	now := t0.Add(time.Hour)
	tests := map[string]struct {
		mod      func(t *domain.Task)
		lo, hi   time.Duration // after now
		basis    string
		noneWant bool
	}{
		"90 % after 1 h":         {mod: func(*domain.Task) {}, lo: 6 * time.Minute, hi: 10 * time.Minute, basis: "progress 90 %"},
		"no report: the learned": {mod: func(t *domain.Task) { t.ProgressAt, t.ProgressFraction = time.Time{}, 0 }, lo: time.Hour, hi: 4 * time.Hour, basis: "learned from 100 runs"},
		"queued: none":           {mod: func(t *domain.Task) { t.State, t.StartedAt = domain.Queued, time.Time{} }, noneWant: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tk := *run
			tc.mod(&tk)
			var v api.TaskView
			m.predictedEnd(&v, &tk, now)
			if tc.noneWant {
				if v.PredictedEnd != nil {
					t.Errorf("predicted end %v for a task not running", v.PredictedEnd)
				}
				return
			}
			if v.PredictedEnd == nil {
				t.Fatal("no predicted end")
			}
			if d := v.PredictedEnd.Sub(now); d < tc.lo || d > tc.hi {
				t.Errorf("predicted end in %s, want %s–%s", d, tc.lo, tc.hi)
			}
			if !strings.Contains(v.PredictedBasis, tc.basis) {
				t.Errorf("basis %q, want %q", v.PredictedBasis, tc.basis)
			}
		})
	}
}
