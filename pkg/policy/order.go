package policy

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
)

// Tiers, considered in this order.
const (
	tierCritical = 0 // CRITICAL tasks
	tierUnder    = 1 // tasks of teams under their guarantee
	tierRest     = 2
)

// order yields the queued tasks in the order a pass considers them:
//
//  1. CRITICAL tasks;
//  2. tasks of teams under their guarantee, by class;
//  3. every other task, by class.
//
// Within a class: submit time (FIFO), or under ShortestPredicted the
// predicted service (GPUs × run time, as Helios' QSSF) aged by the wait,
// with tasks that waited MaxWait first. Under FIFO, Options.ClassAging
// gives each class its head start in time instead (agedBefore), and
// Options.StarvationWait puts the tasks that waited that long without a
// start right after CRITICAL, whatever their tier and class (starved).
func (pc *pass) order(yield func(t *domain.Task, tier int) bool) {
	s := pc.in.State
	if pc.opts.WithinClass == ShortestPredicted {
		for _, t := range pc.sortedSPF() {
			if !yield(t, pc.tier(t)) {
				return
			}
		}
		return
	}
	// FIFO: walk the fold's incremental queue index; no sorting.
	stopped := false
	s.WalkQueued(func(t *domain.Task) bool {
		if t.Priority != domain.Critical {
			return false
		}
		stopped = !yield(t, tierCritical)
		return !stopped
	})
	if stopped {
		return
	}
	// The starvation bound: tasks never started that waited
	// StarvationWait go next, across tiers and classes, in submit order.
	if pc.opts.StarvationWait > 0 && pc.opts.WithinClass == FIFO {
		if !pc.walkStarved(func(t *domain.Task) bool { return yield(t, pc.tier(t)) }) {
			return
		}
		inner := yield
		yield = func(t *domain.Task, tier int) bool {
			if pc.starved(t) {
				return true
			}
			return inner(t, tier)
		}
	}
	if pc.opts.ClassAging > 0 {
		if pc.anyUnder && !pc.walkAged(func(t *domain.Task) bool { return pc.under(t.Team) },
			func(t *domain.Task) bool { return yield(t, tierUnder) }) {
			return
		}
		pc.walkAged(func(t *domain.Task) bool { return !pc.anyUnder || !pc.under(t.Team) },
			func(t *domain.Task) bool { return yield(t, tierRest) })
		return
	}
	if pc.anyUnder {
		s.WalkQueued(func(t *domain.Task) bool {
			if t.Priority == domain.Critical || !pc.under(t.Team) {
				return true
			}
			stopped = !yield(t, tierUnder)
			return !stopped
		})
		if stopped {
			return
		}
	}
	s.WalkQueued(func(t *domain.Task) bool {
		if t.Priority == domain.Critical || (pc.anyUnder && pc.under(t.Team)) {
			return true
		}
		return yield(t, tierRest)
	})
}

// walkAged yields the queued tasks below CRITICAL that keep accepts, in
// the order of ClassAging under FIFO within class (agedBefore), until
// yield returns false; it reports whether it walked to the end. The fold
// keeps each class's tasks in queue order, which is agedBefore's within a
// class, so the walk merges three cursors and, like WalkQueued, costs only
// the tasks it visits.
func (pc *pass) walkAged(keep func(*domain.Task) bool, yield func(*domain.Task) bool) bool {
	return pc.mergeClasses(func(t *domain.Task) bool { return !keep(t) }, func(*domain.Task) bool { return false },
		pc.agedBefore, yield)
}

// mergeClasses merges the queues of LOW to HIGH (each in queue order) by
// before, yielding every task but those skip passes over, until yield
// returns false; it reports whether it walked to the end. A class's walk
// ends at its first task that done accepts (and that is not skipped), so
// done must hold for the rest of that class's queue as well.
func (pc *pass) mergeClasses(skip, done func(*domain.Task) bool, before func(a, b *domain.Task) bool, yield func(*domain.Task) bool) bool {
	var cur [domain.High + 1]domain.QueueCursor
	for p := domain.Low; p <= domain.High; p++ {
		cur[p] = pc.s.QueueClass(p)
	}
	for {
		var best *domain.Task
		from := domain.Low
		for p := domain.High; p >= domain.Low; p-- {
			t := cur[p].Peek()
			for t != nil && !done(t) && skip(t) {
				cur[p].Next()
				t = cur[p].Peek()
			}
			if t == nil || done(t) {
				continue
			}
			if best == nil || before(t, best) {
				best, from = t, p
			}
		}
		if best == nil {
			return true
		}
		cur[from].Next()
		if !yield(best) {
			return false
		}
	}
}

