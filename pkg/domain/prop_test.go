package domain_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
)

// Property tests of the fold over random logs: a random cluster (1–4 nodes
// × 1–8 GPUs), then random facts about a small pool of tasks. A quarter of
// the facts are drawn blind (any task, any GPUs, conflicts included); the
// rest are drawn from the state folded so far (a dispatch onto free GPUs,
// a start of a dispatched task), so that logs reach deep states: running,
// cancelled while holding, preempted, requeued and dispatched again.

var actions = []string{
	"submit", "submit", "submit", "dispatch", "dispatch", "dispatch", "start", "start",
	"preempt_request", "preempt_request", "preempted", "preempted", "requeue", "requeue",
	"complete", "fail", "cancel", "checkpoint", "amend", "checklist", "unknown_task", "unknown_node",
	"available", "unhealthy", "drain", "lose",
}

// fits lists, per action, the task states in which the fact makes sense.
var fits = map[string][]domain.TaskState{
	"dispatch":        {domain.Queued},
	"start":           {domain.Dispatched},
	"complete":        {domain.Running, domain.Cancelled},
	"fail":            {domain.Running, domain.Dispatched, domain.Cancelled},
	"cancel":          {domain.Queued, domain.Dispatched, domain.Running, domain.Preempting},
	"preempt_request": {domain.Running, domain.Dispatched},
	"checkpoint":      {domain.Running, domain.Preempting},
	"preempted":       {domain.Preempting, domain.Cancelled},
	"requeue":         {domain.Preempting},
	"amend":           {domain.Queued},
}

type cluster struct {
	nodes []string
	gpus  map[string]int
}

// genLog draws a log. It folds as it goes only to draw plausible facts;
// the properties fold the returned records afresh.
func genLog(t *rapid.T) []events.Record { return genLogOf(t, actions) }

