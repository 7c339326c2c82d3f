package audit

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// Kinds of violation.
const (
	// GPUHeldTwice: a GPU held by two tasks at once in the fold, or a
	// dispatched record naming a GPU another task held (the fold refused
	// it, but its writer broke the rule).
	GPUHeldTwice = "gpu-held-twice"
	// DispatchWithoutCapacity: a dispatched record with GPUs the task
	// could not have: unknown, unhealthy, on a node not schedulable, of
	// another model or too little memory, named twice, or another count
	// than the task asked for.
	DispatchWithoutCapacity = "dispatch-without-capacity"
	// PreemptedProtected: a CRITICAL or non-preemptible task was asked to
	// yield.
	PreemptedProtected = "preempted-protected"
	// PreemptionNotAllowed: a preemption the policy it names does not
	// allow (critical-only: only for a CRITICAL task; ladder: only for a
	// higher class), and no team reclaiming its guarantee.
	PreemptionNotAllowed = "preemption-not-allowed"
	// PreemptedNotRequeued: a task whose process stopped for a
	// preemption was neither requeued, resumed nor cancelled within
	// Options.RequeueGrace of log time.
	PreemptedNotRequeued = "preempted-not-requeued"
	// GuaranteeUnserved: a team with waiting work below its guarantee,
	// while preemptible tasks of teams over theirs held GPUs it could have
	// taken back, for longer than Options.GuaranteeGrace.
	GuaranteeUnserved = "guarantee-unserved"
)

// Violation is one broken rule, at the sequence where it happened (for a
// span: where it began).
type Violation struct {
	Seq    uint64 `json:"seq"`
	Kind   string `json:"kind"`
	TaskID string `json:"task_id,omitempty"`
	Detail string `json:"detail"`
}

// Skip is a record the fold skipped or ignored, with why.
type Skip struct {
	Seq     uint64 `json:"seq"`
	Subject string `json:"subject"`
	Reason  string `json:"reason"`
}

// Report is `gpuq audit verify --json`.
type Report struct {
	OK         bool        `json:"ok"`
	Events     int         `json:"events"`
	LastSeq    uint64      `json:"last_seq"`
	Violations []Violation `json:"violations"`
	Skipped    []Skip      `json:"skipped"`
	Digest     string      `json:"digest"`
	// DenyDelete and DenyPurge come from the stream's configuration
	// (nil for an archive); OK requires both where they are known.
	DenyDelete *bool `json:"deny_delete"`
	DenyPurge  *bool `json:"deny_purge"`
	// Live is the check of the live scheduler's digest (LiveMatch,
	// LiveMismatch, LiveNone, LiveArchive, or why it could not be read);
	// where one was read, its digest, sequence and instance, and the
	// replay's digest after the same sequence.
	Live                  string `json:"live"`
	LiveDigest            string `json:"live_digest,omitempty"`
	LiveDigestSeq         uint64 `json:"live_digest_seq,omitempty"`
	LiveInstance          string `json:"live_instance,omitempty"`
	ReplayDigestAtLiveSeq string `json:"replay_digest_at_live_seq,omitempty"`
}

// Options of Verify.
type Options struct {
	// Teams are the guarantees the cluster ran with; without them the
	// guarantee rule is not checked and a reclaiming preemption is taken
	// as it reports itself.
	Teams policy.Teams
	// Policy is the policy the cluster ran with (its class ageing and
	// within-class order decide which class preemptions the ladder
	// allows; each preemption's own record names its policy).
	Policy policy.Options
	// RequeueGrace (default 1 min) and GuaranteeGrace (default 5 min):
	// how long of log time a preempted task may wait for its requeue, and
	// a team for its guarantee, before it is a violation.
	RequeueGrace, GuaranteeGrace time.Duration
	// Live, when set, is the live scheduler's digest (read before the
	// log): Verify compares it with the replay's after its sequence.
	Live *LiveDigest
}

