package policy

import (
	"sync"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// The reservation walk from the fold's end index.
//
// Without Input.Predict a holder's predicted end is its user's estimate:
// now + remaining(t) with remaining = max(EstimatedRun - elapsed, 1s).
// The fold keeps the holders by estimated end (domain.State.ByEstimatedEnd,
// DueBySeq, Unstarted), so the walk yields the earliest ends by predicting
// only the holders it needs, rather than every one:
//
//   - a started holder whose estimated end A is after the index's clock
//     has remaining max(A - now, 1s) exactly, when now is at or after the
//     clock (its StartedAt is at or before it) and the times are on the
//     wall clock; the index yields them by A, so max(A - now, 1s) of the
//     next one bounds every holder it has not yielded yet from below;
//   - a holder past its estimated end (due) has remaining at least 1s,
//     like every holder, and the index yields them by SubmitSeq, so (1s,
//     its SubmitSeq) bounds the rest of them from below in the walk's
//     order (r, then SubmitSeq);
//   - holders not started yet and the tasks placed in this pass are
//     predicted at the start: there are few.
//
// An end predicted (exactly, by remaining or predict, as the full walk)
// is yielded once no bound is at or before it. So the walk yields the
// same ends in the same order as the walk of every holder.

// estimatedEnds reports whether the reservation walk may read the fold's
// end index: no prediction but the user's estimate, now on the wall clock
// (a monotonic reading would make remaining's elapsed differ from the
// index's arithmetic) and not before the index's clock.
func (pc *pass) estimatedEnds() bool {
	now := pc.in.Now
	return pc.in.Predict == nil && now == now.Round(0) && !now.Before(pc.s.EndsAsOf())
}

// estBufs are a walk's buffers, pooled across passes.
type estBufs struct {
	cand       endHeap
	ahead, due []int32
}

var estPool = sync.Pool{New: func() any { return new(estBufs) }}

// startEstimated starts a walk from the end index.
func (w *endWalk) startEstimated() {
	pc := w.pc
	b := estPool.Get().(*estBufs)
	w.est = true
	w.cand = b.cand[:0]
	w.ahead = pc.s.ByEstimatedEnd(b.ahead)
	w.due = pc.s.DueBySeq(b.due)
	for _, t := range pc.s.Unstarted() {
		w.take(t)
	}
	for _, p := range pc.placedNow {
		w.cand = append(w.cand, ending{t: p.t, r: pc.in.predict(p.t), pls: p.ps})
	}
	w.cand.init()
}

// take predicts a holder's end into the candidates, unless it is yielding
// (before the pass, or chosen as a victim in it).
func (w *endWalk) take(t *domain.Task) {
	pc := w.pc
	if t.State == domain.Preempting || (pc.victimsNow > 0 && pc.preempting[t.ID]) {
		return
	}
	w.cand.push(ending{t: t, r: pc.in.remaining(t), pls: t.Placements})
}

// nextEstimated is next for a walk from the end index.
func (w *endWalk) nextEstimated() (time.Duration, []events.Placement, bool) {
	now := w.pc.in.Now
	for {
		// The least bound of the holders not yet predicted: from ahead,
		// max(A - now, 1s); from due, (1s, SubmitSeq).
		var lbA time.Duration
		if w.ahead.More() {
			a, _ := w.ahead.Peek()
			lbA = max(a.Sub(now), time.Second)
		}
		var dueSeq uint64
		if w.due.More() {
			_, t := w.due.Peek()
			dueSeq = t.SubmitSeq
		}
		if len(w.cand) > 0 {
			c := w.cand[0]
			aheadOK := !w.ahead.More() || c.r < lbA
			dueOK := !w.due.More() || c.r < time.Second || (c.r == time.Second && c.t.SubmitSeq < dueSeq)
			if aheadOK && dueOK {
				e := w.cand.pop()
				return e.r, e.pls, true
			}
			if !dueOK {
				w.takeDue()
			} else {
				w.takeAhead()
			}
			continue
		}
		switch {
		case w.due.More():
			w.takeDue()
		case w.ahead.More():
			w.takeAhead()
		default:
			return 0, nil, false
		}
	}
}

func (w *endWalk) takeDue() {
	_, t := w.due.Peek()
	w.due.Next()
	w.take(t)
}

func (w *endWalk) takeAhead() {
	_, t := w.ahead.Peek()
	w.ahead.Next()
	w.take(t)
}