// genLogOf draws a log whose facts are drawn from acts (repeat an action to
// weight it).
func genLogOf(t *rapid.T, acts []string) []events.Record {
	log := dt.NewLog()
	live := domain.NewState()
	add := func(at time.Time, subject string, e events.Event) {
		log.At(at)
		if subject == "" {
			log.Append(e)
		} else {
			log.AppendOn(subject, e)
		}
		rs := log.Records()
		live.Apply(rs[len(rs)-1])
	}
	var c cluster
	c.gpus = map[string]int{}
	for i := range rapid.IntRange(1, 4).Draw(t, "nodes") {
		name := fmt.Sprintf("n%d", i)
		c.nodes = append(c.nodes, name)
		c.gpus[name] = rapid.IntRange(1, 8).Draw(t, "gpus")
		add(dt.Epoch, "", dt.Node(name).GPUs(c.gpus[name]).Available())
	}
	ids := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}[:rapid.IntRange(1, 8).Draw(t, "tasks")]
	priorities := []string{"critical", "high", "medium", "low", "HIGH", "bogus"}

	steps := rapid.IntRange(0, 120).Draw(t, "steps")
	for range steps {
		at := dt.Epoch.Add(time.Duration(rapid.IntRange(0, 600).Draw(t, "minute")) * time.Minute)
		act := rapid.SampledFrom(acts).Draw(t, "action")
		id := rapid.SampledFrom(ids).Draw(t, "task")
		if want, ok := fits[act]; ok && rapid.IntRange(0, 3).Draw(t, "plausible") > 0 {
			var cands []string
			for _, x := range ids {
				if tk := live.Tasks[x]; tk != nil && slices.Contains(want, tk.State) {
					cands = append(cands, x)
				}
			}
			if len(cands) > 0 {
				id = rapid.SampledFrom(cands).Draw(t, "fitting task")
			}
		}
		node := rapid.SampledFrom(c.nodes).Draw(t, "node")
		var e events.Event
		subject := ""
		switch act {
		case "submit":
			e = dt.Task().ID(id).PriorityName(rapid.SampledFrom(priorities).Draw(t, "priority")).
				GPUs(rapid.IntRange(1, 4).Draw(t, "want gpus")).
				IdempotencyKey(rapid.SampledFrom([]string{"", "k1", "k2"}).Draw(t, "idem")).
				SubmittedAt(dt.Epoch.Add(time.Duration(rapid.IntRange(0, 20).Draw(t, "submitted minute")) * time.Minute)).
				Submitted()
		case "dispatch":
			e = dt.Dispatch(id, genPlacements(t, c, live)...)
		case "start":
			e = events.Started{TaskID: id, Node: node, PID: rapid.IntRange(1, 99999).Draw(t, "pid")}
		case "complete":
			e = events.Completed{TaskID: id, Node: node}
		case "fail":
			e = events.Failed{TaskID: id, Node: node, ExitCode: rapid.IntRange(-1, 255).Draw(t, "exit"), Error: "boom"}
		case "cancel":
			e = events.Cancelled{TaskID: id, By: "alice", Reason: "r"}
		case "preempt_request":
			e = events.PreemptRequested{TaskID: id, For: rapid.SampledFrom(ids).Draw(t, "for"), Policy: "p", Reason: "r"}
		case "checkpoint":
			e = events.Checkpointed{TaskID: id, Ref: fmt.Sprintf("ckpt-%d", rapid.IntRange(0, 9).Draw(t, "ckpt"))}
		case "preempted":
			e = events.Preempted{TaskID: id, Node: node, Checkpoint: rapid.SampledFrom([]string{"", "ckpt-p"}).Draw(t, "ckpt"),
				LostGPUSeconds: float64(rapid.IntRange(0, 100).Draw(t, "lost"))}
		case "requeue":
			e = events.Requeued{TaskID: id, Reason: "r", ResumeFrom: "ckpt-r"}
		case "amend":
			e = events.Amended{TaskID: id, GPUs: rapid.IntRange(0, 4).Draw(t, "amend gpus"),
				Priority: rapid.SampledFrom(append([]string{""}, priorities...)).Draw(t, "amend priority")}
		case "checklist":
			e = events.ChecklistUpdated{TaskID: id, Item: rapid.SampledFrom(domain.ChecklistItems).Draw(t, "item"), Done: rapid.Bool().Draw(t, "done")}
		case "unknown_task":
			e = dt.UnknownTask(id, "resized")
		case "unknown_node":
			e, subject = dt.UnknownNode(node, "rebooted"), dt.NodeSubject(node, "rebooted")
		case "available":
			e = dt.Node(node).GPUs(c.gpus[node]).Unhealthy(rapid.IntRange(0, c.gpus[node]).Draw(t, "unhealthy gpu")).Available()
		case "unhealthy":
			e = events.Unhealthy{Node: node, GPUs: []string{dt.GPU(node, rapid.IntRange(0, c.gpus[node]-1).Draw(t, "gpu"))}, Reason: "Xid"}
		case "drain":
			e = events.Drained{Node: node, Reason: "ops"}
		case "lose":
			e = events.Lost{Node: node, Reason: "heartbeat"}
		}
		add(at, subject, e)
	}
	return log.Records()
}

// genPlacements draws either free GPUs of the folded state, on one or two
// nodes, or any GPU indices (out of range, repeated, held, on a node that
// does not exist).
func genPlacements(t *rapid.T, c cluster, st *domain.State) []events.Placement {
	if rapid.IntRange(0, 3).Draw(t, "fitting placement") > 0 {
		var ps []events.Placement
		nodes := rapid.Permutation(c.nodes).Draw(t, "placement nodes")
		for _, node := range nodes[:rapid.IntRange(1, min(2, len(nodes))).Draw(t, "placement nodes used")] {
			free := st.FreeGPUs(st.Nodes[node])
			if len(free) == 0 {
				continue
			}
			p := events.Placement{Node: node}
			for _, gpu := range free[:rapid.IntRange(1, len(free)).Draw(t, "placement size")] {
				p.GPUs = append(p.GPUs, gpu.UUID)
			}
			ps = append(ps, p)
		}
		if len(ps) > 0 {
			return ps
		}
	}
	var ps []events.Placement
	for range rapid.IntRange(0, 2).Draw(t, "placements") {
		node := rapid.SampledFrom(append([]string{"ghost"}, c.nodes...)).Draw(t, "placement node")
		max := c.gpus[node] // one past the last GPU: a GPU the node lacks
		p := events.Placement{Node: node}
		for range rapid.IntRange(0, 3).Draw(t, "placement size") {
			p.GPUs = append(p.GPUs, dt.GPU(node, rapid.IntRange(0, max).Draw(t, "gpu index")))
		}
		ps = append(ps, p)
	}
	return ps
}