// Verify folds every record and checks the invariants at each. The report
// is OK when nothing was violated; the caller sets DenyDelete and
// DenyPurge from the stream and recomputes OK (Report.Finish).
func Verify(recs []events.Record, o Options) Report {
	if o.RequeueGrace <= 0 {
		o.RequeueGrace = time.Minute
	}
	if o.GuaranteeGrace <= 0 {
		o.GuaranteeGrace = 5 * time.Minute
	}
	v := &verifier{f: newFolder(), o: o, held: map[string]string{}, holds: map[string][]string{}, late: map[uint64]bool{}, preempted: map[string]mark{}, under: map[string]mark{}}
	rep := Report{Violations: []Violation{}, Skipped: []Skip{}}
	var atLive string // the replay's digest after o.Live.Seq
	if o.Live != nil && o.Live.Seq == 0 {
		atLive = Digest(v.f.st)
	}
	for _, r := range recs {
		rep.Events++
		rep.LastSeq = r.Seq
		v.before(r)
		code, why := v.f.applyCoded(r)
		if why != "" {
			rep.Skipped = append(rep.Skipped, Skip{Seq: r.Seq, Subject: r.Subject, Reason: why})
		}
		v.after(r, code, why)
		if o.Live != nil && r.Seq == o.Live.Seq {
			atLive = Digest(v.f.st)
		}
	}
	v.end()
	sort.SliceStable(v.out, func(i, j int) bool { return v.out[i].Seq < v.out[j].Seq })
	rep.Violations = append(rep.Violations, v.out...)
	rep.Digest = Digest(v.f.st)
	if o.Live != nil {
		rep.checkLive(o.Live, atLive)
	}
	rep.Finish()
	return rep
}

// Finish sets OK: no violation, and the stream denies delete and purge
// where that is known.
func (r *Report) Finish() {
	r.OK = len(r.Violations) == 0 && (r.DenyDelete == nil || *r.DenyDelete) && (r.DenyPurge == nil || *r.DenyPurge)
}

type mark struct {
	seq uint64
	at  time.Time
	why string
}

type verifier struct {
	f         *folder
	o         Options
	held      map[string]string   // GPU → task, from the tasks' placements
	holds     map[string][]string // task → the GPUs it holds in held
	late      map[uint64]bool     // preempted records reported as not requeued
	preempted map[string]mark     // task → its preempted record, until requeued, resumed or cancelled
	under     map[string]mark     // team → since when its guarantee is unserved
	out       []Violation
	pending   []Violation // judged before the record, reported if it was applied
}

func (v *verifier) flag(seq uint64, kind, task, detail string) {
	v.out = append(v.out, Violation{Seq: seq, Kind: kind, TaskID: task, Detail: detail})
}

// before judges a decision on the state it was taken on.
func (v *verifier) before(r events.Record) {
	st := v.f.st
	v.pending = v.pending[:0]
	switch e := r.Event.(type) {
	case events.Dispatched:
		t := st.Tasks[e.TaskID]
		if t == nil || t.State != domain.Queued {
			return
		}
		n, seen := 0, map[string]bool{}
		for _, p := range e.Placements {
			node := st.Nodes[p.Node]
			for _, g := range p.GPUs {
				n++
				if o := st.Owner[g]; o != "" && o != t.ID {
					v.pending = append(v.pending, Violation{r.Seq, GPUHeldTwice, t.ID, fmt.Sprintf("dispatched onto %s, held by %s", g, o)})
					continue
				}
				switch {
				case seen[g]:
					v.pending = append(v.pending, Violation{r.Seq, DispatchWithoutCapacity, t.ID, fmt.Sprintf("GPU %s named twice", g)})
				case node == nil:
					v.pending = append(v.pending, Violation{r.Seq, DispatchWithoutCapacity, t.ID, fmt.Sprintf("node %s is not known", p.Node)})
				case !node.Schedulable():
					v.pending = append(v.pending, Violation{r.Seq, DispatchWithoutCapacity, t.ID, fmt.Sprintf("node %s is %s", p.Node, node.State)})
				default:
					gpu, ok := findGPU(node, g)
					switch {
					case !ok:
						v.pending = append(v.pending, Violation{r.Seq, DispatchWithoutCapacity, t.ID, fmt.Sprintf("GPU %s is not on node %s", g, p.Node)})
					case !gpu.Healthy:
						v.pending = append(v.pending, Violation{r.Seq, DispatchWithoutCapacity, t.ID, fmt.Sprintf("GPU %s is unhealthy", g)})
					case !policy.ModelFits(t, gpu):
						v.pending = append(v.pending, Violation{r.Seq, DispatchWithoutCapacity, t.ID, fmt.Sprintf("GPU %s is a %s, not a %s", g, gpu.Model, t.GPUModel)})
					case !policy.MemoryFits(t, gpu):
						v.pending = append(v.pending, Violation{r.Seq, DispatchWithoutCapacity, t.ID, fmt.Sprintf("GPU %s has %d MiB, the task needs %d", g, gpu.MemoryMiB, t.MinGPUMemMiB)})
					}
				}
				seen[g] = true
			}
		}
		if n != t.GPUs && n > 0 {
			v.pending = append(v.pending, Violation{r.Seq, DispatchWithoutCapacity, t.ID, fmt.Sprintf("%d GPUs placed, the task asks for %d", n, t.GPUs)})
		}
	case events.PreemptRequested:
		t := st.Tasks[e.TaskID]
		if t == nil || (t.State != domain.Running && t.State != domain.Dispatched) {
			return
		}
		// A GPU that died is hardware, not policy: whatever the task's
		// class, it resumes elsewhere (allowed checks the GPU is bad).
		hw := e.Policy == policy.GPUUnhealthy
		if t.Priority == domain.Critical && !hw {
			v.pending = append(v.pending, Violation{r.Seq, PreemptedProtected, t.ID, "a CRITICAL task was preempted"})
		} else if !t.Preemptible && !hw {
			v.pending = append(v.pending, Violation{r.Seq, PreemptedProtected, t.ID, "a non-preemptible task was preempted"})
		}
		if why := v.allowed(t, e); why != "" {
			v.pending = append(v.pending, Violation{r.Seq, PreemptionNotAllowed, t.ID, why})
		}
	}
}

