package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// AdvisorOptions size an Advisor run.
type AdvisorOptions struct {
	Nodes   int // of PerNode GPUs each, all busy
	PerNode int
	Queued  int
	Events  int // events after which the changed advice is computed
	// Unsettled measures the state as folded, before the scheduler's
	// passes acted on it: every CRITICAL task of the queue still to
	// preempt, so the forward simulation's first passes are the
	// scheduler's preemption storm (thousands of victim searches over
	// every node). By default the scheduler's passes are applied first
	// (Advisor), as the advisor sees a live cluster.
	Unsettled bool
	// Workers run the estimates at submission as the advisor does
	// (advisor.Config.EstimateWorkers): 0: 2, negative: in the fold.
	Workers int
	// Fresh is how long (wall clock) events arrive, one every FreshGap,
	// at an advisor that re-estimates as the service does (estimate.Live
	// with its defaults: MinInterval, Share), to measure how old the
	// advice is when it reflects an event (0: not measured).
	Fresh    time.Duration
	FreshGap time.Duration
}

// AdvisorResult is one Advisor run.
type AdvisorResult struct {
	Nodes  int `json:"nodes"`
	GPUs   int `json:"gpus"`
	Queued int `json:"queued"`
	Events int `json:"events"`
	// Settled: the scheduler's passes were applied before measuring
	// (preemptions and dispatches; AdvisorOptions.Unsettled), Preempted
	// of them preemptions.
	Settled   bool `json:"settled"`
	Preempted int  `json:"settle_preemptions,omitempty"`
	// Workers: goroutines of the estimates at submission (0: in the fold).
	Workers int `json:"estimate_workers"`
	// EstimateAll is one full re-estimate (Estimator.EstimateAll: one
	// forward simulation of the whole queue, every queued task's
	// estimate), best of two.
	EstimateAll time.Duration `json:"estimate_all_ns"`
	// EstimateAllCPU is the same in the thread's CPU time (Linux): the
	// re-estimate's own work, without the time other processes held the
	// core (GC assists included, the GC's own workers not).
	EstimateAllCPU time.Duration `json:"estimate_all_cpu_ns,omitempty"`
	// Advise is one full advice (Estimator.Advise: the re-estimate, the
	// policy's explaining pass and every queued task's advice).
	Advise time.Duration `json:"advise_ns"`
	// After each event (a completion with the dispatches the scheduler
	// makes of it, or a submission), from its arrival at the advisor to
	// every changed advice computed (estimate.Live).
	P50, P99, Max time.Duration `json:"-"`
	P50Ms         float64       `json:"advice_after_event_p50_ms"`
	P99Ms         float64       `json:"advice_after_event_p99_ms"`
	MaxMs         float64       `json:"advice_after_event_max_ms"`
	// The same in the thread's CPU time (Linux).
	P50CPUMs float64 `json:"advice_after_event_p50_cpu_ms,omitempty"`
	P99CPUMs float64 `json:"advice_after_event_p99_cpu_ms,omitempty"`
	// FoldP99Ms is the part before the advice: folding and observing the
	// event's records (with Workers, a submission's simulation is handed
	// to them), p99.
	FoldP99Ms float64 `json:"advice_after_event_fold_p99_ms"`
	// HeapBytes is the live heap of the advisor's state: the fold, the
	// estimator and the advice last computed for every queued task
	// (runtime.MemStats.HeapAlloc after GC, less the heap before the
	// cluster was built).
	HeapBytes uint64 `json:"heap_bytes"`
	// Full and Incremental count, over the events, the full
	// re-estimates and the events that needed none.
	Full        int `json:"full_reestimates"`
	Incremental int `json:"incremental"`
	// Freshness under the service's own budget (AdvisorOptions.Fresh):
	// for each event, from its arrival to the end of the first full
	// re-estimate that began after it was folded (the advice that
	// reflects it is then published); events arrive while a re-estimate
	// holds the fold, as they do in the advisor.
	FreshEvents  int     `json:"fresh_events,omitempty"`
	FreshFull    int     `json:"fresh_full_reestimates,omitempty"`
	FreshRateHz  float64 `json:"fresh_event_rate_per_s,omitempty"`
	FreshP50S    float64 `json:"advice_delay_p50_s,omitempty"`
	FreshP99S    float64 `json:"advice_delay_p99_s,omitempty"`
	FreshMaxS    float64 `json:"advice_delay_max_s,omitempty"`
	FreshEstAvgS float64 `json:"fresh_reestimate_avg_s,omitempty"`
}

