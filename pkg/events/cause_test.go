package events

import "testing"

// TestCauseUpcast: a reader decides on a record's code; a record written
// before codes gets the code its text implied.
func TestCauseUpcast(t *testing.T) {
	preempts := map[string]struct {
		e    PreemptRequested
		want string
	}{
		"coded reclaim": {PreemptRequested{Code: PreemptReclaim, Reason: "reworded"}, PreemptReclaim},
		"coded class":   {PreemptRequested{Code: PreemptByClass, Reason: "team guarantee: in the text only"}, PreemptByClass},
		"old reclaim":   {PreemptRequested{Policy: "ladder", Reason: "preempted by x for HIGH under policy team guarantee: a reclaims GPUs borrowed by b"}, PreemptReclaim},
		"old class":     {PreemptRequested{Policy: "critical-only", Reason: "preempted by x for CRITICAL under policy critical-only"}, PreemptByClass},
		"old drain":     {PreemptRequested{Policy: "drain", Reason: "node n1 drained"}, PreemptDrain},
		"old gpu":       {PreemptRequested{Policy: "gpu-unhealthy", Reason: "gpu-unhealthy: GPU-1 on n1"}, PreemptUnhealthy},
	}
	for name, tc := range preempts {
		if got := tc.e.Cause(); got != tc.want {
			t.Errorf("%s: cause %q, want %q", name, got, tc.want)
		}
	}
	requeues := map[string]struct {
		e    Requeued
		want string
	}{
		"coded lost":    {Requeued{Code: RequeueNodeLost, Reason: "reworded"}, RequeueNodeLost},
		"coded preempt": {Requeued{Code: RequeuePreempted, Reason: "node n1 lost"}, RequeuePreempted},
		"old lost":      {Requeued{Reason: "node n1 lost"}, RequeueNodeLost},
		"old preempted": {Requeued{Reason: "preempted; resumes from step-1"}, RequeuePreempted},
	}
	for name, tc := range requeues {
		if got := tc.e.Cause(); got != tc.want {
			t.Errorf("%s: cause %q, want %q", name, got, tc.want)
		}
	}
}
