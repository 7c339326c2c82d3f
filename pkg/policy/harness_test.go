package policy_test

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// The harness builds a state the only way the services do: by folding
// events through domain.State.Apply, with increasing sequences and times.
//
//	c := cluster(t).node("n1", 8, "A100", 40960).
//		running(task{id: "r1", gpus: 6, pred: 2 * time.Hour}, on("n1", 0, 1, 2, 3, 4, 5)).
//		submit(task{id: "q1", gpus: 8})
//	r := c.plan(policy.Options{Explain: true})
//	c.play(r) // dispatch → Dispatched+Started; preempt → PreemptRequested

// t0 is the harness's first event time.
var t0 = time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)

// tb is what the harness needs of *testing.T, *testing.B and *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

type harness struct {
	tb   tb
	st   *domain.State
	seq  uint64
	now  time.Time
	pred map[string]time.Duration // Input.Predict, by task id
}

func cluster(t tb) *harness {
	return &harness{tb: t, st: domain.NewState(), now: t0, pred: map[string]time.Duration{}}
}

// task is a submission; zero values are: class MEDIUM, 1 GPU, team "x",
// 1 h estimate, preemptible, no constraints, submitted now.
type task struct {
	id        string
	class     domain.Priority
	gpus      int
	team      string
	hours     float64
	pred      time.Duration // Input.Predict's answer; zero: the estimate
	noPreempt bool
	model     string
	mem       int
	at        time.Time // SubmittedAt
}

// gpu is the UUID of GPU i of a harness node.
func gpu(node string, i int) string { return fmt.Sprintf("GPU-%s-%d", node, i) }

// on is a placement on GPUs (by index) of a node.
func on(node string, idx ...int) events.Placement {
	p := events.Placement{Node: node, GPUs: make([]string, len(idx))}
	for i, x := range idx {
		p.GPUs[i] = gpu(node, x)
	}
	return p
}