// Advisor measures the advisor's work at scale, in-process (no server):
// o.Nodes × o.PerNode GPUs, every one held by a running task, and o.Queued
// queued tasks of 1–8 GPUs (powers of two) in mixed classes, folded as the
// advisor folds them (without estimating each submission: the estimator
// observes the log from the last submission on).
//
//  1. estimate_all: one full re-estimate (EstimateAll), best of two.
//  2. advice_after_event: o.Events events, alternately a running task's
//     completion (folded with the dispatches and starts the scheduler's
//     pass makes of it) and a new submission, each folded and observed,
//     then the advice kept current by estimate.Live: the time from the
//     event's arrival to every changed advice computed.
//  3. The heap of the fold, the estimator and the advice.
//  4. With o.Fresh: events every o.FreshGap for o.Fresh of wall clock at
//     an estimate.Live with the advisor's defaults (full re-estimates at
//     most every MinInterval and within Share of the wall clock): how
//     long after its arrival each event's advice was computed.
func Advisor(ctx context.Context, o AdvisorOptions) (AdvisorResult, error) {
	res := AdvisorResult{Nodes: o.Nodes, GPUs: o.Nodes * o.PerNode, Queued: o.Queued, Events: o.Events}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	rng := rand.New(rand.NewPCG(7, 8))
	f := newFolder()
	pol := policy.New(policy.DefaultOptions())
	est := estimate.NewEstimator(pol)
	switch {
	case o.Workers == 0:
		est.Workers = 2
	case o.Workers > 0:
		est.Workers = o.Workers
	}
	defer est.Close()
	res.Workers = est.Workers
	observe := func(e events.Event) {
		f.apply(e)
		est.Observe(f.st, events.Record{Seq: f.seq, Envelope: events.Envelope{Type: e.EventType(), Time: f.now}, Event: e})
	}
	for i := 0; i < o.Nodes; i++ {
		f.apply(available(nodeName(i), o.PerNode))
	}
	var running []string
	for i := 0; i < o.Nodes; i++ {
		name := nodeName(i)
		for g := 0; g < o.PerNode; {
			k := min(1<<rng.IntN(4), o.PerNode-g)
			r := request(o.Queued + o.Events + len(running))
			r.Env = nil
			r.Priority, r.GPUs, r.Hours = classes[rng.IntN(len(classes))].String(), k, float64(1+rng.IntN(48))
			id := fmt.Sprintf("run-%d-%d", i, g)
			f.apply(submittedOf(r, id, f.now))
			pl := events.Placement{Node: name}
			for x := g; x < g+k; x++ {
				pl.GPUs = append(pl.GPUs, gpuUUID(name, x))
			}
			f.apply(events.Dispatched{TaskID: id, Placements: []events.Placement{pl}, BasedOnSeq: f.seq})
			f.apply(events.Started{TaskID: id, Node: name, PID: 1})
			running = append(running, id)
			g += k
		}
	}
	// The queue, folded only: estimating each at its submission is not
	// what is measured (so the estimator's arrival rates start empty, and
	// its predictor at its prior).
	for i := 0; i < o.Queued; i++ {
		if i%4096 == 0 && ctx.Err() != nil {
			return res, ctx.Err()
		}
		f.now = f.now.Add(time.Second)
		f.apply(newSubmission(rng, i, f.now))
	}
	if f.st.Ignored > 0 {
		return res, fmt.Errorf("bench: the fold refused %d setup events", f.st.Ignored)
	}
	f.now = f.now.Add(time.Minute)
	if !o.Unsettled {
		// The scheduler's passes on the folded state, applied as its
		// decisions come back through the log (victims checkpoint at once,
		// grace 0), until a pass decides nothing: the cluster as the
		// advisor sees it live, not the instant before the scheduler acts.
		res.Settled = true
		for round := 0; round < 1000; round++ {
			r := pol.Plan(policy.Input{State: f.st, Now: f.now, Predict: est.Pred.ForPolicy(f.now)})
			if len(r.Decisions) == 0 {
				break
			}
			for _, d := range r.Decisions {
				switch d.Kind {
				case policy.Dispatch:
					f.apply(events.Dispatched{TaskID: d.TaskID, Placements: d.Placements, BasedOnSeq: f.seq})
					f.apply(events.Started{TaskID: d.TaskID, Node: d.Placements[0].Node, PID: 1})
				case policy.Preempt:
					node := f.st.Tasks[d.TaskID].Node
					f.apply(events.PreemptRequested{TaskID: d.TaskID, For: d.For, Epoch: f.st.Epoch})
					f.apply(events.Preempted{TaskID: d.TaskID, Node: node})
					f.apply(events.Requeued{TaskID: d.TaskID, Epoch: f.st.Epoch})
					res.Preempted++
				}
			}
		}
		running = running[:0]
		for i, n := 0, f.st.Holders(); i < n; i++ {
			if t := f.st.Holder(i); t.State == domain.Running {
				running = append(running, t.ID)
			}
		}
		slices.Sort(running)
		if f.st.Ignored > 0 {
			return res, fmt.Errorf("bench: the fold refused %d of the scheduler's events", f.st.Ignored)
		}
	}

	runtime.LockOSThread() // for the thread's CPU time
	defer runtime.UnlockOSThread()
	// 1. One full re-estimate, best of two (of one past 10 s).
	for i := 0; i < 2 && (i == 0 || res.EstimateAll < 10*time.Second); i++ {
		start, tcpu := time.Now(), threadCPUTime()
		all := est.EstimateAll(f.st, f.now)
		d := time.Since(start)
		if c := threadCPUTime() - tcpu; res.EstimateAllCPU == 0 || c < res.EstimateAllCPU {
			res.EstimateAllCPU = c
		}
		if q := len(f.st.Queued()); len(all) != q {
			return res, fmt.Errorf("bench: %d estimates of %d queued", len(all), q)
		}
		if res.EstimateAll == 0 || d < res.EstimateAll {
			res.EstimateAll = d
		}
	}
	live := estimate.NewLive(est)
	live.MinInterval, live.Share = 0, 0 // every event's advice computed before the next arrives
	start := time.Now()
	live.Advise(f.st, f.now)
	res.Advise = time.Since(start)
	res.HeapBytes = heap() - base

	// 2. Events: each observed and seen by Live as it arrives, then the
	// advice.
	see := func(e events.Event) {
		observe(e)
		live.Saw(f.st, events.Record{Seq: f.seq, Envelope: events.Envelope{Type: e.EventType(), Time: f.now}, Event: e})
	}
	lat := make([]time.Duration, 0, o.Events)
	tlat := make([]time.Duration, 0, o.Events)
	folded := make([]time.Duration, 0, o.Events)
	for i := 0; i < o.Events; i++ {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		f.now = f.now.Add(time.Second)
		arrived, tcpu := time.Now(), threadCPUTime()
		// The scheduler's pass is not the advisor's time.
		pw, pc := nextEvent(i, o.Queued+i, f, pol, est, &running, rng, see)
		arrived, tcpu = arrived.Add(pw), tcpu+pc
		folded = append(folded, time.Since(arrived))
		live.Advise(f.st, f.now)
		lat = append(lat, time.Since(arrived))
		tlat = append(tlat, threadCPUTime()-tcpu)
	}
	full, incr := live.Counts()
	res.Full, res.Incremental = full, incr
	if o.Fresh > 0 {
		if err := fresh(ctx, o, &res, est, f, observe, pol, &running, rng); err != nil {
			return res, err
		}
	}
	slices.Sort(lat)
	slices.Sort(tlat)
	slices.Sort(folded)
	res.FoldP99Ms = ms(quantile(folded, 0.99))
	res.P50CPUMs, res.P99CPUMs = ms(quantile(tlat, 0.50)), ms(quantile(tlat, 0.99))
	res.P50, res.P99 = quantile(lat, 0.50), quantile(lat, 0.99)
	if len(lat) > 0 {
		res.Max = lat[len(lat)-1]
	}
	res.P50Ms, res.P99Ms, res.MaxMs = ms(res.P50), ms(res.P99), ms(res.Max)
	return res, nil
}

