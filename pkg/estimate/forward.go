package estimate

import (
	"container/heap"
	"time"

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

// Forward runs the real policy forward from st at now, with run times at
// the q-quantile of pred, applying its decisions as the scheduler and the
// agents would (dispatch → start; preempt → checkpoint at once, requeue;
// a task ends at its predicted end), until target starts. It returns the
// predicted start; ok is false when target never starts (it cannot fit,
// or the horizon of maxSteps is reached). st is not modified: the
// simulation runs on st.CloneLive().
func Forward(st *domain.State, pol *policy.Policy, pred *Predictor, now time.Time, target string, q float64, arrivals []Arrival) (time.Time, bool) {
	starts := forward(st.CloneLive(), pol, pred, now, target, q, arrivals, 100000)
	at, ok := starts[target]
	return at, ok
}

// ForwardAll is Forward for every queued task at once — one simulation
// until all of them started — which is what re-estimating the whole queue
// after an event costs. Tasks missing from the result never start.
func ForwardAll(st *domain.State, pol *policy.Policy, pred *Predictor, now time.Time, q float64, arrivals []Arrival) map[string]time.Time {
	return forward(st.CloneLive(), pol, pred, now, "", q, arrivals, 1000000)
}

type fwd struct {
	sim   *domain.State
	pred  *Predictor
	q     float64
	vnow  time.Time
	total map[string]time.Duration // predicted length of each task's current run
	ends  endHeap
}

func forward(sim *domain.State, pol *policy.Policy, pred *Predictor, now time.Time, target string, q float64, arrivals []Arrival, maxSteps int) map[string]time.Time {
	starts := map[string]time.Time{}
	waiting := map[string]bool{}
	if target != "" {
		tt := sim.Tasks[target]
		if tt == nil {
			return starts
		}
		if tt.State != domain.Queued {
			if !tt.FirstStarted.IsZero() {
				starts[target] = tt.FirstStarted
			}
			return starts
		}
		waiting[target] = true
	} else {
		for _, t := range sim.Queued() {
			waiting[t.ID] = true
		}
	}
	if len(waiting) == 0 {
		return starts
	}
	f := &fwd{sim: sim, pred: pred, q: q, vnow: now, total: map[string]time.Duration{}}
	// 1. The tasks holding GPUs end at their conditional predicted end.
	for _, t := range sim.Active() {
		elapsed := time.Duration(0)
		if !t.StartedAt.IsZero() && now.After(t.StartedAt) {
			elapsed = now.Sub(t.StartedAt)
		}
		rem := pred.Remaining(t, elapsed, q)
		f.total[t.ID] = elapsed + rem
		if t.State == domain.Preempting {
			rem = time.Minute // checkpointing; gone within its grace
		}
		heap.Push(&f.ends, end{at: now.Add(rem), id: t.ID, dispatch: t.DispatchSeq})
	}
	predict := func(t *domain.Task) time.Duration {
		if d, ok := f.total[t.ID]; ok {
			return d
		}
		d := pred.Total(t, q) - time.Duration(t.RunSeconds*float64(time.Second))
		if d < 5*time.Second {
			d = 5 * time.Second
		}
		f.total[t.ID] = d
		return d
	}
	ai := 0
	for step := 0; step < maxSteps; step++ {
		// 2. Let the policy decide at vnow.
		res := pol.Plan(policy.Input{State: sim, Now: f.vnow, Predict: predict})
		replan := false
		for _, d := range res.Decisions {
			t := sim.Tasks[d.TaskID]
			switch d.Kind {
			case policy.Dispatch:
				f.apply(events.Dispatched{TaskID: t.ID, Placements: d.Placements})
				f.apply(events.Started{TaskID: t.ID})
				if waiting[t.ID] {
					starts[t.ID] = f.vnow
					delete(waiting, t.ID)
					if len(waiting) == 0 {
						return starts
					}
				}
				delete(f.total, t.ID)
				heap.Push(&f.ends, end{at: f.vnow.Add(predict(t)), id: t.ID, dispatch: t.DispatchSeq})
			case policy.Preempt:
				f.apply(events.PreemptRequested{TaskID: t.ID, For: d.For})
				f.apply(events.Preempted{TaskID: t.ID})
				f.apply(events.Requeued{TaskID: t.ID})
				delete(f.total, t.ID)
				replan = true
			}
		}
		if replan {
			continue
		}
		// 3. Advance to the next end or arrival.
		for f.ends.Len() > 0 {
			e := f.ends[0]
			t := sim.Tasks[e.id]
			if t != nil && t.HoldsGPUs() && t.DispatchSeq == e.dispatch {
				break
			}
			heap.Pop(&f.ends) // stale: preempted or requeued since
		}
		nextEnd, hasEnd := time.Time{}, f.ends.Len() > 0
		if hasEnd {
			nextEnd = f.ends[0].at
		}
		if ai < len(arrivals) && (!hasEnd || !arrivals[ai].At.After(nextEnd)) {
			a := arrivals[ai]
			ai++
			if a.At.After(f.vnow) {
				f.vnow = a.At
			}
			f.apply(events.Submitted{TaskID: "~arrival-" + itoa(ai), Name: "predicted arrival", Team: a.Team,
				Priority: a.Priority.String(), GPUs: a.GPUs, Hours: a.Hours, Preemptible: true, SubmittedAt: f.vnow})
			continue
		}
		if !hasEnd {
			return starts // nothing will free GPUs: the rest never start
		}
		e := heap.Pop(&f.ends).(end)
		if e.at.After(f.vnow) {
			f.vnow = e.at
		}
		t := sim.Tasks[e.id]
		if t.State == domain.Preempting {
			f.apply(events.Preempted{TaskID: t.ID})
			f.apply(events.Requeued{TaskID: t.ID})
		} else {
			f.apply(events.Completed{TaskID: t.ID})
		}
	}
	return starts
}

func (f *fwd) apply(e events.Event) {
	f.sim.Apply(events.Record{Seq: f.sim.Seq + 1, Envelope: events.Envelope{Type: e.EventType(), Time: f.vnow}, Event: e})
}

type end struct {
	at       time.Time
	id       string
	dispatch uint64
}

type endHeap []end

func (h endHeap) Len() int { return len(h) }
func (h endHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].id < h[j].id
}
func (h endHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)   { *h = append(*h, x.(end)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
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
