package estimate_test

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestFoldLearns: the scheduler's fold learns a run time from each
// applied completion, once; a completion the fold skipped (a repeat, an
// unknown task) teaches nothing.
func TestFoldLearns(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	log := []events.Event{
		dt.Node("n1").GPUs(1).Available(),
		dt.Task().ID("a").GPUs(1).Hours(1).Submitted(),
		dt.Dispatch("a", dt.On("n1", 0)),
		events.Started{TaskID: "a", Node: "n1"},
		events.Completed{TaskID: "a", Node: "n1"},
		events.Completed{TaskID: "a", Node: "n1"},     // a repeat: skipped
		events.Completed{TaskID: "ghost", Node: "n1"}, // never submitted: skipped
	}
	tests := map[string]struct {
		upto int // records folded
		want int // samples learned
	}{
		"before the completion": {upto: 4, want: 0},
		"the completion":        {upto: 5, want: 1},
		"a repeated completion": {upto: 6, want: 1},
		"an unknown task":       {upto: 7, want: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := estimate.NewFold()
			for i, e := range log[:tc.upto] {
				f.Apply(events.Record{Seq: uint64(i + 1), Time: t0.Add(time.Duration(i) * time.Minute), Event: e})
			}
			if got := f.Pred.Samples(); got != tc.want {
				t.Errorf("learned %d run times, want %d", got, tc.want)
			}
			if tc.upto >= 5 && f.State.Tasks["a"].State != domain.Completed {
				t.Errorf("task a %s, want completed", f.State.Tasks["a"].State)
			}
		})
	}
}
