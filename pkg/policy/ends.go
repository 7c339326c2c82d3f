package policy

import (
	"slices"
	"sort"
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

// candPool pools the candidates of walks from Input.Ends.
var candPool = sync.Pool{New: func() any { return new(endHeap) }}

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

// EndOrder is the started holders of one state by predicted end (then
// SubmitSeq), as Input.Ends reads them: its keeper sets a task when it
// starts and removes it when it stops holding GPUs.
//
// The changes since a pass last read it are kept aside and merged into
// the sorted list when the next pass reads it (sorted): one copy of the
// list per pass that walks it, instead of one per change — a forward
// simulation of 100,000 queued on 10,000 × 8 GPUs starts and ends some
// 400,000 holders over about 1,000 passes, and moving tens of thousands
// of entries at each was a third of its time (docs/performance.md). A
// pass reading it updates it, so two passes may not read one EndOrder at
// once (a forward simulation keeps its own).
type EndOrder struct {
	list []endAt // sorted, as of the last merge
	at   map[*domain.Task]time.Time
	// changed are the tasks set or removed since the last merge, each
	// with where it was in list then.
	changed map[*domain.Task]was
	spare   []endAt // the merge's buffer
	adds    []endAt
	gone    []int
}

// was is where a changed task was in EndOrder.list: at end, if in.
type was struct {
	end time.Time
	in  bool
}

type endAt struct {
	end time.Time
	t   *domain.Task
}

func endAtBefore(a, b endAt) bool {
	if !a.end.Equal(b.end) {
		return a.end.Before(b.end)
	}
	return a.t.SubmitSeq < b.t.SubmitSeq
}

// NewEndOrder returns an empty order with room for n holders.
func NewEndOrder(n int) *EndOrder {
	return &EndOrder{list: make([]endAt, 0, n), at: make(map[*domain.Task]time.Time, n), changed: map[*domain.Task]was{}}
}

// note records that t changes, with where it is in list, the first time
// since the last merge.
func (o *EndOrder) note(t *domain.Task) {
	if _, ok := o.changed[t]; ok {
		return
	}
	end, in := o.at[t]
	o.changed[t] = was{end, in}
}

// Set puts t at end, moving it if it was elsewhere.
func (o *EndOrder) Set(t *domain.Task, end time.Time) {
	o.note(t)
	o.at[t] = end
}

// Started puts t, a holder that has started, at its predicted end as a
// pass with this Predict takes it: StartedAt + Predict(t), or + the
// user's estimate where Predict gives none (Input.Ends).
func (o *EndOrder) Started(t *domain.Task, predict func(*domain.Task) time.Duration) {
	o.Set(t, t.StartedAt.Add(Input{Predict: predict}.predict(t)))
}

// Remove takes t out of the order (nothing when it is not in it).
func (o *EndOrder) Remove(t *domain.Task) {
	if _, ok := o.at[t]; !ok {
		return
	}
	o.note(t)
	delete(o.at, t)
}

// sorted is the order's list with every change since the last merge in
// it: the entries of the changed tasks leave list, their ends now (for
// those still in the order) are sorted and merged in — the list that
// inserting and deleting one by one would have left (endAtBefore is a
// total order: SubmitSeq is unique).
func (o *EndOrder) sorted() []endAt {
	if len(o.changed) == 0 {
		return o.list
	}
	o.gone, o.adds = o.gone[:0], o.adds[:0]
	for t, w := range o.changed {
		if w.in {
			e := endAt{end: w.end, t: t}
			o.gone = append(o.gone, sort.Search(len(o.list), func(i int) bool { return !endAtBefore(o.list[i], e) }))
		}
		if end, ok := o.at[t]; ok {
			o.adds = append(o.adds, endAt{end: end, t: t})
		}
	}
	clear(o.changed)
	slices.Sort(o.gone)
	slices.SortFunc(o.adds, func(a, b endAt) int {
		if endAtBefore(a, b) {
			return -1
		}
		return 1
	})
	// The list's runs between the gone entries and the adds' places are
	// copied whole: an add goes before the first entry it is before (the
	// gone ones too: the order is total, so the first such entry kept
	// is the same), found by binary search, not by comparing every entry.
	out := o.spare[:0]
	g, i := 0, 0
	keep := func(hi int) { // list[i:hi] less the gone entries
		for g < len(o.gone) && o.gone[g] < hi {
			if o.gone[g] >= i { // (always: one entry per changed task)
				out = append(out, o.list[i:o.gone[g]]...)
				i = o.gone[g] + 1
			}
			g++
		}
		out = append(out, o.list[i:hi]...)
		i = hi
	}
	for _, e := range o.adds {
		at := i + sort.Search(len(o.list)-i, func(k int) bool { return endAtBefore(e, o.list[i+k]) })
		keep(at)
		out = append(out, e)
	}
	keep(len(o.list))
	clear(o.list) // no pointers kept in the spare buffer
	o.list, o.spare = out, o.list[:0]
	return o.list
}

// startSource starts a walk from Input.Ends: the holders not started
// and the tasks placed in this pass are predicted at once (few), the
// started ones as the walk reaches them.
func (w *endWalk) startSource() {
	pc := w.pc
	w.src = true
	w.cand = (*candPool.Get().(*endHeap))[:0]
	for _, t := range pc.s.Unstarted() {
		w.take(t)
	}
	for _, p := range pc.placedNow {
		w.cand = append(w.cand, ending{t: p.t, r: pc.in.predict(p.t), pls: p.ps})
	}
	w.cand.init()
}

// nextSource is next for a walk from Input.Ends: a started holder not yet
// predicted ends no earlier than max(its end - now, 1s), and the order
// yields them by end, so a candidate before the next one's bound is
// before every holder not yet predicted.
func (w *endWalk) nextSource() (time.Duration, []events.Placement, bool) {
	now := w.pc.in.Now
	l := w.pc.in.Ends.sorted()
	for {
		if len(w.cand) > 0 && (w.si == len(l) || w.cand[0].r < max(l[w.si].end.Sub(now), time.Second)) {
			e := w.cand.pop()
			return e.r, e.pls, true
		}
		if w.si == len(l) {
			return 0, nil, false
		}
		w.take(l[w.si].t)
		w.si++
	}
}
