package estimate

import (
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// Live keeps every queued task's advice current as the log goes on, for
// the advisor: fed each record after the state applied it (Saw), it knows
// which advice the record can change, and Advise recomputes only those.
//
// What an event can change:
//
//   - A checklist update changes one task's next action and nothing the
//     forward simulation or the policy reads: that task's advice alone is
//     recomputed, from the estimate and the policy's reason kept from the
//     last full re-estimate.
//   - A progress report changes nothing the advice reads: nothing is
//     recomputed.
//   - Any other event may change every queued task's start (the forward
//     simulation of the whole queue is one run that gives every start, so
//     a full re-estimate is one simulation, not one per task): the next
//     Advise runs it, unless one ran less than MinInterval ago (a burst
//     of events is coalesced into one re-estimate; the caller advises
//     again once Pending says so).
//
// The fewer-GPUs suggestion needs a what-if simulation per task that has
// waited past FewerGPUsFactor × its hours: those are kept, each
// recomputed at most every WhatIfEvery of log time and within
// WhatIfBudget of work per Advise (the oldest first), so a long queue's
// what-ifs do not make every advice wait for all of them.
type Live struct {
	Est *Estimator
	// MinInterval: full re-estimates at most this often (wall clock); 0:
	// after every event that may change an estimate.
	MinInterval time.Duration
	// Share bounds the full re-estimates' part of the wall clock: after
	// one that took d, the next starts at least d/Share after its start
	// (and MinInterval), so that a queue whose re-estimate takes seconds
	// leaves the advisor time to fold the log and answer requests; the
	// advice then follows an event by at most d/Share plus one
	// re-estimate. 0: MinInterval alone.
	Share float64
	// MaxAge: the advice depends on the time too (waits, alerts,
	// suggestions): a partial update is made only while the log time is
	// within MaxAge of the last full re-estimate's, else Advise
	// re-estimates; 0: only at that very time.
	MaxAge time.Duration
	// WhatIfEvery: a task's fewer-GPUs what-if is reused for this long (log
	// time); 0: recomputed at every advice.
	WhatIfEvery time.Duration
	// WhatIfBudget: wall time per Advise for what-ifs not yet computed or
	// older than WhatIfEvery; beyond it the suggestion waits for a later
	// Advise (stale ones are kept meanwhile); 0: no limit.
	WhatIfBudget time.Duration

	stale    bool                   // a full re-estimate is due
	dirty    map[string]bool        // tasks whose advice alone is due
	ests     map[string]Estimate    // from the last full re-estimate
	why      map[string]policy.Wait // the policy's reasons, same
	pos      map[string]int         // queue positions, same
	adv      []Advice               // every queued task's, in queue order
	idx      map[string]int         // task → its index in adv
	lastFull time.Time              // wall clock
	lastDur  time.Duration          // wall time the last full re-estimate took
	at       time.Time              // log time of the last full re-estimate
	full     int
	partial  int
	// what-ifs: kept by task, and this Advise's budget.
	wi       map[string]whatIf
	deadline time.Time
	// Now is the wall clock (time.Now when nil), for MinInterval and
	// WhatIfBudget.
	Now func() time.Time
}

type whatIf struct {
	gpus int
	at   time.Time // log time it was computed at
	est  Estimate
}

// DefaultLiveInterval, DefaultWhatIfEvery and DefaultWhatIfBudget are the
// advisor's: at most 5 full re-estimates a second, a what-if at most every
// 10 minutes, 20 ms of what-ifs per advice.
// DefaultLiveShare: full re-estimates take at most half the advisor's
// wall clock.
const (
	DefaultLiveShare    = 0.5
	DefaultLiveInterval = 200 * time.Millisecond
	DefaultMaxAge       = time.Second
	DefaultWhatIfEvery  = 10 * time.Minute
	DefaultWhatIfBudget = 20 * time.Millisecond
)

// NewLive returns a Live for e with the advisor's defaults; its first
// Advise is a full re-estimate.
func NewLive(e *Estimator) *Live {
	return &Live{Est: e, MinInterval: DefaultLiveInterval, Share: DefaultLiveShare, MaxAge: DefaultMaxAge, WhatIfEvery: DefaultWhatIfEvery, WhatIfBudget: DefaultWhatIfBudget,
		stale: true, dirty: map[string]bool{}, wi: map[string]whatIf{}}
}

func (l *Live) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// Saw notes what the record r, which st has just applied, can change.
func (l *Live) Saw(st *domain.State, r events.Record) {
	switch ev := r.Event.(type) {
	case events.ChecklistUpdated:
		l.dirty[ev.TaskID] = true
	case *events.ChecklistUpdated:
		l.dirty[ev.TaskID] = true
	default:
		// A progress report too: it moves its task's predicted end
		// (Predictor.Remaining), and so every queued task's advice.
		l.stale = true
	}
}

// Pending is whether an event seen since the last full re-estimate still
// waits for one (MinInterval had not passed): the caller advises again
// at Due.
func (l *Live) Pending() bool { return l.stale || len(l.dirty) > 0 }

// Due is when the pending re-estimate may run: MinInterval after the
// last one started, and with a Share, the last one's duration ÷ Share.
func (l *Live) Due() time.Time {
	gap := l.MinInterval
	if l.Share > 0 {
		gap = max(gap, time.Duration(float64(l.lastDur)/l.Share))
	}
	return l.lastFull.Add(gap)
}

// Counts are the full re-estimates and the partial advices (one task's
// advice recomputed alone) so far.
func (l *Live) Counts() (full, partial int) { return l.full, l.partial }

// Advise is every queued task's advice, in queue order, as current as
// MinInterval allows (see Live). The slice is Live's own: read it before
// the next call.
func (l *Live) Advise(st *domain.State, now time.Time) []Advice {
	e := l.Est
	wall := l.now()
	if l.WhatIfBudget > 0 {
		l.deadline = wall.Add(l.WhatIfBudget)
	} else {
		l.deadline = time.Time{}
	}
	e.live = l
	defer func() { e.live = nil }()
	if l.ests != nil && (now.Before(l.at) || now.Sub(l.at) > l.MaxAge) {
		l.stale = true // time moved on: every wait and alert with it
	}
	if l.stale && (l.ests == nil || !wall.Before(l.Due())) {
		l.stale, l.lastFull, l.at = false, wall, now
		defer func() { l.lastDur = l.now().Sub(wall) }()
		l.full++
		l.ests = e.EstimateAll(st, now)
		res := e.Pol.With(true).Plan(policy.Input{State: st, Now: now, Predict: e.Pred.ForPolicy(now)})
		e.Watch(st, res, now) // the alarm's breakdown of every wait
		l.why = res.Waiting
		q := st.Queued()
		clear(l.dirty)
		l.adv = l.adv[:0]
		l.idx = make(map[string]int, len(q))
		for i, t := range q {
			l.idx[t.ID] = i
			l.adv = append(l.adv, e.advise(st, t, i+1, l.ests[t.ID], l.why[t.ID], now))
		}
		for id := range l.wi {
			if _, ok := l.idx[id]; !ok {
				delete(l.wi, id)
			}
		}
		return l.adv
	}
	ids := make([]string, 0, len(l.dirty))
	for id := range l.dirty {
		ids = append(ids, id)
	}
	clear(l.dirty)
	for _, id := range ids {
		i, ok := l.idx[id]
		t := st.Tasks[id]
		if !ok || t == nil || t.State != domain.Queued {
			continue // its leaving the queue made the state stale
		}
		l.partial++
		l.adv[i] = e.advise(st, t, i+1, l.ests[id], l.why[id], now)
	}
	return l.adv
}

// fewerGPUs is the what-if of the fewer-GPUs suggestion: WhatIf, or with
// a Live advising, its kept one (see Live); ok is false when none is
// computed yet and the budget is spent (no suggestion this time).
func (e *Estimator) fewerGPUs(st *domain.State, id string, gpus int, now time.Time) (Estimate, bool) {
	l := e.live
	if l == nil {
		return e.WhatIf(st, id, gpus, 0, now), true
	}
	w, ok := l.wi[id]
	fresh := ok && w.gpus == gpus && l.WhatIfEvery > 0 && now.Sub(w.at) < l.WhatIfEvery && !now.Before(w.at)
	if fresh {
		return w.est, true
	}
	if !l.deadline.IsZero() && !l.now().Before(l.deadline) {
		l.dirty[id] = true // over budget: computed by a later advice
		if ok && w.gpus == gpus {
			return w.est, true // the kept one meanwhile
		}
		return Estimate{}, false
	}
	est := e.WhatIf(st, id, gpus, 0, now)
	l.wi[id] = whatIf{gpus: gpus, at: now, est: est}
	return est, true
}
