package domain

import "testing"

// TestUpcastReasonCode: a task of a snapshot written before reason codes
// (version 4 or 5) gets ReasonNotStarted from its reason's text only
// while it yields its GPUs for a process that never started.
func TestUpcastReasonCode(t *testing.T) {
	cases := map[string]struct {
		task Task
		want string
	}{
		"not started, preempting": {task: Task{State: Preempting, Reason: NotStartedReason("n1")}, want: ReasonNotStarted},
		"requeued since":          {task: Task{State: Queued, Reason: NotStartedReason("n1")}},
		"preempted for another":   {task: Task{State: Preempting, Reason: "critical waits"}},
		"running":                 {task: Task{State: Running}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			upcastReasonCode(&tc.task)
			if tc.task.ReasonCode != tc.want {
				t.Errorf("ReasonCode = %q; want %q", tc.task.ReasonCode, tc.want)
			}
		})
	}
}