// (a) Folding the same log twice gives the same state.
func TestPropFoldIsDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs := genLog(t)
		a, b := dt.Fold(rs), dt.Fold(rs)
		if diff := cmp.Diff(a, b, stateOpts); diff != "" {
			t.Fatalf("two folds of one log differ (-first +second):\n%s", diff)
		}
		if diff := cmp.Diff(ids(a.Queued()), ids(b.Queued())); diff != "" {
			t.Fatalf("Queued() of two folds differ (-first +second):\n%s", diff)
		}
	})
}

// (b) A fold done in two halves through a Clone equals a fresh fold, and
// neither half leaks into the other: Clone is deep, Apply is deterministic.
// The queue index is checked the same way in TestPropQueuedOrder.
func TestPropCloneThenApply(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs := genLog(t)
		k := rapid.IntRange(0, len(rs)).Draw(t, "k")
		whole := dt.Fold(rs)
		head := dt.Fold(rs[:k])

		// Forward: finish the fold on a clone; the original stays the head.
		orig := dt.Fold(rs[:k])
		c := orig.Clone()
		if diff := cmp.Diff(head, c, stateOpts); diff != "" {
			t.Fatalf("Clone() differs from its original (-want +got):\n%s", diff)
		}
		for _, r := range rs[k:] {
			c.Apply(r)
		}
		if diff := cmp.Diff(whole, c, stateOpts); diff != "" {
			t.Fatalf("fold of %d records, then Clone, then the other %d (-fresh +halves):\n%s", k, len(rs)-k, diff)
		}
		if diff := cmp.Diff(head, orig, stateOpts); diff != "" {
			t.Fatalf("applying to the clone changed the original (-want +got):\n%s", diff)
		}

		// Backward: finish the fold on the original; the clone stays the head.
		snap := orig.Clone()
		for _, r := range rs[k:] {
			orig.Apply(r)
		}
		if diff := cmp.Diff(head, snap, stateOpts); diff != "" {
			t.Fatalf("applying to the original changed its clone (-want +got):\n%s", diff)
		}
	})
}