// fresh is Advisor's step 4: events arrive on the wall clock, one every
// o.FreshGap, alternately a completion (with the scheduler's dispatches)
// and a submission, and a Live with the advisor's defaults re-estimates
// when it is due, as the service's timer wakes it. An event that arrives
// while a re-estimate runs is folded after it (the service holds the
// fold's lock as long), and a submission's fold includes what the
// advisor does at once (the copy of the state for its estimate at
// submission). Each event's delay is from its arrival to the end of the
// first full re-estimate that began after it was folded.
func fresh(ctx context.Context, o AdvisorOptions, res *AdvisorResult, est *estimate.Estimator, f *folder, observe func(events.Event),
	pol *policy.Policy, running *[]string, rng *rand.Rand) error {
	gap := o.FreshGap
	if gap <= 0 {
		gap = time.Second
	}
	// The clock leaves out the scheduler's passes (another process in
	// the service; here they run on this thread to make the dispatches
	// that follow a completion).
	var planned time.Duration
	clock := func() time.Time { return time.Now().Add(-planned) }
	live := estimate.NewLive(est) // the advisor's defaults
	live.Now = clock
	live.Advise(f.st, f.now) // the advice as it stands
	see := func(e events.Event) {
		observe(e)
		live.Saw(f.st, events.Record{Seq: f.seq, Envelope: events.Envelope{Type: e.EventType(), Time: f.now}, Event: e})
	}
	var (
		delays  []time.Duration
		folded  []time.Time // arrivals folded, not yet in a re-estimate
		spent   time.Duration
		n, full int
	)
	start := clock()
	next := start
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		now := clock()
		if now.Sub(start) >= o.Fresh && len(folded) == 0 {
			break
		}
		// Fold every event that has arrived (none after the window).
		for !next.After(now) && next.Sub(start) < o.Fresh {
			f.now = f.now.Add(gap)
			pw, _ := nextEvent(n, o.Queued+o.Events+n, f, pol, est, running, rng, see)
			planned += pw
			folded = append(folded, next)
			n++
			next = next.Add(gap)
		}
		if live.Pending() && !clock().Before(live.Due()) {
			began := clock()
			before, _ := live.Counts()
			live.Advise(f.st, f.now)
			if after, _ := live.Counts(); after > before {
				done := clock()
				spent += done.Sub(began)
				full++
				for _, a := range folded {
					delays = append(delays, done.Sub(a))
				}
				folded = folded[:0]
			}
			continue
		}
		// Sleep until the next arrival or the re-estimate's due time.
		wake := next
		if live.Pending() && live.Due().Before(wake) {
			wake = live.Due()
		}
		if next.Sub(start) >= o.Fresh && live.Pending() {
			wake = live.Due()
		}
		time.Sleep(max(wake.Sub(clock()), 0))
	}
	slices.Sort(delays)
	res.FreshEvents, res.FreshFull = n, full
	res.FreshRateHz = float64(n) / o.Fresh.Seconds()
	if len(delays) > 0 {
		res.FreshP50S, res.FreshP99S = quantile(delays, 0.5).Seconds(), quantile(delays, 0.99).Seconds()
		res.FreshMaxS = delays[len(delays)-1].Seconds()
	}
	if full > 0 {
		res.FreshEstAvgS = (spent / time.Duration(full)).Seconds()
	}
	return nil
}