// allowed says why the policy named in a preemption does not allow it
// ("" when it does).
func (v *verifier) allowed(victim *domain.Task, e events.PreemptRequested) string {
	st := v.f.st
	if e.Policy == policy.GPUUnhealthy {
		for _, pl := range victim.Placements {
			if n := st.Nodes[pl.Node]; n != nil {
				for _, g := range n.GPUs {
					if !g.Healthy && slices.Contains(pl.GPUs, g.UUID) {
						return ""
					}
				}
			}
		}
		return "a gpu-unhealthy preemption of a task holding no unhealthy GPU"
	}
	if e.Policy == policy.Drain {
		for _, pl := range victim.Placements {
			if n := st.Nodes[pl.Node]; n != nil && n.State == domain.NodeDrained && n.DrainPreempt {
				return ""
			}
		}
		return "a drain preemption of a task on no node drained with --preempt"
	}
	p := st.Tasks[e.For]
	if p == nil {
		return fmt.Sprintf("preempted for %q, a task never submitted", e.For)
	}
	if e.Cause() == events.PreemptReclaim {
		if len(v.o.Teams) == 0 {
			return ""
		}
		g, ok := v.o.Teams[p.Team]
		use := teamUse(st)
		if !ok || use[p.Team] >= g.Of(st.Totals().Healthy) {
			return fmt.Sprintf("a reclaim for team %s, which was not below its guarantee", p.Team)
		}
		return ""
	}
	if e.Policy != policy.CriticalOnly && e.Policy != policy.Ladder {
		return fmt.Sprintf("policy %q is not a preemption policy", e.Policy)
	}
	// The policy's own rule, under the policy the record names.
	o := v.o.Policy
	o.Preemption = e.Policy
	if policy.MayPreemptByClass(o, p, victim) {
		return ""
	}
	if e.Policy == policy.CriticalOnly {
		return fmt.Sprintf("under %s, preempted for %s, a %s task", e.Policy, p.ID, p.Priority)
	}
	if p.Priority > victim.Priority {
		return fmt.Sprintf("under %s with class ageing %s, a %s task preempted for %s, a %s task it was not ahead of in the queue", e.Policy, o.ClassAging, victim.Priority, p.ID, p.Priority)
	}
	return fmt.Sprintf("under %s, a %s task preempted for %s, a %s task", e.Policy, victim.Priority, p.ID, p.Priority)
}