// (c)–(f) Invariants that hold after every record.
func TestPropInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs := genLog(t)
		st := domain.NewState()
		submitted := map[string]*domain.Task{} // the task as first submitted
		finished := map[string]domain.TaskState{}
		for i, r := range rs {
			st.Apply(r)
			at := fmt.Sprintf("after record %d (seq %d, %s %+v)", i, r.Seq, r.Event.EventType(), r.Event)
			if e, ok := r.Event.(events.Submitted); ok && submitted[e.TaskID] == nil {
				submitted[e.TaskID] = st.Tasks[e.TaskID].Clone()
			}
			checkOwners(t, st, at)
			for id, task := range st.Tasks {
				// (d) Terminal tasks hold no GPUs, unless cancelled while
				// their process runs; Holding means exactly that.
				if task.State.Terminal() && task.HoldsGPUs() && !(task.State == domain.Cancelled && task.Holding) {
					t.Fatalf("%s: %s is %s and holds %v (Holding %v)", at, id, task.State, task.GPUUUIDs(), task.Holding)
				}
				if task.Holding && (task.State != domain.Cancelled || !task.HoldsGPUs()) {
					t.Fatalf("%s: %s has Holding in state %s with GPUs %v", at, id, task.State, task.GPUUUIDs())
				}
				// (e) SubmittedAt, its place in line, never changes.
				first := submitted[id]
				if !task.SubmittedAt.Equal(first.SubmittedAt) || task.SubmitSeq != first.SubmitSeq {
					t.Fatalf("%s: %s SubmittedAt, SubmitSeq = %v, %d; first submitted %v, %d", at, id,
						task.SubmittedAt, task.SubmitSeq, first.SubmittedAt, first.SubmitSeq)
				}
				// (f) Only placed tasks hold GPUs; placed ones always do.
				switch task.State {
				case domain.Queued:
					if task.HoldsGPUs() {
						t.Fatalf("%s: queued %s holds %v", at, id, task.GPUUUIDs())
					}
				case domain.Dispatched, domain.Running:
					if !task.HoldsGPUs() {
						t.Fatalf("%s: %s %s holds no GPUs", at, task.State, id)
					}
				}
				// (f) Completed, failed and cancelled are final.
				if was, ok := finished[id]; ok && task.State != was {
					t.Fatalf("%s: %s left final state %s for %s", at, id, was, task.State)
				}
				if task.State == domain.Completed || task.State == domain.Failed || task.State == domain.Cancelled {
					if _, ok := finished[id]; !ok {
						finished[id] = task.State
					}
				} else {
					delete(finished, id)
				}
			}
		}
	})
}

// (f) Queued() is exactly the queued tasks in Task.Before order, after
// every record and through a Clone. The log is weighted towards what moves tasks in and out of
// the queue and between classes.
func TestPropQueuedOrder(t *testing.T) {
	acts := []string{"submit", "submit", "submit", "amend", "amend", "amend", "dispatch", "dispatch",
		"preempt_request", "preempted", "requeue", "requeue", "cancel", "complete"}
	check := func(t *rapid.T) {
		rs := genLogOf(t, acts)
		st := domain.NewState()
		for i, r := range rs {
			st.Apply(r)
			checkQueued(t, st, fmt.Sprintf("after record %d (seq %d, %s %+v)", i, r.Seq, r.Event.EventType(), r.Event))
		}
		// Through a Clone at record k, the queue is the fresh fold's, and
		// the original's queue is unchanged by what the clone applies.
		k := rapid.IntRange(0, len(rs)).Draw(t, "k")
		head := dt.Fold(rs[:k])
		want := ids(head.Queued())
		c := head.Clone()
		if diff := cmp.Diff(want, ids(c.Queued())); diff != "" {
			t.Fatalf("Clone().Queued() at record %d (-want +got):\n%s", k, diff)
		}
		for _, r := range rs[k:] {
			c.Apply(r)
		}
		if diff := cmp.Diff(ids(st.Queued()), ids(c.Queued())); diff != "" {
			t.Fatalf("Queued() of %d records, Clone, then the other %d (-fresh +halves):\n%s", k, len(rs)-k, diff)
		}
		if diff := cmp.Diff(want, ids(head.Queued())); diff != "" {
			t.Fatalf("applying to the clone changed the original's Queued() (-want +got):\n%s", diff)
		}
	}
	rapid.Check(t, check)
}

// (c) No GPU is owned by two tasks: Owner is consistent with every task's
// placements, both ways.
func checkOwners(t *rapid.T, st *domain.State, at string) {
	seen := map[string]string{}
	for id, task := range st.Tasks {
		for _, gpu := range task.GPUUUIDs() {
			if other, ok := seen[gpu]; ok {
				t.Fatalf("%s: GPU %s placed for both %s and %s", at, gpu, other, id)
			}
			seen[gpu] = id
			if st.Owner[gpu] != id {
				t.Fatalf("%s: %s holds %s but Owner[%s] = %q", at, id, gpu, gpu, st.Owner[gpu])
			}
		}
	}
	for gpu, id := range st.Owner {
		if seen[gpu] != id {
			t.Fatalf("%s: Owner[%s] = %s, but %s's placements are %v", at, gpu, id, id, st.Tasks[id].GPUUUIDs())
		}
	}
}

