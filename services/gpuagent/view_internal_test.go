package gpuagent

import (
	"testing"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestSeeCopies: the view a reaction acts on is a copy of what the agent
// needs of the state — the tasks placed on its node, the tasks its runs
// and reports name, the tasks those yield to, its node and its held GPUs —
// and the fold's later records do not reach it (nothing of the agent keeps
// a pointer into the state).
func TestSeeCopies(t *testing.T) {
	log := dt.NewLog().Append(
		dt.Node("n1").GPUs(2).Available(), dt.Node("n2").GPUs(2).Available(),
		dt.Task().ID("here").GPUs(1).Submitted(), dt.Task().ID("there").GPUs(1).Submitted(),
		dt.Task().ID("ran").GPUs(1).Submitted(), dt.Task().ID("crit").GPUs(2).Submitted(),
		dt.Dispatch("here", dt.On("n1", 1)), dt.Dispatch("there", dt.On("n2", 0)),
		events.Started{TaskID: "here", Node: "n1", PID: 1},
		events.PreemptRequested{TaskID: "here", For: "crit", Policy: "ladder", Reason: "critical waits", Code: events.PreemptByClass},
	)
	st := log.Fold()
	a := &Agent{cfg: Config{Node: "n1"}, procs: map[string]*proc{}, pending: map[string]report{
		"ran/9": {task: "ran", dispatch: 9},
	}}
	v := a.see(st)

	cases := map[string]struct {
		got, want any
	}{
		"placed here":           {got: v.task("here") != nil, want: true},
		"placed elsewhere":      {got: v.task("there") == nil, want: true},
		"named by a report":     {got: v.task("ran") != nil, want: true},
		"yielded to":            {got: v.task("crit") != nil, want: true},
		"here, in order":        {got: len(v.here) == 1 && v.here[0].ID == "here", want: true},
		"held GPU":              {got: v.held[dt.GPU("n1", 1)], want: true},
		"free GPU":              {got: v.held[dt.GPU("n1", 0)], want: false},
		"elsewhere's GPU":       {got: v.held[dt.GPU("n2", 0)], want: false},
		"node":                  {got: v.node != nil && v.node.Name == "n1" && v.node.State == domain.NodeUp, want: true},
		"copy, not the state's": {got: v.task("here") != st.Tasks["here"], want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %v; want %v", tc.got, tc.want)
			}
		})
	}

	// Records folded after the view leave it as it was.
	for _, r := range dt.NewLog().At(dt.Epoch.Add(3600e9)).Append(
		events.Preempted{TaskID: "here", Node: "n1"},
		events.Lost{Node: "n1", Reason: "heartbeats missed"},
	).Records() {
		r.Seq += log.LastSeq()
		if why := st.Apply(r); why != "" {
			t.Fatalf("setup: %s", why)
		}
	}
	if got := v.task("here"); got.State != domain.Preempting || !got.HoldsGPUs() {
		t.Errorf("view's task after later records: %s, holds GPUs %v; want preempting, holding (the view is a copy)", got.State, got.HoldsGPUs())
	}
	if v.node.State != domain.NodeUp {
		t.Errorf("view's node after it was lost in the state: %s; want up", v.node.State)
	}
}
