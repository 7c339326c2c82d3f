package policy

import (
	"fmt"
	"sort"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// promisedTo lists the victims already yielding to t.
func (pc *pass) promisedTo(t *domain.Task) []*domain.Task { return pc.promised[t.ID] }

// holdForPromised: when tasks are already checkpointing for t and their
// GPUs plus the free ones will fit it, hold those free GPUs for t (nobody
// else may take them) and preempt nobody more.
func (pc *pass) holdForPromised(t *domain.Task) bool {
	vs := pc.promised[t.ID]
	if len(vs) == 0 {
		return false
	}
	hyp := pc.free.clone()
	for g, at := range pc.free.reserved {
		if at.IsZero() {
			hyp.take([]events.Placement{{Node: nodeOf(pc.free, g), GPUs: []string{g}}})
		}
	}
	for _, v := range vs {
		hyp.add(pc.s, v.Placements)
	}
	ps, ok := place(t, hyp, pc.s, time.Time{})
	if !ok {
		return false
	}
	pc.holdReserved(t, ps)
	return true
}

// mayVictimize reports whether t may preempt v under the options:
// only running, preemptible, non-CRITICAL tasks not already yielding; then
// critical-only: t is CRITICAL; ladder: v's class is strictly lower; and,
// with teams, a team under its guarantee may reclaim GPUs a team borrows
// beyond its own guarantee.
func (pc *pass) mayVictimize(t, v *domain.Task) bool {
	if v.State != domain.Running || !v.Preemptible || v.Priority == domain.Critical || pc.preempting[v.ID] || v.ID == t.ID {
		return false
	}
	switch {
	case pc.opts.Preemption == CriticalOnly && t.Priority == domain.Critical:
		return true
	case pc.opts.Preemption == Ladder && v.Priority < t.Priority:
		return true
	}
	return pc.reclaims(t, v)
}

// reclaims: t's team is under its guarantee and v's team keeps at least
// its own guarantee without v.
func (pc *pass) reclaims(t, v *domain.Task) bool {
	g, ok := pc.guar[t.Team]
	if !ok || pc.usage[t.Team] >= g || v.Team == t.Team {
		return false
	}
	return pc.usage[v.Team]-len(v.GPUUUIDs()) >= pc.guar[v.Team]
}

// lostWork is the GPU-seconds a victim would lose: since its last
// checkpoint, or since it started.
func (pc *pass) lostWork(v *domain.Task) float64 {
	from := v.StartedAt
	if v.CheckpointAt.After(from) {
		from = v.CheckpointAt
	}
	if from.IsZero() || !pc.in.Now.After(from) {
		return 0
	}
	return pc.in.Now.Sub(from).Seconds() * float64(len(v.GPUUUIDs()))
}

// preempt chooses victims for t — the fewest tasks, lowest class first,
// then the least work lost since their last checkpoint — and records the
// preemptions. It reports whether it preempted.
func (pc *pass) preempt(t *domain.Task, tier int) bool {
	if !pc.mayPreempt(t, tier) {
		return false
	}
	var cands []*domain.Task
	avail := pc.free.count
	for _, v := range pc.s.Active() {
		if pc.mayVictimize(t, v) {
			cands = append(cands, v)
			avail += len(v.GPUUUIDs())
		}
	}
	if avail < t.GPUs || len(cands) == 0 {
		return false
	}
	lost := map[string]float64{}
	for _, v := range cands {
		lost[v.ID] = pc.lostWork(v)
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}
		if lost[a.ID] != lost[b.ID] {
			return lost[a.ID] < lost[b.ID]
		}
		return a.SubmitSeq > b.SubmitSeq
	})
	victims, ps := pc.fewestVictims(t, cands)
	if victims == nil {
		return false
	}
	for _, v := range victims {
		pc.preempting[v.ID] = true
		pc.usage[v.Team] -= len(v.GPUUUIDs())
		why := "critical-only"
		if pc.opts.Preemption == Ladder {
			why = "ladder"
		}
		if pc.reclaims(t, v) && !(pc.opts.Preemption == CriticalOnly && t.Priority == domain.Critical) && !(pc.opts.Preemption == Ladder && v.Priority < t.Priority) {
			why = "team guarantee: " + t.Team + " reclaims GPUs borrowed by " + v.Team
		}
		pc.res.Decisions = append(pc.res.Decisions, Decision{Kind: Preempt, TaskID: v.ID, For: t.ID,
			Reason: fmt.Sprintf("preempted by %s for %s under policy %s", describe(t), t.Priority, why)})
		pc.promised[t.ID] = append(pc.promised[t.ID], v)
	}
	pc.holdReserved(t, ps)
	return true
}

// fewestVictims returns the smallest prefix-greedy set of candidates (in
// their preference order) whose GPUs, with the free ones, place t; for a
// task that fits one node, the node needing the fewest victims wins.
func (pc *pass) fewestVictims(t *domain.Task, cands []*domain.Task) ([]*domain.Task, []events.Placement) {
	base := pc.free.clone()
	for g, at := range pc.free.reserved {
		if at.IsZero() {
			base.take([]events.Placement{{Node: nodeOf(pc.free, g), GPUs: []string{g}}})
		}
	}
	// 1. One node: per node, add victims there in preference order.
	var best []*domain.Task
	var bestPS []events.Placement
	for _, node := range pc.free.nodes {
		hyp := base.clone()
		var vs []*domain.Task
		ps, ok := placeOn(t, hyp, pc.s, node)
		for _, v := range cands {
			if ok || (best != nil && len(vs) >= len(best)) {
				break
			}
			if !holdsOn(v, node) {
				continue
			}
			vs = append(vs, v)
			hyp.add(pc.s, v.Placements)
			ps, ok = placeOn(t, hyp, pc.s, node)
		}
		if ok && len(vs) > 0 && (best == nil || len(vs) < len(best)) {
			best, bestPS = vs, ps
		}
	}
	if best != nil {
		return best, bestPS
	}
	// 2. A gang: add victims until it fits anywhere, then drop the ones
	//    not needed, last first.
	hyp := base.clone()
	var vs []*domain.Task
	ok := false
	var ps []events.Placement
	for _, v := range cands {
		vs = append(vs, v)
		hyp.add(pc.s, v.Placements)
		if ps, ok = place(t, hyp, pc.s, time.Time{}); ok {
			break
		}
	}
	if !ok {
		return nil, nil
	}
	for i := len(vs) - 1; i >= 0; i-- {
		trial := base.clone()
		for j, v := range vs {
			if j != i {
				trial.add(pc.s, v.Placements)
			}
		}
		if p2, ok2 := place(t, trial, pc.s, time.Time{}); ok2 {
			vs = append(vs[:i:i], vs[i+1:]...)
			ps = p2
		}
	}
	return vs, ps
}

// placeOn places t on one given node only.
func placeOn(t *domain.Task, f *freeMap, s *domain.State, node string) ([]events.Placement, bool) {
	u := f.usable(t, node, time.Time{})
	if len(u) < t.GPUs {
		return nil, false
	}
	return []events.Placement{{Node: node, GPUs: uuids(u[:t.GPUs])}}, true
}

func holdsOn(v *domain.Task, node string) bool {
	for _, p := range v.Placements {
		if p.Node == node {
			return true
		}
	}
	return false
}