// nextEvent folds the n-th event of a measurement through see: a new
// submission (the sub-th queued task) for odd n or when nothing runs,
// else a running task's completion with the dispatches (and starts) the
// scheduler's pass makes of it. It returns that pass's wall and thread
// CPU time: the scheduler's, not the advisor's.
func nextEvent(n, sub int, f *folder, pol *policy.Policy, est *estimate.Estimator, running *[]string, rng *rand.Rand,
	see func(events.Event)) (planWall, planCPU time.Duration) {
	if n%2 == 1 || len(*running) == 0 {
		see(newSubmission(rng, sub, f.now))
		return 0, 0
	}
	r := *running
	j := rng.IntN(len(r))
	id := r[j]
	r[j] = r[len(r)-1]
	*running = r[:len(r)-1]
	see(events.Completed{TaskID: id, Node: f.st.Tasks[id].Node})
	// Its dispatches arrive as events of their own, within this event's
	// time.
	ps, pc := time.Now(), threadCPUTime()
	pr := pol.Plan(policy.Input{State: f.st, Now: f.now, Predict: est.Pred.ForPolicy(f.now)})
	planWall, planCPU = time.Since(ps), threadCPUTime()-pc
	for _, d := range pr.Decisions {
		if d.Kind != policy.Dispatch {
			continue
		}
		see(events.Dispatched{TaskID: d.TaskID, Placements: d.Placements, BasedOnSeq: f.seq})
		see(events.Started{TaskID: d.TaskID, Node: d.Placements[0].Node, PID: 1})
		*running = append(*running, d.TaskID)
	}
	return planWall, planCPU
}

// newSubmission is the i-th queued task of Advisor: 1–8 GPUs (powers of
// two), a class of the placement mix, 0.2–8.2 hours, no environment.
func newSubmission(rng *rand.Rand, i int, now time.Time) events.Submitted {
	r := request(i)
	r.Env = nil
	r.Priority, r.GPUs, r.Hours = classes[rng.IntN(len(classes))].String(), 1<<rng.IntN(4), 0.2+8*rng.Float64()
	return submittedOf(r, fmt.Sprintf("q-%d", i), now)
}