// starved reports whether t, below CRITICAL, has waited StarvationWait
// without ever starting (a task requeued after a run is not starved: its
// wait was bounded by its first start).
func (pc *pass) starved(t *domain.Task) bool {
	return pc.opts.StarvationWait > 0 && t.Priority != domain.Critical && t.FirstStarted.IsZero() &&
		!t.SubmittedAt.After(pc.in.Now.Add(-pc.opts.StarvationWait))
}

// walkStarved yields the starved tasks (starved) in submit order, then
// higher class first, then queue order, until yield returns false; it
// reports whether it walked to the end. A class's list is in submit
// order, so each cursor stops at the first task submitted after the
// cutoff: the walk costs the tasks older than StarvationWait.
func (pc *pass) walkStarved(yield func(*domain.Task) bool) bool {
	cutoff := pc.in.Now.Add(-pc.opts.StarvationWait)
	return pc.mergeClasses(
		func(t *domain.Task) bool { return !t.FirstStarted.IsZero() },
		func(t *domain.Task) bool { return t.SubmittedAt.After(cutoff) },
		func(a, b *domain.Task) bool {
			return a.SubmittedAt.Before(b.SubmittedAt) || (a.SubmittedAt.Equal(b.SubmittedAt) && a.Priority > b.Priority)
		}, yield)
}

// agedBefore is the order of the queue below CRITICAL under ClassAging and
// FIFO within class: each class above LOW counts as submitted ClassAging
// earlier per class (agedAt), so a task is behind a lower class's only
// once that one has waited ClassAging per class more; then the higher
// class; then queue order.
func (pc *pass) agedBefore(a, b *domain.Task) bool { return agedBefore(&pc.opts, a, b) }

func agedBefore(o *Options, a, b *domain.Task) bool {
	if ka, kb := agedAt(o, a), agedAt(o, b); !ka.Equal(kb) {
		return ka.Before(kb)
	}
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return domain.InLine(a, b)
}

// agedAt is t's submit time less its class's head start.
func agedAt(o *Options, t *domain.Task) time.Time {
	return t.SubmittedAt.Add(-time.Duration(t.Priority-domain.Low) * o.ClassAging)
}

func (pc *pass) tier(t *domain.Task) int {
	switch {
	case t.Priority == domain.Critical:
		return tierCritical
	case pc.anyUnder && pc.under(t.Team):
		return tierUnder
	}
	return tierRest
}

// sortedSPF sorts the whole queue for ShortestPredicted (the key depends on
// the wait, so it cannot be kept incrementally).
func (pc *pass) sortedSPF() []*domain.Task {
	q := pc.in.State.Queued()
	now := pc.in.Now
	type keyed struct {
		t    *domain.Task
		tier int
		aged bool
		key  float64
	}
	ks := make([]keyed, len(q))
	for i, t := range q {
		wait := now.Sub(t.SubmittedAt)
		if wait < 0 {
			wait = 0
		}
		ks[i] = keyed{t: t, tier: pc.tier(t), aged: wait >= pc.opts.MaxWait,
			key: pc.in.predict(t).Seconds() * float64(max(t.GPUs, 1)) / (1 + float64(wait)/float64(pc.opts.AgingTau))}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		switch {
		case a.tier != b.tier:
			return a.tier - b.tier
		case a.t.Priority != b.t.Priority:
			return int(b.t.Priority) - int(a.t.Priority)
		case a.aged != b.aged:
			if a.aged {
				return -1
			}
			return 1
		case !a.aged && a.key != b.key:
			return cmp.Compare(a.key, b.key)
		case a.t.Before(b.t): // q is in queue order; stable
			return -1
		case b.t.Before(a.t):
			return 1
		}
		return 0
	})
	out := make([]*domain.Task, len(ks))
	for i, k := range ks {
		out[i] = k.t
	}
	return out
}