// checkQueued compares the fold's queue with the definition: the queued
// tasks sorted by Task.Before.
func checkQueued(t *rapid.T, st *domain.State, at string) {
	var want []*domain.Task
	for _, task := range st.Tasks {
		if task.State == domain.Queued {
			want = append(want, task)
		}
	}
	sort.Slice(want, func(i, j int) bool { return want[i].Before(want[j]) })
	if diff := cmp.Diff(ids(want), ids(st.Queued())); diff != "" {
		t.Fatalf("%s: Queued() (-want +got):\n%s", at, diff)
	}
}

// (g) Replay through the wire: folding the log after Encode → Decode gives
// the state folded from the events themselves.
func TestPropFoldOfDecodedLog(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs := genLog(t)
		decoded := make([]events.Record, len(rs))
		for i, r := range rs {
			var data []byte
			subject := r.Subject
			if u, ok := r.Event.(events.Unknown); ok {
				data, _ = json.Marshal(events.Envelope{ID: "x", Type: u.Type, Version: u.Version, Time: r.Envelope.Time, Data: u.Raw})
			} else {
				var err error
				subject, data, _, err = events.Encode(r.Event, events.Meta{Time: r.Envelope.Time})
				if err != nil {
					t.Fatalf("Encode(%+v): %v", r.Event, err)
				}
			}
			rec, err := events.Decode(events.Stored{Seq: r.Seq, Subject: subject, Data: data})
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			decoded[i] = rec
		}
		want, got := dt.Fold(rs), dt.Fold(decoded)
		if diff := cmp.Diff(want, got, stateOpts); diff != "" {
			t.Fatalf("(-fold of events +fold of decoded log):\n%s", diff)
		}
		if diff := cmp.Diff(ids(want.Queued()), ids(got.Queued())); diff != "" {
			t.Fatalf("Queued() (-fold of events +fold of decoded log):\n%s", diff)
		}
	})
}

// (h) Every index Apply keeps (free GPUs per node and in all, sorted node
// names, schedulable nodes, totals, GPUs per team, preempting tasks,
// victims) equals its computation from scratch after every record, and
// through Clone and CloneLive: applying to a copy keeps the copy's
// indexes right and leaves the original's as they were.
func TestPropIndexes(t *testing.T) {
	clones := []struct {
		name  string
		clone func(*domain.State) *domain.State
		// whole: the copy folds like the original (CloneLive drops
		// finished tasks, so a later fact about one differs).
		whole bool
	}{
		{"Clone", (*domain.State).Clone, true},
		{"CloneLive", (*domain.State).CloneLive, false},
	}
	for _, tc := range clones {
		t.Run(tc.name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				rs := genLog(t)
				st := domain.NewState()
				for i, r := range rs {
					st.Apply(r)
					if m := st.IndexMismatch(); m != "" {
						t.Fatalf("after record %d (seq %d, %s %+v): %s", i, r.Seq, r.Event.EventType(), r.Event, m)
					}
				}
				k := rapid.IntRange(0, len(rs)).Draw(t, "k")
				orig := dt.Fold(rs[:k])
				c := tc.clone(orig)
				if m := c.IndexMismatch(); m != "" {
					t.Fatalf("%s at record %d: %s", tc.name, k, m)
				}
				for i, r := range rs[k:] {
					c.Apply(r)
					if m := c.IndexMismatch(); m != "" {
						t.Fatalf("%s at record %d, then record %d (%s %+v): %s", tc.name, k, k+i, r.Event.EventType(), r.Event, m)
					}
				}
				if m := orig.IndexMismatch(); m != "" {
					t.Fatalf("applying to the %s changed the original's indexes: %s", tc.name, m)
				}
				if !tc.whole {
					return
				}
				if diff := cmp.Diff(st.FreeNodes(), c.FreeNodes()); diff != "" {
					t.Fatalf("FreeNodes() of a fold through %s (-fresh +halves):\n%s", tc.name, diff)
				}
			})
		})
	}
}