func (v *verifier) after(r events.Record, code domain.SkipCode, why string) {
	st := v.f.st
	// A decision judged before it was folded counts if it was applied, or
	// refused for its placements (its writer broke the rule and the fold
	// caught it); not if it was fenced or lost a race for the task.
	if why == "" || code == domain.SkipPlacement {
		v.out = append(v.out, v.pending...)
	}
	if !strings.HasPrefix(r.Subject, events.TaskPrefix) {
		v.rebuildHeld(r.Seq)
	} else if t := st.Tasks[r.Event.Key()]; t != nil {
		v.track(r.Seq, t)
		switch {
		case t.State == domain.Preempting && !t.HoldsGPUs():
			if _, ok := v.preempted[t.ID]; !ok {
				v.preempted[t.ID] = mark{seq: r.Seq, at: r.At()}
			}
		default:
			delete(v.preempted, t.ID)
		}
	}
	now := st.LastTime
	for id, m := range v.preempted {
		if now.Sub(m.at) > v.o.RequeueGrace && !v.late[m.seq] {
			v.late[m.seq] = true
			v.flag(m.seq, PreemptedNotRequeued, id, fmt.Sprintf("preempted at sequence %d and not requeued for more than %s", m.seq, v.o.RequeueGrace))
		}
	}
	if len(v.o.Teams) > 0 && why == "" {
		v.guarantees(r.Seq, now)
	}
}

// track keeps held (GPU → task) for one task and flags a GPU that another
// task holds too.
func (v *verifier) track(seq uint64, t *domain.Task) {
	for _, g := range v.holds[t.ID] {
		if v.held[g] == t.ID {
			delete(v.held, g)
		}
	}
	delete(v.holds, t.ID)
	if !t.HoldsGPUs() {
		return
	}
	for _, p := range t.Placements {
		for _, g := range p.GPUs {
			if o, ok := v.held[g]; ok && o != t.ID {
				v.flag(seq, GPUHeldTwice, t.ID, fmt.Sprintf("GPU %s held by %s and %s", g, o, t.ID))
			}
			v.held[g] = t.ID
			v.holds[t.ID] = append(v.holds[t.ID], g)
		}
	}
}

// rebuildHeld recomputes held after a node event (a lost node releases
// cancelled tasks' GPUs).
func (v *verifier) rebuildHeld(seq uint64) {
	clear(v.held)
	clear(v.holds)
	for _, t := range v.f.st.Active() {
		v.track(seq, t)
	}
}

// guarantees opens or closes each team's span below its guarantee with
// work it could have had by preempting borrowers.
func (v *verifier) guarantees(seq uint64, now time.Time) {
	st := v.f.st
	use := teamUse(st)
	total := st.Totals().Healthy
	guar := map[string]int{}
	for team, g := range v.o.Teams {
		guar[team] = g.Of(total)
	}
	// Borrowed GPUs that could be taken back: preemptible, not CRITICAL,
	// running tasks of teams over their guarantee.
	borrowed := map[string]int{} // by borrowing team
	for _, t := range st.Active() {
		if t.State == domain.Running && t.Preemptible && t.Priority != domain.Critical && use[t.Team] > guar[t.Team] {
			borrowed[t.Team] += len(t.GPUUUIDs())
		}
	}
	free := st.FreeCount()
	for team, g := range guar {
		short := g - use[team]
		unserved := ""
		if short > 0 {
			avail := free
			for other, n := range borrowed {
				if other != team {
					avail += min(n, use[other]-guar[other])
				}
			}
			for _, t := range st.Queued() {
				if t.Team == team && t.GPUs <= short && t.GPUs <= avail {
					unserved = fmt.Sprintf("task %s (%d GPUs) waited while team %s held %d of its %d guaranteed GPUs and others borrowed %d", t.ID, t.GPUs, team, use[team], g, avail-free)
					break
				}
			}
		}
		m, open := v.under[team]
		switch {
		case unserved != "" && !open:
			v.under[team] = mark{seq: seq, at: now, why: unserved}
		case unserved == "" && open:
			v.closeUnder(team, m, now)
			delete(v.under, team)
		}
	}
}

func (v *verifier) closeUnder(team string, m mark, now time.Time) {
	if d := now.Sub(m.at); d > v.o.GuaranteeGrace {
		v.flag(m.seq, GuaranteeUnserved, "", fmt.Sprintf("team %s below its guarantee for %s: %s", team, d.Round(time.Second), m.why))
	}
}

func (v *verifier) end() {
	now := v.f.st.LastTime
	for _, team := range sortedKeys(v.under) {
		v.closeUnder(team, v.under[team], now)
	}
}

func teamUse(st *domain.State) map[string]int {
	use := map[string]int{}
	st.TeamGPUs(func(team string, n int) { use[team] = n })
	return use
}

func findGPU(n *domain.Node, uuid string) (domain.GPU, bool) {
	for _, g := range n.GPUs {
		if g.UUID == uuid {
			return g, true
		}
	}
	return domain.GPU{}, false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
