package domain_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestProgressReported: the latest progress of a running task is folded;
// one from another node, of a task not running, or out of range is
// ignored and counted.
func TestProgressReported(t *testing.T) {
	type progress struct {
		Step, Total int64
		Fraction    float64
		Ignored     int
	}
	run := []events.Event{dt.Node("n1").GPUs(2).Available(), dt.Node("n2").GPUs(2).Available(), dt.Task().ID("t1").Submitted(),
		dt.Dispatch("t1", dt.On("n1", 0)), events.Started{TaskID: "t1", Node: "n1"}}
	rep := func(node string, step, total int64, f float64) events.Event {
		return events.ProgressReported{TaskID: "t1", Node: node, Step: step, Total: total, Fraction: f}
	}
	tests := map[string]struct {
		log  []events.Event
		want progress
	}{
		"the latest wins": {log: append(run[:len(run):len(run)], rep("n1", 300, 1200, 0.25), rep("n1", 600, 1200, 0.5)),
			want: progress{600, 1200, 0.5, 0}},
		"a fraction alone":  {log: append(run[:len(run):len(run)], rep("n1", 0, 0, 0.75)), want: progress{0, 0, 0.75, 0}},
		"from another node": {log: append(run[:len(run):len(run)], rep("n2", 1, 2, 0.5)), want: progress{Ignored: 1}},
		"fraction above 1":  {log: append(run[:len(run):len(run)], rep("n1", 0, 0, 1.5)), want: progress{Ignored: 1}},
		"step over total":   {log: append(run[:len(run):len(run)], rep("n1", 3, 2, 1)), want: progress{Ignored: 1}},
		"not started":       {log: append(run[:4:4], rep("n1", 1, 2, 0.5)), want: progress{Ignored: 1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			st := domain.NewState()
			for i, e := range tc.log {
				st.Apply(events.Record{Seq: uint64(i + 1), Time: dt.Epoch.Add(time.Duration(i) * time.Second), Event: e})
			}
			tk := st.Tasks["t1"]
			got := progress{tk.ProgressStep, tk.ProgressTotal, tk.ProgressFraction, st.Ignored}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			// A snapshot keeps it.
			back, err := domain.DecodeSnapshot(domain.EncodeSnapshot(st))
			if err != nil {
				t.Fatal(err)
			}
			if b := back.Tasks["t1"]; b.ProgressFraction != tk.ProgressFraction || !b.ProgressAt.Equal(tk.ProgressAt) {
				t.Errorf("after a snapshot: %v at %v, want %v at %v", b.ProgressFraction, b.ProgressAt, tk.ProgressFraction, tk.ProgressAt)
			}
		})
	}
}
