package estimate

import (
	"time"

	"github.com/gpuq/gpuq/pkg/decide"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// Arrival is work predicted to arrive during the forward simulation (a
// CRITICAL task submitted later jumps ahead of a queued MEDIUM one).
type Arrival struct {
	At       time.Time
	GPUs     int
	Hours    float64
	Priority domain.Priority
	Team     string
}

// forwardAllSteps is the horizon of a forward simulation of the whole
// queue, in passes.
const forwardAllSteps = 1000000

// forwardSteps is the horizon of a forward simulation for one task, in
// passes.
const forwardSteps = 100000

// MinStep is the least a forward simulation's clock advances from one
// pass to the next: the ends and arrivals within MinStep of the last pass
// are planned together, at MinStep after it at the earliest. Without it a
// prediction that ended before the simulation's clock (one overflowed by a
// log-ratio learned from a task estimated at 1e-300 hours) left the batch
// empty and the clock where it was, and every simulation ran its
// forwardSteps passes without time moving (issue 22: a replay of 3 s took
// 94 s). One second is the scheduler's own period (it plans at least once
// a second, scheduler.Config.Tick): a start the simulation places up to a
// second late is within the resolution of the starts it predicts, and far
// below the estimates' own error (a median |P50 error| of hundreds of
// seconds, docs/performance.md).
const MinStep = time.Second

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

type fwd struct {
	sim   *domain.State
	pred  *Predictor
	q     float64
	vnow  time.Time
	total map[*domain.Task]time.Duration // predicted length of each task's current run
	ends  endHeap
	narr  int                   // arrivals submitted
	fresh map[*domain.Task]bool // dispatched or requeued in the simulation
	// order is the started holders by predicted end, as the policy's
	// passes on sim read them (policy.Input.Ends); nil when a holder
	// started after now (a clock ahead), and the passes predict every
	// holder.
	order *policy.EndOrder

	// What the simulation needs after its first pass (startForward), so
	// that run can continue it later, on another goroutine.
	pol      *policy.Policy
	now      time.Time
	arrivals []Arrival
	maxSteps int
	window   float64
	starts   map[string]time.Time
	waiting  map[string]bool
	predict  func(*domain.Task) time.Duration
	res      policy.Result // the first pass's decisions
	replan   bool          // the protocol changed the state: the first pass plans on the copy
	// capped: the simulation stopped at its horizon of maxSteps passes,
	// at vnow, with tasks still waiting (each starts later than vnow, if
	// ever).
	capped bool
}

// nextAt is the time of the next live end or arrival (stale ends, of tasks
// preempted or requeued since, are dropped); ok is false when none is left.
func (f *fwd) nextAt(arrivals []Arrival, ai int) (time.Time, bool) {
	for f.ends.Len() > 0 {
		e := f.ends[0]
		if e.t.HoldsGPUs() && e.t.DispatchSeq == e.dispatch {
			break
		}
		f.ends.pop()
	}
	switch {
	case ai < len(arrivals) && (f.ends.Len() == 0 || !arrivals[ai].At.After(f.ends[0].at)):
		return arrivals[ai].At, true
	case f.ends.Len() > 0:
		return f.ends[0].at, true
	}
	return time.Time{}, false
}

// wakeAt is when the simulation must plan again although no task ends
// and nothing arrives: the instant a task the pass res left waiting for a
// cheaper preemption (policy.Options.PreemptPatience) has waited out its
// patience and preempts — as the scheduler, which plans every second,
// would see it. wake is false when no task waits so (always with the
// patience off, so the simulation is as it was without it).
func wakeAt(res policy.Result, vnow time.Time) (at time.Time, wake bool) {
	if res.PatientUntil.IsZero() || !res.PatientUntil.After(vnow) {
		return time.Time{}, false
	}
	return res.PatientUntil, true
}

// forward runs the real policy forward from st at now, with run times at
// the q-quantile of pred, applying its decisions as the scheduler and the
// agents would (dispatch → start; preempt → checkpoint at once, requeue;
// a task ends at its predicted end), until target starts (target "":
// until every queued task started) or the horizon of maxSteps passes, and
// returns the predicted starts (a task missing never starts). st is not
// modified: the simulation runs on st.CloneLive().
//
// window coarsens the steps: the events (ends, arrivals) within window ×
// (time ahead) of the next one are taken together and the policy plans
// once, at the middle of the span they cover, instead of once per event. A start an hour ahead is then placed to within a few minutes,
// at a fraction of the passes: the number of passes grows with the
// logarithm of the horizon instead of the number of tasks ending before
// it. The error is symmetric (an end in the first half of a span is taken
// late, in the second half early) and small beside run-time prediction
// errors; the estimator's calibration absorbs what remains. Window 0 is
// one pass per event, as the scheduler would decide.
//
// The end of a task started in the simulation also bounds its batch to
// 2 × window × its predicted run after that end, so the pass that reuses
// its GPUs comes at most window × its run after it: without the bound, a
// queue of short tasks ran one wave per span of window × (time ahead),
// its GPUs idle for most of each, and the predicted wait grew with the
// number of waves ahead (Alibaba at 3 nodes: 63–160 days predicted
// against 17–22 actual; 36–43 with the bound, docs/performance.md).
//
// f is the simulation when it went past its first pass (nil otherwise):
// f.capped tells whether it stopped at its horizon.
func forward(st *domain.State, pol *policy.Policy, pred *Predictor, now time.Time, target string, q float64, arrivals []Arrival, maxSteps int, window float64) (map[string]time.Time, *fwd) {
	f, starts := startForward(st, pol, pred, now, target, q, arrivals, maxSteps, window)
	if f == nil {
		return starts, nil
	}
	return f.run(), f
}

// startForward is what a forward simulation must do while st is as
// given: find the tasks to wait for, plan the first pass on st itself
// and, unless that settles it (f nil: starts is the answer), copy the
// live state and queue the running tasks' ends. What is left, f.run,
// reads only the copy, pred and pol, so it may run on another goroutine
// while st changes — provided pred does not (see Predictor.Snapshot).
func startForward(st *domain.State, pol *policy.Policy, pred *Predictor, now time.Time, target string, q float64, arrivals []Arrival, maxSteps int, window float64) (*fwd, map[string]time.Time) {
	starts := map[string]time.Time{}
	waiting := map[string]bool{}
	if target != "" {
		tt := st.Tasks[target]
		if tt == nil {
			return nil, starts
		}
		if tt.State != domain.Queued {
			if !tt.FirstStarted.IsZero() {
				starts[target] = tt.FirstStarted
			}
			return nil, starts
		}
		waiting[target] = true
	} else {
		for _, t := range st.Queued() {
			waiting[t.ID] = true
		}
	}
	if len(waiting) == 0 {
		return nil, starts
	}
	f := &fwd{pred: pred, q: q, vnow: now, total: map[*domain.Task]time.Duration{}, fresh: map[*domain.Task]bool{},
		pol: pol, now: now, arrivals: arrivals, maxSteps: maxSteps, window: window, starts: starts, waiting: waiting}
	// Predicted run lengths, computed when the policy first asks: a task
	// holding GPUs when the simulation begins runs to its conditional
	// predicted end (given how long it has run); any other task, its
	// predicted run less what it already ran.
	f.predict = func(t *domain.Task) time.Duration {
		if d, ok := f.total[t]; ok {
			return d
		}
		var d time.Duration
		if t.HoldsGPUs() && !f.fresh[t] {
			elapsed := time.Duration(0)
			if !t.StartedAt.IsZero() && now.After(t.StartedAt) {
				elapsed = now.Sub(t.StartedAt)
			}
			d = elapsed + pred.Remaining(t, elapsed, q)
		} else {
			d = pred.LeftToRun(t, q)
		}
		f.total[t] = d
		return d
	}
	// 0. The scheduler's protocol first (decide.Protocol: requeue what
	//    yielded, preempt on drained nodes and unhealthy GPUs), as its next
	//    pass would. Once: nothing in the simulation drains a node, marks a
	//    GPU unhealthy or yields but through the simulation's own steps.
	proto := decide.Protocol(st)
	// 1. The first pass runs on st itself (a pass modifies nothing): when
	//    it starts the target, no copy of the state is needed.
	if len(proto) == 0 {
		f.res = pol.Plan(policy.Input{State: st, Now: now, Predict: f.predict})
		if target != "" {
			for _, d := range f.res.Decisions {
				if d.Kind == policy.Dispatch && d.TaskID == target {
					starts[target] = now
					return nil, starts
				}
			}
		}
	}
	f.sim = st.CloneLive()
	// 2. The tasks holding GPUs end at their conditional predicted end.
	f.order = policy.NewEndOrder(f.sim.Holders())
	for _, t := range f.sim.Active() {
		if !t.StartedAt.IsZero() {
			if t.StartedAt.After(now) {
				f.order = nil
			} else if f.order != nil {
				f.order.Started(t, f.predict)
			}
		}
		rem := f.predict(t)
		if !t.StartedAt.IsZero() && now.After(t.StartedAt) {
			rem -= now.Sub(t.StartedAt)
		}
		if t.State == domain.Preempting {
			rem = time.Minute // checkpointing; gone within its grace
		}
		f.ends.push(end{at: now.Add(rem), t: t, dispatch: t.DispatchSeq})
	}
	if len(proto) > 0 {
		f.protocol(proto)
		f.replan = true // the first pass plans on the state after them
	}
	return f, starts
}

// protocol applies decide.Protocol's commands to the simulation as the
// scheduler's would land: a requeue puts the task back in the queue; a
// preemption request (drain, unhealthy GPU) lets the task yield after its
// grace, as the policy's preemptions do.
func (f *fwd) protocol(cmds []decide.Command) {
	for _, c := range cmds {
		switch e := c.Event.(type) {
		case events.Requeued:
			t := f.sim.Tasks[e.TaskID]
			f.apply(events.Requeued{TaskID: e.TaskID, Epoch: f.sim.Epoch, Code: e.Code})
			delete(f.total, t) // its next run is predicted afresh
			f.fresh[t] = true
		case events.PreemptRequested:
			t := f.sim.Tasks[e.TaskID]
			f.apply(events.PreemptRequested{TaskID: e.TaskID, Policy: e.Policy, Code: e.Code, Epoch: f.sim.Epoch})
			f.yield(t)
		}
	}
}

// yield lets t, asked to stop, hold its GPUs for its grace and then yield
// (the batch of ends requeues it), or yield now when it has none; it says
// whether it yielded now (the pass must then be planned again).
func (f *fwd) yield(t *domain.Task) bool {
	if t.GraceS > 0 {
		f.ends.push(end{at: f.vnow.Add(time.Duration(t.GraceS * float64(time.Second))), t: t, dispatch: t.DispatchSeq})
		return false
	}
	f.apply(events.Preempted{TaskID: t.ID, Node: t.Node})
	f.apply(events.Requeued{TaskID: t.ID, Epoch: f.sim.Epoch})
	f.unhold(t)
	delete(f.total, t)
	f.fresh[t] = true
	return true
}

// run plays the simulation from its first pass's decisions on.
func (f *fwd) run() map[string]time.Time {
	sim, pol, now, arrivals, window := f.sim, f.pol, f.now, f.arrivals, f.window
	starts, waiting, predict, res := f.starts, f.waiting, f.predict, f.res
	planned := !f.replan // res holds the first pass's decisions
	ai := 0
	for step := 0; step < f.maxSteps; step++ {
		// 3. Let the policy decide at vnow.
		if !planned {
			res = pol.Plan(policy.Input{State: sim, Now: f.vnow, Predict: predict, Ends: f.order})
		}
		planned = false
		replan := false
		for _, d := range res.Decisions {
			t := sim.Tasks[d.TaskID]
			switch d.Kind {
			case policy.Dispatch:
				f.apply(events.Dispatched{TaskID: t.ID, Placements: d.Placements, Epoch: sim.Epoch})
				f.apply(events.Started{TaskID: t.ID, Node: t.Node})
				if waiting[t.ID] {
					starts[t.ID] = f.vnow
					delete(waiting, t.ID)
					if len(waiting) == 0 {
						return starts
					}
				}
				delete(f.total, t)
				f.fresh[t] = true
				run := predict(t)
				f.ends.push(end{at: f.vnow.Add(run), t: t, dispatch: t.DispatchSeq, run: run})
				if f.order != nil {
					f.order.Started(t, predict)
				}
			case policy.Preempt:
				f.apply(events.PreemptRequested{TaskID: t.ID, For: d.For, Epoch: sim.Epoch})
				if f.yield(t) {
					replan = true
				}
			}
		}
		if replan {
			continue
		}
		// 4. Advance to the next end or arrival, and with a window, take
		//    every event up to window × (time ahead) after it too.
		first, ok := f.nextAt(arrivals, ai)
		floor := f.vnow.Add(MinStep)
		if at, wake := wakeAt(res, f.vnow); wake && (!ok || at.Before(first)) {
			f.vnow = later(at, floor) // a patient reclaimer preempts now: plan again
			continue
		}
		if !ok {
			return starts // nothing will free GPUs: the rest never start
		}
		until := first
		if window > 0 {
			until = first.Add(time.Duration(window * float64(first.Sub(now))))
		}
		// Every end or arrival up to MinStep ahead is taken in this pass,
		// one in the past (a stale or overflowed prediction) included: the
		// batch is never empty and time never stands still.
		until = later(until, floor)
		last := first
		var batch []end
		var newArrivals []Arrival
		for {
			at, ok := f.nextAt(arrivals, ai)
			if !ok || at.After(until) {
				break
			}
			last = at
			if ai < len(arrivals) && !arrivals[ai].At.After(at) {
				newArrivals = append(newArrivals, arrivals[ai])
				ai++
				continue
			}
			e := f.ends.pop()
			if e.run > 0 {
				// Started in the simulation: the pass comes at most
				// window × its run after its end (see forward).
				if u := e.at.Add(time.Duration(2 * window * float64(e.run))); u.Before(until) {
					until = u
				}
			}
			batch = append(batch, e)
		}
		f.vnow = later(first.Add(last.Sub(first)/2), floor)
		for _, e := range batch {
			t := e.t
			if t.State == domain.Preempting {
				f.apply(events.Preempted{TaskID: t.ID, Node: t.Node})
				f.apply(events.Requeued{TaskID: t.ID, Epoch: sim.Epoch})
				f.unhold(t)
				delete(f.total, t) // its next run is predicted afresh
				f.fresh[t] = true
			} else {
				f.apply(events.Completed{TaskID: t.ID, Node: t.Node})
				f.unhold(t)
			}
		}
		for _, a := range newArrivals {
			f.narr++
			f.apply(events.Submitted{TaskID: "~arrival-" + itoa(f.narr), Name: "predicted arrival", Team: a.Team,
				Priority: a.Priority.String(), GPUs: a.GPUs, Hours: a.Hours, Preemptible: true, SubmittedAt: f.vnow})
		}
	}
	f.capped = true
	return starts
}

// unhold takes t, which no longer holds GPUs, out of the order of ends.
func (f *fwd) unhold(t *domain.Task) {
	if f.order != nil {
		f.order.Remove(t)
	}
}

func (f *fwd) apply(e events.Event) {
	f.sim.Apply(events.Record{Seq: f.sim.Seq + 1, Envelope: events.Envelope{Type: e.EventType(), Time: f.vnow}, Event: e})
}

type end struct {
	at time.Time
	// t is the task in the simulation's state (sim.Tasks keeps every
	// task, its pointer unchanged, once it is there): read directly, not
	// looked up by ID at every peek and pop.
	t        *domain.Task
	dispatch uint64
	// run is the predicted run of a task started in the simulation (0:
	// holding GPUs when it began, or yielding).
	run time.Duration
}

// endHeap is a min-heap of ends by time, then task ID: container/heap's
// algorithm (the same order of pops, ties included), without boxing each
// end in an interface on every push and pop.
type endHeap []end

func (h endHeap) Len() int { return len(h) }
func (h endHeap) less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].t.ID < h[j].t.ID
}

// push is heap.Push.
func (h *endHeap) push(e end) {
	*h = append(*h, e)
	h.up(len(*h) - 1)
}

// pop is heap.Pop.
func (h *endHeap) pop() end {
	old := *h
	n := len(old) - 1
	old[0], old[n] = old[n], old[0]
	old.down(0, n)
	e := old[n]
	*h = old[:n]
	return e
}

func (h endHeap) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !h.less(j, i) {
			break
		}
		h[i], h[j] = h[j], h[i]
		j = i
	}
}

func (h endHeap) down(i0, n int) {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2 // = 2*i + 2  // right child
		}
		if !h.less(j, i) {
			break
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}