// span is indices lo..hi-1.
func span(lo, hi int) []int {
	var out []int
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

// emit folds one event at the harness's clock; a fact the fold ignores is
// a broken test setup.
func (h *harness) emit(e events.Event) *harness {
	h.tb.Helper()
	h.seq++
	ign := h.st.Ignored
	h.st.Apply(events.Record{Seq: h.seq, Subject: events.Subject(e),
		Envelope: events.Envelope{ID: fmt.Sprintf("evt-%d", h.seq), Type: e.EventType(), Version: events.SchemaVersion, Time: h.now},
		Event:    e})
	if h.st.Ignored != ign {
		h.tb.Fatalf("harness: the fold ignored %T %+v", e, e)
	}
	return h
}

func (h *harness) advance(d time.Duration) *harness { h.now = h.now.Add(d); return h }

// node adds a node of n GPUs of one model; GPUs listed in bad are unhealthy.
func (h *harness) node(name string, n int, model string, memMiB int, bad ...int) *harness {
	h.tb.Helper()
	isBad := map[int]bool{}
	for _, i := range bad {
		isBad[i] = true
	}
	a := events.Available{Node: name, BootID: "boot-" + name}
	for i := 0; i < n; i++ {
		a.GPUs = append(a.GPUs, events.GPU{UUID: gpu(name, i), Index: i, Model: model, MemoryMiB: memMiB, Healthy: !isBad[i]})
		if !isBad[i] {
			a.FreeGPUs++
		}
	}
	return h.emit(a)
}

// nodes adds nodes n1..nk, each of per 80 GiB H100s.
func (h *harness) nodes(k, per int) *harness {
	for i := 1; i <= k; i++ {
		h.node(fmt.Sprintf("n%d", i), per, "H100", 81920)
	}
	return h
}

func (h *harness) unhealthy(node string, idx ...int) *harness {
	var us []string
	for _, i := range idx {
		us = append(us, gpu(node, i))
	}
	return h.emit(events.Unhealthy{Node: node, GPUs: us, Reason: "Xid 79"})
}

func (h *harness) drain(node string) *harness {
	return h.emit(events.Drained{Node: node, Reason: "maintenance"})
}

func (h *harness) lose(node string) *harness {
	return h.emit(events.Lost{Node: node, Reason: "no heartbeat"})
}

func (h *harness) submit(ts ...task) *harness {
	h.tb.Helper()
	for _, t := range ts {
		if t.class == 0 {
			t.class = domain.Medium
		}
		if t.gpus == 0 {
			t.gpus = 1
		}
		if t.team == "" {
			t.team = "x"
		}
		if t.hours == 0 {
			t.hours = 1
		}
		if t.at.IsZero() {
			t.at = h.now
		}
		if t.pred > 0 {
			h.pred[t.id] = t.pred
		}
		h.emit(events.Submitted{TaskID: t.id, Name: t.id, Team: t.team, Priority: t.class.String(), GPUs: t.gpus,
			Hours: t.hours, Hypothesis: "h", Command: "true", Preemptible: !t.noPreempt, GPUModel: t.model,
			MinGPUMemMiB: t.mem, SubmittedAt: t.at})
	}
	return h
}

// start dispatches and starts a submitted task now.
func (h *harness) start(id string, ps ...events.Placement) *harness {
	h.tb.Helper()
	h.emit(events.Dispatched{TaskID: id, Placements: ps, BasedOnSeq: h.seq})
	return h.emit(events.Started{TaskID: id, Node: ps[0].Node, PID: 100})
}

// running submits a task and starts it now on the placements.
func (h *harness) running(t task, ps ...events.Placement) *harness {
	h.tb.Helper()
	if t.gpus == 0 {
		for _, p := range ps {
			t.gpus += len(p.GPUs)
		}
	}
	return h.submit(t).start(t.id, ps...)
}

func (h *harness) checkpoint(id string) *harness {
	return h.emit(events.Checkpointed{TaskID: id, Ref: "ckpt-" + id})
}

// preempting asks a running task to yield for another.
func (h *harness) preempting(id, forID string) *harness {
	return h.emit(events.PreemptRequested{TaskID: id, For: forID, Policy: "test", Reason: "test"})
}

func (h *harness) complete(id string) *harness {
	return h.emit(events.Completed{TaskID: id, Node: h.st.Tasks[id].Node})
}

// exit is a preempted task's process ending and the task's requeue.
func (h *harness) exit(id string) *harness {
	h.tb.Helper()
	t := h.st.Tasks[id]
	h.emit(events.Preempted{TaskID: id, Node: t.Node, Checkpoint: t.Checkpoint})
	return h.emit(events.Requeued{TaskID: id, Reason: "preempted", ResumeFrom: t.Checkpoint})
}

func (h *harness) predict(t *domain.Task) time.Duration { return h.pred[t.ID] }

func (h *harness) input() policy.Input {
	return policy.Input{State: h.st, Now: h.now, Predict: h.predict}
}

func (h *harness) plan(o policy.Options) policy.Result { return policy.New(o).Plan(h.input()) }

// play applies a pass's decisions as the scheduler would publish them:
// a dispatch as Dispatched and Started, a preemption as PreemptRequested.
func (h *harness) play(r policy.Result) *harness {
	h.tb.Helper()
	for _, d := range r.Decisions {
		switch d.Kind {
		case policy.Dispatch:
			h.emit(events.Dispatched{TaskID: d.TaskID, Placements: d.Placements, BasedOnSeq: h.seq, Reason: d.Reason, Backfill: d.Backfill})
			h.emit(events.Started{TaskID: d.TaskID, Node: d.Placements[0].Node, PID: 100})
		case policy.Preempt:
			h.emit(events.PreemptRequested{TaskID: d.TaskID, For: d.For, Policy: "test", Reason: d.Reason, BasedOnSeq: h.seq})
		default:
			h.tb.Fatalf("unknown decision kind %q", d.Kind)
		}
	}
	return h
}

// exitAll lets every task asked to yield exit and requeue.
func (h *harness) exitAll() *harness {
	for _, t := range h.st.InState(domain.Preempting) {
		if t.HoldsGPUs() {
			h.exit(t.ID)
		}
	}
	return h
}

// usage is the GPUs held per team.
func (h *harness) usage() map[string]int {
	u := map[string]int{}
	for _, t := range h.st.Active() {
		u[t.Team] += len(t.GPUUUIDs())
	}
	return u
}

// summary renders decisions compactly for table diffs:
// "dispatch q1 n1[0 1]", "dispatch q2 n1[0-7]+n2[0-7] backfill",
// "preempt v1 for c1".
func summary(ds []policy.Decision) []string {
	out := []string{}
	for _, d := range ds {
		switch d.Kind {
		case policy.Dispatch:
			s := "dispatch " + d.TaskID + " " + placements(d.Placements)
			if d.Backfill {
				s += " backfill"
			}
			out = append(out, s)
		case policy.Preempt:
			out = append(out, "preempt "+d.TaskID+" for "+d.For)
		default:
			out = append(out, string(d.Kind)+" "+d.TaskID)
		}
	}
	return out
}

func placements(ps []events.Placement) string {
	var parts []string
	for _, p := range ps {
		var idx []int
		for _, g := range p.GPUs {
			i, err := strconv.Atoi(g[strings.LastIndex(g, "-")+1:])
			if err != nil {
				i = -1
			}
			idx = append(idx, i)
		}
		sort.Ints(idx)
		parts = append(parts, p.Node+"["+ranges(idx)+"]")
	}
	return strings.Join(parts, "+")
}

// ranges writes sorted ints as "0-7" or "0 1 3".
func ranges(idx []int) string {
	if len(idx) > 2 {
		contiguous := true
		for i := 1; i < len(idx); i++ {
			if idx[i] != idx[i-1]+1 {
				contiguous = false
			}
		}
		if contiguous {
			return fmt.Sprintf("%d-%d", idx[0], idx[len(idx)-1])
		}
	}
	s := make([]string, len(idx))
	for i, x := range idx {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, " ")
}

// dispatched lists the ids of dispatched tasks in decision order.
func dispatched(r policy.Result) []string {
	out := []string{}
	for _, d := range r.Decisions {
		if d.Kind == policy.Dispatch {
			out = append(out, d.TaskID)
		}
	}
	return out
}

// preempts lists the preemption decisions.
func preempts(r policy.Result) []policy.Decision {
	var out []policy.Decision
	for _, d := range r.Decisions {
		if d.Kind == policy.Preempt {
			out = append(out, d)
		}
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }

func cancelled(id string) events.Cancelled {
	return events.Cancelled{TaskID: id, By: "test", Reason: "test"}
}

// dispatchOnly is a dispatch the agent has not started yet.
func dispatchOnly(id string, ps ...events.Placement) events.Dispatched {
	return events.Dispatched{TaskID: id, Placements: ps, Reason: "test"}
}
