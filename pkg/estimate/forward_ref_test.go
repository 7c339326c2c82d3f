package estimate

// The forward simulation as it was before its ends were kept by task
// pointer in a heap of its own (forward.go): the reference that
// TestPropForwardSameAsReference compares EstimateAll's simulation with.

import (
	"container/heap"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

type refFwd struct {
	sim   *domain.State
	pred  *Predictor
	q     float64
	vnow  time.Time
	total map[*domain.Task]time.Duration // predicted length of each task's current run
	ends  refEndHeap
	narr  int                   // arrivals submitted
	fresh map[*domain.Task]bool // dispatched or requeued in the simulation
	// order is the started holders by predicted end, as the policy's
	// passes on sim read them (policy.Input.Ends); nil when a holder
	// started after now (a clock ahead), and the passes predict every
	// holder.
	order *policy.EndOrder

	// What the simulation needs after its first pass (refStartForward), so
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
	// capped: the simulation stopped at its horizon of maxSteps passes,
	// at vnow, with tasks still waiting (each starts later than vnow, if
	// ever).
	capped bool
}

// nextAt is the time of the next live end or arrival (stale ends, of tasks
// preempted or requeued since, are dropped); ok is false when none is left.
func (f *refFwd) nextAt(arrivals []Arrival, ai int) (time.Time, bool) {
	for f.ends.Len() > 0 {
		e := f.ends[0]
		t := f.sim.Tasks[e.id]
		if t != nil && t.HoldsGPUs() && t.DispatchSeq == e.dispatch {
			break
		}
		heap.Pop(&f.ends)
	}
	switch {
	case ai < len(arrivals) && (f.ends.Len() == 0 || !arrivals[ai].At.After(f.ends[0].at)):
		return arrivals[ai].At, true
	case f.ends.Len() > 0:
		return f.ends[0].at, true
	}
	return time.Time{}, false
}

// forward simulates on a copy of st; st itself is only read. f is the
// simulation when it went past its first pass (nil otherwise): f.capped
// tells whether it stopped at its horizon.
func refForward(st *domain.State, pol *policy.Policy, pred *Predictor, now time.Time, target string, q float64, arrivals []Arrival, maxSteps int, window float64) (map[string]time.Time, *refFwd) {
	f, starts := refStartForward(st, pol, pred, now, target, q, arrivals, maxSteps, window)
	if f == nil {
		return starts, nil
	}
	return f.run(), f
}

// refStartForward is what a forward simulation must do while st is as
// given: find the tasks to wait for, plan the first pass on st itself
// and, unless that settles it (f nil: starts is the answer), copy the
// live state and queue the running tasks' ends. What is left, f.run,
// reads only the copy, pred and pol, so it may run on another goroutine
// while st changes — provided pred does not (see Predictor.Snapshot).
func refStartForward(st *domain.State, pol *policy.Policy, pred *Predictor, now time.Time, target string, q float64, arrivals []Arrival, maxSteps int, window float64) (*refFwd, map[string]time.Time) {
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
	f := &refFwd{pred: pred, q: q, vnow: now, total: map[*domain.Task]time.Duration{}, fresh: map[*domain.Task]bool{},
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
	// 1. The first pass runs on st itself (a pass modifies nothing): when
	//    it starts the target, no copy of the state is needed.
	f.res = pol.Plan(policy.Input{State: st, Now: now, Predict: f.predict})
	if target != "" {
		for _, d := range f.res.Decisions {
			if d.Kind == policy.Dispatch && d.TaskID == target {
				starts[target] = now
				return nil, starts
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
		heap.Push(&f.ends, refEnd{at: now.Add(rem), id: t.ID, dispatch: t.DispatchSeq})
	}
	return f, starts
}

// run plays the simulation from its first pass's decisions on.
func (f *refFwd) run() map[string]time.Time {
	sim, pol, now, arrivals, window := f.sim, f.pol, f.now, f.arrivals, f.window
	starts, waiting, predict, res := f.starts, f.waiting, f.predict, f.res
	planned := true // res holds the first pass's decisions
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
				heap.Push(&f.ends, refEnd{at: f.vnow.Add(run), id: t.ID, dispatch: t.DispatchSeq, run: run})
				if f.order != nil {
					f.order.Started(t, predict)
				}
			case policy.Preempt:
				f.apply(events.PreemptRequested{TaskID: t.ID, For: d.For, Epoch: sim.Epoch})
				if t.GraceS > 0 {
					// It holds its GPUs for its grace, then yields (the
					// batch below requeues it).
					heap.Push(&f.ends, refEnd{at: f.vnow.Add(time.Duration(t.GraceS * float64(time.Second))), id: t.ID, dispatch: t.DispatchSeq})
					continue
				}
				f.apply(events.Preempted{TaskID: t.ID, Node: t.Node})
				f.apply(events.Requeued{TaskID: t.ID, Epoch: sim.Epoch})
				f.unhold(t)
				delete(f.total, t)
				f.fresh[t] = true
				replan = true
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
		var batch []refEnd
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
			e := heap.Pop(&f.ends).(refEnd)
			if e.run > 0 {
				// Started in the simulation: the pass comes at most
				// window × its run after its end (see ForwardWindow).
				if u := e.at.Add(time.Duration(2 * window * float64(e.run))); u.Before(until) {
					until = u
				}
			}
			batch = append(batch, e)
		}
		f.vnow = later(first.Add(last.Sub(first)/2), floor)
		for _, e := range batch {
			t := sim.Tasks[e.id]
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
func (f *refFwd) unhold(t *domain.Task) {
	if f.order != nil {
		f.order.Remove(t)
	}
}

func (f *refFwd) apply(e events.Event) {
	f.sim.Apply(events.Record{Seq: f.sim.Seq + 1, Envelope: events.Envelope{Type: e.EventType(), Time: f.vnow}, Event: e})
}

type refEnd struct {
	at       time.Time
	id       string
	dispatch uint64
	// run is the predicted run of a task started in the simulation (0:
	// holding GPUs when it began, or yielding).
	run time.Duration
}

type refEndHeap []refEnd

func (h refEndHeap) Len() int { return len(h) }
func (h refEndHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].id < h[j].id
}
func (h refEndHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *refEndHeap) Push(x any)   { *h = append(*h, x.(refEnd)) }
func (h *refEndHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
