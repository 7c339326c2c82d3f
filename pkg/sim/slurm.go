package sim

import (
	"cmp"
	"slices"
	"sort"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
)

// slurmStart is the slurm-backfill baseline: the start estimate Slurm's
// backfill scheduler would report (squeue --start), from the users' raw
// run-time estimates. Slurm plans the queue in priority order on a
// resource-availability profile, giving each job the earliest start at
// which it fits for its whole walltime without moving an earlier job's
// planned start (its backfill plugin's reservations); a job's estimate is
// its planned start.
//
// The profile here pools the cluster's healthy GPUs (free GPUs over time)
// rather than tracking each node, so it ignores fragmentation — an
// optimistic simplification that can only favour this baseline. Running
// tasks release their GPUs at their user estimate (at least 5 s from now,
// as a task past its walltime is about to end); queued tasks are planned
// in the state's queue order (class, then submit time) up to the target.
// It returns -1 when the target cannot fit the cluster at all.
func slurmStart(st *domain.State, target *domain.Task, now time.Time) time.Duration {
	total, _ := st.TotalGPUs()
	if target.GPUs > total {
		return -1
	}
	p := holdersProfile(st, total, now)
	var at time.Duration = -1
	st.WalkQueued(func(t *domain.Task) bool {
		if t.GPUs > total {
			return t.ID != target.ID // never fits: plans nothing
		}
		d := secondsDur(max(t.Hours*3600-t.RunSeconds, 1))
		start := p.earliest(t.GPUs, d)
		if t.ID == target.ID {
			at = start
			return false
		}
		p = p.reserve(start, d, t.GPUs)
		return true
	})
	return at
}

// holdersProfile is the profile of the running tasks alone: each holds
// its GPUs from now until its user estimate runs out (at least 5 s from
// now). It is what reserving each holder's GPUs over [0, its end) in turn
// gives — a step at 0 and one at each distinct end, each with the GPUs of
// the holders that end later free of — built from the ends sorted, in
// O(H log H) rather than one insertion per holder.
func holdersProfile(st *domain.State, total int, now time.Time) profile {
	rs := make([]release, 0, st.Holders())
	st.EachActive(func(t *domain.Task) {
		elapsed := 0.0
		if !t.StartedAt.IsZero() && now.After(t.StartedAt) {
			elapsed = now.Sub(t.StartedAt).Seconds()
		}
		rem := max(t.Hours*3600-t.RunSeconds-elapsed, 5)
		rs = append(rs, release{secondsDur(rem), len(t.GPUUUIDs())})
	})
	return releasesProfile(total, rs)
}

// release is a holder's GPUs freed at an offset from now.
type release struct {
	at   time.Duration
	gpus int
}

// releasesProfile is the profile of total GPUs less rs, each held over
// [0, its at) (every at > 0); it sorts rs.
func releasesProfile(total int, rs []release) profile {
	held := 0
	for _, r := range rs {
		held += r.gpus
	}
	slices.SortFunc(rs, func(a, b release) int { return cmp.Compare(a.at, b.at) })
	p := make(profile, 1, len(rs)+1)
	p[0] = step{at: 0, free: total - held}
	for _, r := range rs {
		if last := &p[len(p)-1]; last.at == r.at {
			last.free += r.gpus
			continue
		}
		p = append(p, step{at: r.at, free: p[len(p)-1].free + r.gpus})
	}
	return p
}

func secondsDur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// profile is a step function of free GPUs over time (offsets from now):
// from step i's at until the next step's, free GPUs are free. The last
// step lasts forever.
type profile []step

type step struct {
	at   time.Duration
	free int
}

// earliest is the first step start from which g GPUs stay free for d.
func (p profile) earliest(g int, d time.Duration) time.Duration {
	for i := 0; i < len(p); {
		start := p[i].at
		j := i
		for ; j < len(p) && p[j].at < start+d; j++ {
			if p[j].free < g {
				break
			}
		}
		if j == len(p) || p[j].at >= start+d {
			return start
		}
		i = j + 1 // every start up to step j hits step j
	}
	return p[len(p)-1].at // unreachable: the last step frees everything
}

// reserve takes g GPUs over [from, from+d).
func (p profile) reserve(from, d time.Duration, g int) profile {
	p = p.split(from)
	p = p.split(from + d)
	i := sort.Search(len(p), func(i int) bool { return p[i].at >= from })
	for ; i < len(p) && p[i].at < from+d; i++ {
		p[i].free -= g
	}
	return p
}

// split makes a step start at t.
func (p profile) split(t time.Duration) profile {
	i := sort.Search(len(p), func(i int) bool { return p[i].at >= t })
	if i < len(p) && p[i].at == t {
		return p
	}
	p = append(p, step{})
	copy(p[i+1:], p[i:])
	p[i] = step{at: t, free: p[i-1].free}
	return p
}
