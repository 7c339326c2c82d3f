package estimate_test

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// TestForwardRunsProtocol: the forward simulation's future is the
// scheduler's, protocol included (decide.Protocol): a task on a node
// drained with --preempt, or on a GPU turned unhealthy, is preempted and
// goes back to the queue at its place, ahead of the task estimated. Before,
// the simulation let it run to its end and the estimate was an hour early.
func TestForwardRunsProtocol(t *testing.T) {
	cases := map[string]struct {
		fault func(l *logbAt, node string)
		// want: c's predicted start after t0, within a minute
		want time.Duration
	}{
		// a (2 h) and b (1 h) hold the two nodes; c waits for b's end.
		"healthy": {fault: func(*logbAt, string) {}, want: time.Hour},
		// b is preempted at once and, ahead of c, waits for a's end on
		// the other node; c waits for what is left of b's run (the two
		// minutes it ran count) after it.
		"b's node drained with --preempt": {fault: func(l *logbAt, node string) {
			l.add(l.at, events.Drained{Node: node, Reason: "maintenance", Preempt: true})
		}, want: 3*time.Hour - 2*time.Minute},
		"a GPU under b unhealthy": {fault: func(l *logbAt, node string) {
			l.add(l.at, events.Unhealthy{Node: node, GPUs: []string{node + "-g3"}, Reason: "Xid 79"})
		}, want: 3*time.Hour - 2*time.Minute},
		// drained without --preempt: b runs to its end; c waits for a's.
		"b's node drained, no preemption": {fault: func(l *logbAt, node string) {
			l.add(l.at, events.Drained{Node: node, Reason: "maintenance"})
		}, want: 2 * time.Hour},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l := &logbAt{logb: newLog(), at: t0.Add(2 * time.Minute)}
			l.node("n1", 8)
			l.node("n2", 8)
			l.submit(t0, "a", "medium", 8, 2)
			l.run(t0, "a")
			l.submit(t0, "b", "medium", 8, 1)
			l.run(t0, "b")
			l.submit(t0.Add(time.Minute), "c", "medium", 8, 1)
			if l.st.Tasks["b"].Node == "" || l.st.Tasks["b"].Node == l.st.Tasks["a"].Node {
				t.Fatalf("setup: a on %q, b on %q", l.st.Tasks["a"].Node, l.st.Tasks["b"].Node)
			}
			tc.fault(l, l.st.Tasks["b"].Node)
			seq := l.st.Seq
			at, ok := estimate.Forward(l.st, policy.New(policy.DefaultOptions()), l.est.Pred, l.at, "c", 0.5, nil)
			if got := at.Sub(t0); !ok || got < tc.want-time.Minute || got > tc.want+time.Minute {
				t.Errorf("c predicted to start %s after t0 (ok %v); want %s", got, ok, tc.want)
			}
			if l.st.Seq != seq || l.st.Tasks["b"].State != "running" {
				t.Errorf("the estimate moved the state: seq %d → %d, b %s", seq, l.st.Seq, l.st.Tasks["b"].State)
			}
		})
	}
}

// logbAt is a test log with the instant faults are recorded at.
type logbAt struct {
	*logb
	at time.Time
}
