package decide_test

import (
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpuq/gpuq/pkg/decide"
	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// fold applies events in order, one second apart.
func fold(evs ...events.Event) *domain.State {
	st := domain.NewState()
	for i, e := range evs {
		st.Apply(events.Record{Seq: uint64(i + 1), Time: t0.Add(time.Duration(i) * time.Second), Event: e})
	}
	return st
}

// summary is what a plan does, in a comparable form: "type task/node".
func summary(cmds []decide.Command) []string {
	var out []string
	for _, c := range cmds {
		s := string(c.Event.EventType()) + " " + c.Event.Key()
		if d, ok := c.Event.(events.Dispatched); ok {
			s += " on " + d.Placements[0].Node
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func running(id string, p domain.Priority, preemptible bool, on events.Placement, seq uint64) []events.Event {
	d := dt.Dispatch(id, on)
	d.BasedOnSeq = seq
	return []events.Event{dt.Task().ID(id).Priority(p).Preemptible(preemptible).GPUs(len(on.GPUs)).Submitted(), d,
		events.Started{TaskID: id, Node: on.Node}}
}

// TestPlan: the scheduler's protocol reactions around node liveness and
// drains.
func TestPlan(t *testing.T) {
	now := t0.Add(time.Minute)
	n1, n2 := dt.Node("n1").GPUs(2).Available(), dt.Node("n2").GPUs(2).Available()
	queued := dt.Task().ID("q").GPUs(2).Submitted()
	fresh := map[string]time.Time{"n1": now.Add(-time.Second), "n2": now.Add(-time.Second)}
	tests := map[string]struct {
		log  []events.Event
		live decide.Liveness
		want []string
	}{
		"a fresh node gets work": {
			log:  []events.Event{n1, queued},
			live: decide.Liveness{LastSeen: fresh, Beats: fresh, Timeout: 30 * time.Second},
			want: []string{"dispatched q on n1"},
		},
		"a node with no heartbeat gets none while its timeout runs": {
			log:  []events.Event{n1, queued},
			live: decide.Liveness{LastSeen: fresh, Beats: map[string]time.Time{}, Timeout: 30 * time.Second},
		},
		"a node whose heartbeat is stale gets none; the fresh one does": {
			log: []events.Event{n1, n2, queued},
			live: decide.Liveness{LastSeen: fresh, Timeout: 30 * time.Second,
				Beats: map[string]time.Time{"n1": now.Add(-20 * time.Second), "n2": now.Add(-time.Second)}},
			want: []string{"dispatched q on n2"},
		},
		"silent past the timeout: lost, its tasks requeued": {
			log:  append([]events.Event{n1}, running("r", domain.Medium, true, dt.On("n1", 0), 1)...),
			live: decide.Liveness{LastSeen: map[string]time.Time{"n1": now.Add(-31 * time.Second)}, Beats: map[string]time.Time{}, Timeout: 30 * time.Second},
			want: []string{"lost n1", "requeued r"},
		},
		"drained with --preempt: only preemptible, non-critical tasks are preempted": {
			log: append(append(append(append([]events.Event{dt.Node("n1").GPUs(3).Available()},
				running("p", domain.Medium, true, dt.On("n1", 0), 1)...),
				running("np", domain.Medium, false, dt.On("n1", 1), 4)...),
				running("crit", domain.Critical, true, dt.On("n1", 2), 7)...),
				events.Drained{Node: "n1", Reason: "maintenance", Preempt: true}),
			live: decide.Liveness{LastSeen: fresh, Beats: fresh, Timeout: 30 * time.Second},
			want: []string{"preempt_requested p"},
		},
		"drained without --preempt: tasks finish, nothing new starts": {
			log: append(append([]events.Event{n1}, running("p", domain.Medium, true, dt.On("n1", 0), 1)...),
				events.Drained{Node: "n1"}, queued),
			live: decide.Liveness{LastSeen: fresh, Beats: fresh, Timeout: 30 * time.Second},
		},
		"a GPU turns unhealthy: its task is preempted, whatever its class; the GPU is not offered": {
			log: append(append(append([]events.Event{dt.Node("n1").GPUs(2).Available()},
				running("crit", domain.Critical, false, dt.On("n1", 0), 1)...),
				events.Unhealthy{Node: "n1", GPUs: []string{dt.GPU("n1", 0), dt.GPU("n1", 1)}, Reason: "Xid 79"}),
				dt.Task().ID("q").GPUs(1).Submitted()),
			live: decide.Liveness{LastSeen: fresh, Beats: fresh, Timeout: 30 * time.Second},
			want: []string{"preempt_requested crit"},
		},
		"undrained: work again": {
			log:  []events.Event{n1, events.Drained{Node: "n1"}, events.Undrained{Node: "n1"}, queued},
			live: decide.Liveness{LastSeen: fresh, Beats: fresh, Timeout: 30 * time.Second},
			want: []string{"dispatched q on n1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			st := fold(tc.log...)
			// Plan is pure: on a state without the overlay, the state and
			// its away marks (none) are as they were.
			bare := fold(tc.log...)
			before := bare.Clone()
			decide.Plan(bare, policy.New(policy.Options{}), now, tc.live, nil)
			if diff := cmp.Diff(before, bare, cmpopts.EquateEmpty(), cmpopts.IgnoreUnexported(domain.State{}, domain.Task{}, domain.Node{})); diff != "" {
				t.Errorf("Plan changed the state (-before +after):\n%s", diff)
			}
			if away := awayNodes(bare); len(away) > 0 {
				t.Errorf("Plan marked %v away", away)
			}
			tc.live.Overlay(st, now)
			got := summary(decide.Plan(st, policy.New(policy.Options{}), now, tc.live, nil))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRequeueNotStarted: a task its node gave back because its process
// never started (events.Preempted.NotStarted) is requeued saying so, from
// its checkpoint, and not counted as a preemption (before, the agent
// reported it failed: "no record of the task's process").
func TestRequeueNotStarted(t *testing.T) {
	now := t0.Add(time.Minute)
	fresh := map[string]time.Time{"n1": now.Add(-time.Second)}
	tests := map[string]struct {
		report     events.Preempted
		wantReason string
		wantCount  int
	}{
		"never started": {
			report:     events.Preempted{TaskID: "r", Node: "n1", Checkpoint: "step-427", ExitCode: -1, NotStarted: true},
			wantReason: domain.NotStartedReason("n1") + "; resumes from step-427",
		},
		"preempted after running": {
			report:     events.Preempted{TaskID: "r", Node: "n1", Checkpoint: "step-427", ExitCode: -1, Forced: true},
			wantReason: "preempted; resumes from step-427", // no request of this attempt: a plain preempted
			wantCount:  1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			log := append([]events.Event{dt.Node("n1").GPUs(1).Available()}, running("r", domain.Medium, true, dt.On("n1", 0), 1)...)
			st := fold(append(log, events.Checkpointed{TaskID: "r", Ref: "step-427"}, tc.report)...)
			if got := st.Tasks["r"].Preemptions; got != tc.wantCount {
				t.Errorf("preemptions %d, want %d", got, tc.wantCount)
			}
			cmds := decide.Plan(st, policy.New(policy.Options{}), now, decide.Liveness{LastSeen: fresh, Beats: fresh, Timeout: 30 * time.Second}, nil)
			var got []events.Requeued
			for _, c := range cmds {
				if r, ok := c.Event.(events.Requeued); ok {
					got = append(got, r)
				}
			}
			want := []events.Requeued{{TaskID: "r", Reason: tc.wantReason, ResumeFrom: "step-427", BasedOnSeq: st.Seq, Code: events.RequeuePreempted}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("requeued (-want +got):\n%s", diff)
			}
		})
	}
}

// awayNodes lists the nodes marked away (Liveness.Overlay).
func awayNodes(st *domain.State) []string {
	var out []string
	for _, name := range st.NodeNames() {
		if st.Nodes[name].Away() {
			out = append(out, name)
		}
	}
	return out
}
