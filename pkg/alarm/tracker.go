package alarm

import (
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// DefaultStallGrace: a task the policy would start that is still not
// started this long after it became startable means the scheduler is
// not doing its work (the ordinary delay between a change and the
// leader's decision is well under a second).
const DefaultStallGrace = 2 * time.Minute

// Tracker adds up each queued task's wait by cause, between observations
// of the queue (Observe: a pass of the policy with reasons, at a time),
// as `gpuq explain` does between records: the cause seen at one
// observation holds until the next. The cluster's own state is
// observed too: a broken cause that holds for the cluster (no scheduler
// deciding; nodes lost or drained; unhealthy GPUs) is charged to every
// task waiting meanwhile, and after it ends to the tasks that waited
// through it while they are still queued (its backlog), for at most as
// long again. A task submitted after the spell is not charged for it: its
// estimate at submission already saw the backlog, so a late start is no
// sign of the spell (charging it raised false alarms on the mix scenario:
// 109 of 147 under nodes-down@240h+6h:8).
//
// A task is tracked from the first observation that sees it queued; time
// before (an advisor restarted) is neither broken nor unexplained.
type Tracker struct {
	// StallGrace: how long a startable task may stay unstarted before the
	// cluster counts as stalled (0: DefaultStallGrace).
	StallGrace time.Duration

	tasks map[string]*tracked
	last  time.Time // the last observation
	// The cluster: the broken cause holding since the last observation,
	// since when; when something first became startable; the last
	// scheduling decision seen (Saw).
	cond         Cause
	condSince    time.Time
	startable    time.Time
	lastDecision time.Time
	// The backlog of the last broken spell: its cause, until when it is
	// charged at most, and the tasks that waited through it.
	backlog      Cause
	backlogUntil time.Time
	backlogTasks map[string]bool
}

type tracked struct {
	cause, reason string // at the last observation
	since         time.Time
	broken        map[Cause]float64
	legit         map[string]float64
	other         float64
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker { return &Tracker{tasks: map[string]*tracked{}} }

func (k *Tracker) grace() time.Duration {
	if k.StallGrace > 0 {
		return k.StallGrace
	}
	return DefaultStallGrace
}

// Saw notes a record of the log: a scheduling decision (a dispatch, a
// preemption request, a requeue, a node declared lost) shows that a
// scheduler is deciding.
func (k *Tracker) Saw(r events.Record) {
	switch r.Event.(type) {
	case events.Dispatched, events.PreemptRequested, events.Requeued, events.Lost:
		if at := r.At(); at.After(k.lastDecision) {
			k.lastDecision = at
		}
	}
}

// Observe charges the time since the last observation to each task
// tracked then (by the cause seen then), and takes the causes now: res
// is a pass of the policy with reasons (policy.Options.Explain) on st at
// now.
func (k *Tracker) Observe(st *domain.State, res policy.Result, now time.Time) {
	if k.tasks == nil {
		k.tasks = map[string]*tracked{}
	}
	// 1. Charge [last, now) as seen at last.
	if !k.last.IsZero() && now.After(k.last) {
		// The backlog is charged up to its end only.
		dt, inBacklog := now.Sub(k.last).Seconds(), 0.0
		if k.backlog != "" {
			inBacklog = min(dt, max(k.backlogUntil.Sub(k.last).Seconds(), 0))
		}
		for id, t := range k.tasks {
			if inBacklog > 0 && k.cond == "" && k.backlogTasks[id] {
				k.add(t, k.backlog, inBacklog)
				k.charge(t, dt-inBacklog, id)
				continue
			}
			k.charge(t, dt, id)
		}
	}
	if now.After(k.last) {
		k.last = now
	}
	// 2. Forget what left the queue; take each queued task's cause now.
	for id := range k.tasks {
		if t := st.Tasks[id]; t == nil || t.State != domain.Queued {
			delete(k.tasks, id)
		}
	}
	anyStartable := false
	st.WalkQueued(func(t *domain.Task) bool {
		tr := k.tasks[t.ID]
		if tr == nil {
			tr = &tracked{since: now}
			k.tasks[t.ID] = tr
		}
		tr.cause, tr.reason, _ = CauseOf(st, res, t)
		if tr.cause == CauseNoScheduler {
			anyStartable = true
		}
		return true
	})
	// 3. The cluster's broken cause now.
	prev := k.cond
	k.cond = ""
	switch {
	case !anyStartable:
		k.startable = time.Time{}
	case k.startable.IsZero():
		k.startable = now
	case now.Sub(k.startable) >= k.grace():
		k.cond = IdleCapacity
		if k.lastDecision.Before(k.startable) {
			k.cond = SchedulerStalled
		}
	}
	if k.cond == "" {
		k.cond = missing(st)
	}
	// 4. A broken spell that ended leaves its backlog: the tasks that
	//    waited through it, charged for at most as long again.
	if prev != "" && prev != k.cond {
		k.backlog, k.backlogUntil = prev, now.Add(now.Sub(k.condSince))
		k.backlogTasks = map[string]bool{}
		for id := range k.tasks {
			k.backlogTasks[id] = true
		}
	}
	if k.cond != prev {
		k.condSince = now
	}
	if k.backlog != "" {
		for id := range k.backlogTasks {
			if k.tasks[id] == nil {
				delete(k.backlogTasks, id)
			}
		}
		if len(k.backlogTasks) == 0 || !now.Before(k.backlogUntil) {
			k.backlog, k.backlogTasks = "", nil
		}
	}
}

// charge adds dt seconds to t as the last observation saw it: to the
// cluster's broken cause when one held, else to the task's own cause.
func (k *Tracker) charge(t *tracked, dt float64, _ string) {
	if dt <= 0 {
		return
	}
	add := func(c Cause) { k.add(t, c, dt) }
	if k.cond != "" {
		add(k.cond)
		return
	}
	legit := func(r string) {
		if t.legit == nil {
			t.legit = map[string]float64{}
		}
		t.legit[r] += dt
	}
	switch t.cause {
	case CauseCapacity:
		legit(HoldersOverran)
	case CauseAhead:
		if t.reason == policy.ReasonTeamOver {
			legit(GuaranteeReclaim)
		} else {
			legit(HigherClass)
		}
	case CauseReservation:
		legit(Reserved)
	case CauseFragmentation:
		legit(Fragmented)
	case CausePreempted:
		legit(Preempted)
	case CauseNode:
		if t.reason == policy.ReasonNodeDrained {
			add(NodesLost)
		} else {
			add(GPUsUnhealthy)
		}
	case CauseNoScheduler:
		// Startable but not started: the scheduler's ordinary delay is
		// well under a second, so whatever adds up here is the
		// scheduler's failing (stalled when it decided nothing since).
		if k.lastDecision.Before(k.startable) {
			add(SchedulerStalled)
		} else {
			add(IdleCapacity)
		}
	default:
		t.other += dt
	}
}

// add charges seconds to a broken cause of t.
func (k *Tracker) add(t *tracked, c Cause, s float64) {
	if t.broken == nil {
		t.broken = map[Cause]float64{}
	}
	t.broken[c] += s
}

// missing is the cluster's broken cause from its nodes: GPUs out of
// scheduling on lost or drained nodes, or unhealthy GPUs on the others.
func missing(st *domain.State) Cause {
	tot := st.Totals()
	if tot.GPUs == tot.Healthy {
		return ""
	}
	for _, n := range st.Nodes {
		if n.State == domain.NodeLost || n.State == domain.NodeDrained {
			return NodesLost
		}
	}
	return GPUsUnhealthy
}

// Breakdown is the task's wait as tracked: waited is its whole wait so
// far, estimate its P50 wait at submission, threshold the wait past which
// it is late. ok is false for a task not tracked.
func (k *Tracker) Breakdown(id string, waited, estimate, threshold time.Duration) (Breakdown, bool) {
	t := k.tasks[id]
	if t == nil {
		return Breakdown{}, false
	}
	b := Breakdown{WaitS: waited.Seconds(), EstimateS: estimate.Seconds(), ThresholdS: threshold.Seconds(),
		Broken: map[Cause]float64{}, Legit: map[string]float64{}, OtherS: t.other}
	for c, s := range t.broken {
		b.Broken[c] = s
	}
	for r, s := range t.legit {
		b.Legit[r] = s
	}
	return b, true
}

// Tracked is how many tasks the tracker follows.
func (k *Tracker) Tracked() int { return len(k.tasks) }
