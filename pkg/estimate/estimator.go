package estimate

import (
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// Estimate is a task's predicted wait.
type Estimate struct {
	P50Wait, P90Wait   time.Duration
	P50Start, P90Start time.Time
	// Raw is the forward simulation's wait before calibration.
	Raw   time.Duration
	Never bool // the task cannot start on this cluster as it is
	// Capped: the forward simulation reached its horizon (its budget of
	// passes) before the task started; the estimate is where it stopped,
	// a lower bound (listed by Stats.Capped and Estimator.OnCapped).
	Capped bool
}

// Estimator is the advisor's core, pure and deterministic: fed the log in
// order (Observe, after the state applied each record), it learns run
// times from completed tasks and the error of its own start estimates,
// and estimates starts by forward simulation of the real policy.
//
// Calibration is conformal and online: the P50 and P90 are the forward
// simulation's wait scaled by the median and 90th percentile of the
// recent log-ratios of actual to simulated wait (over started tasks whose
// simulated or actual wait was not zero). Only what already happened is
// used — never the future of the log.
type Estimator struct {
	Pol  *policy.Policy
	Pred *Predictor
	// Window is how many recent residuals calibrate the P50 and the P90
	// (default DefaultWindow).
	Window int
	// Arrivals: model work that may still arrive ahead of a task from the
	// recent arrival rate of higher classes (default on).
	NoArrivals bool
	// Coarse is the forward simulation's step window (forward's window):
	// events within Coarse × (time ahead) of each other are planned in one
	// pass (default DefaultCoarse; negative: one pass per event).
	Coarse float64

	// Workers > 1 runs the forward simulations of estimates at submission
	// on that many goroutines, while Observe goes on: the results are the
	// same (each simulation runs on a copy of the state and a snapshot of
	// the predictor taken in Observe, and is calibrated with the residuals
	// as they were then). AtSubmit and the judging at start wait for it.
	// Close stops the goroutines.
	Workers int

	// NoWaitBins calibrates the P50 by the class's residuals alone,
	// whatever the size of the simulated wait (see byWait; false by
	// default: the P50 is calibrated by bin).
	NoWaitBins bool

	// OnCapped, when set, is told of each estimate whose forward
	// simulation reached its horizon before the task started (the advisor
	// logs it); it may be called on a worker's goroutine.
	OnCapped func(taskID string, simulated time.Duration)
	// Steps is an estimate's budget: the passes a forward simulation of
	// one task may plan (0: 100,000; the whole queue's gets ten times as
	// many). A simulation that spends it stops there: the estimate is
	// Capped.
	Steps int

	capped cappedList
	res    ring
	// byClass are the same residuals by the task's class, over the span
	// of res (the class's residuals among res's, or its last
	// MinClassResiduals when res holds fewer): a class with
	// MinClassResiduals is calibrated by them (Mondrian conformal by
	// class), the others by res. resClass and inRes are the class of each
	// of res's residuals (in res's ring order) and how many each class has
	// there.
	byClass  [domain.Critical + 1]window
	resClass []int8
	resNext  int
	inRes    [domain.Critical + 1]int
	// byWait are each class's last WaitBinWindow residuals by the size of
	// the simulated wait they calibrated (waitBin), for the P50.
	byWait [domain.Critical + 1][waitBins]ring
	// resRaw are the simulated waits (s) of res's residuals, for the
	// P50's guard (WaitGuard).
	resRaw   ring
	atSubmit map[string]*pending
	jobs     chan *pending
	recent   []arrival // recent submissions, for arrival rates
	stats    Stats
	live     *Live          // advising through Live.Advise (its kept what-ifs)
	waits    *alarm.Tracker // the alarm's breakdown of each wait (late.go)
}

type arrival struct {
	at    time.Time
	prio  domain.Priority
	gpus  int
	hours float64
	team  string
}

// Stats is the estimator's self-measurement: estimates made at
// submission, judged when the task started.
type Stats struct {
	N           int     `json:"n"`            // judged tasks (actual wait ≥ 60 s)
	P90Coverage float64 `json:"p90_coverage"` // share started by the P90
	MedianAbsS  float64 `json:"p50_median_abs_err_s"`
	Alerts      int     `json:"alerts"` // waits beyond 2× the P50 at submission
	// Capped counts the estimates whose forward simulation reached its
	// horizon before the task started (each is a lower bound);
	// CappedTasks are the last few such tasks.
	Capped      int      `json:"capped"`
	CappedTasks []string `json:"capped_tasks,omitempty"`
	errs        []float64
	covered     int
}

// Calibration windows, chosen on the standard Philly scenario
// (docs/performance.md): 400 residuals gave a P90 coverage of 0.866 with
// 0.819 in the second quarter and a median P50 error of 847 s; 2,000 hold
// 0.889 with every quarter within 0.86–0.91, and 773 s. A short window
// for the P50 alone did worse (200: 849 s).
const DefaultWindow = 2000

// MinClassResiduals is how many residuals of its own class calibrate a
// task's estimate instead of every class's (Estimator.byClass). On the
// mix scenario a pooled calibration covered LOW's waits at 0.74 and
// CRITICAL's at 0 (docs/performance.md). With one class the two are the
// same residuals, so the standard scenario's estimates do not change.
const MinClassResiduals = 200

// ClassShrink is the pseudo-count that blends a class's P90 toward every
// class's when that one is higher (quantiles): a class with n residuals
// over the pooled window's span weighs n/(n+ClassShrink). Half the
// default window: on the mix scenario HIGH (some 300 of 2,000) leans on
// the pooled P90, MEDIUM (some 1,200) about halfway.
const ClassShrink = 1000

// calibration constant: waits are compared as log((w+c)/(raw+c)).
const calC = 60.0

// NewEstimator returns an estimator for the given policy.
func NewEstimator(pol *policy.Policy) *Estimator {
	return &Estimator{Pol: pol, Pred: NewPredictor(0), Coarse: DefaultCoarse, atSubmit: map[string]*pending{}}
}

// DefaultCoarse is the default forward-simulation window; see
// forward and docs/performance.md for what it costs in accuracy (on
// the standard Philly scenario 0.2 gave a median P50 error of 773 s, 0.1
// gives 729 s for 10 % more time).
const DefaultCoarse = 0.1

func (e *Estimator) coarse() float64 { return max(e.Coarse, 0) }

// steps is the budget of a forward simulation, times k.
func (e *Estimator) steps(k int) int {
	if e.Steps > 0 {
		return e.Steps * k
	}
	return forwardSteps * k
}

// Observe learns from one record, which st has just applied.
func (e *Estimator) Observe(st *domain.State, r events.Record) {
	if e.res.max == 0 {
		if e.Window <= 0 {
			e.Window = DefaultWindow
		}
		e.res.max = e.Window
	}
	e.tracker().Saw(r)
	switch ev := r.Event.(type) {
	case events.Submitted:
		t := st.Tasks[ev.TaskID]
		if t == nil || t.SubmitSeq != r.Seq {
			return
		}
		e.recent = append(e.recent, arrival{at: t.SubmittedAt, prio: t.Priority, gpus: t.GPUs, hours: t.Hours, team: t.Team})
		if len(e.recent) > 4096 {
			e.recent = append(e.recent[:0], e.recent[2048:]...)
		}
		e.atSubmit[t.ID] = e.estimateAtSubmit(st, t.ID, r.At())
	case events.Started:
		t := st.Tasks[ev.TaskID]
		if t == nil || !t.FirstStarted.Equal(r.At()) {
			return
		}
		p, ok := e.atSubmit[t.ID]
		if !ok {
			return
		}
		delete(e.atSubmit, t.ID)
		est := p.get()
		actual := t.FirstStarted.Sub(t.SubmittedAt).Seconds()
		raw := est.Raw.Seconds()
		if !est.Never && (raw > 0 || actual > 1) {
			v := math.Log((math.Max(actual, 0) + calC) / (raw + calC))
			e.addResidual(v, t.Priority)
			e.addWaitResidual(v, raw, t.Priority)
			if e.resRaw.max == 0 {
				e.resRaw.max = e.res.max
			}
			e.resRaw.add(raw)
		}
		if actual >= 60 {
			e.stats.N++
			if !est.Never && actual <= est.P90Wait.Seconds()+1 {
				e.stats.covered++
			}
			e.stats.errs = append(e.stats.errs, math.Abs(actual-est.P50Wait.Seconds()))
		}
		// The advice's alert rule (advice.go): waited past AlertFactor × the
		// P50 at submission, and past AlertMinWait.
		if !est.Never && actual > AlertMinWait.Seconds() && actual > AlertFactor*est.P50Wait.Seconds() {
			e.stats.Alerts++
		}
	case events.Completed:
		e.Pred.Learn(st, r)
	case events.Cancelled, events.Failed:
		delete(e.atSubmit, ev.Key())
	}
}

// AtSubmit returns the estimate made when the task was submitted (until
// it starts, is cancelled or fails).
func (e *Estimator) AtSubmit(id string) (Estimate, bool) {
	p, ok := e.atSubmit[id]
	if !ok {
		return Estimate{}, false
	}
	return p.get(), true
}

// AtSubmitLater is AtSubmit without waiting: get waits for the estimate
// (with Workers > 1 its forward simulation may still be running) and may
// be called after the task started.
func (e *Estimator) AtSubmitLater(id string) (get func() Estimate, ok bool) {
	p, ok := e.atSubmit[id]
	if !ok {
		return nil, false
	}
	return p.get, true
}

// Close stops the Workers' goroutines once their simulations are done.
func (e *Estimator) Close() {
	if e.jobs != nil {
		close(e.jobs)
		e.jobs = nil
	}
}

// pending is an estimate at submission, ready or being simulated.
type pending struct {
	est  Estimate
	done chan struct{} // nil: est is ready
	// For the simulation: the forward simulation past its first pass, and
	// the calibration as it was at submission.
	f        *fwd
	target   string
	now      time.Time
	q50, q90 float64
	bins     *[waitBins]float64 // the P50's log-ratio by waitBin, or nil
	top      float64            // the longest simulated wait calibrated (0: no guard)
	capped   func(id string, simulated time.Duration)
}

func (p *pending) get() Estimate {
	if p.done != nil {
		<-p.done
	}
	return p.est
}

// estimateAtSubmit is Estimate, with the forward simulation handed to the
// workers when there are some and the first pass does not settle it.
func (e *Estimator) estimateAtSubmit(st *domain.State, id string, now time.Time) *pending {
	return e.estimate(st, id, now, e.Workers > 1)
}

// estimate is Estimate's work. With async, the forward simulation runs on
// a copy of the state with a snapshot of the predictor, on the workers,
// unless its first pass settles it; either way it is calibrated with the
// residuals as they are now.
func (e *Estimator) estimate(st *domain.State, id string, now time.Time, async bool) *pending {
	t := st.Tasks[id]
	if t == nil {
		return &pending{est: Estimate{Never: true}}
	}
	if t.State != domain.Queued {
		start := t.FirstStarted
		if start.IsZero() {
			start = now
		}
		return &pending{est: Estimate{P50Start: start, P90Start: start}}
	}
	var arr []Arrival
	if !e.NoArrivals {
		arr = e.arrivals(now, t.Priority+1)
	}
	pred := e.Pred
	if async {
		pred = pred.Snapshot()
	}
	p := &pending{target: id, now: now, capped: e.cappedFn()}
	p.q50, p.q90 = e.quantiles(t.Priority)
	p.bins = e.waitQuantiles(t.Priority, p.q50)
	p.top = e.guardTop()
	f, starts := startForward(st, e.Pol, pred, now, id, 0.5, arr, e.steps(1), e.coarse())
	switch {
	case f == nil:
		p.settle(starts, nil)
	case !async:
		p.settle(f.run(), f)
	default:
		if e.jobs == nil {
			e.jobs = make(chan *pending, 4*e.Workers)
			for i := 0; i < e.Workers; i++ {
				go work(e.jobs)
			}
		}
		p.f, p.done = f, make(chan struct{})
		e.jobs <- p
	}
	return p
}

// settle calibrates the forward simulation's start of the target; f is
// the simulation (nil when its first pass settled it).
func (p *pending) settle(starts map[string]time.Time, f *fwd) {
	at, ok := starts[p.target]
	capped := !ok && f != nil && f.capped
	if capped {
		// Over budget: the start is later than where the simulation
		// stopped; that is the estimate, marked.
		at, ok = f.vnow, true
		p.capped(p.target, f.vnow.Sub(p.now))
	}
	if ok {
		raw := nonNeg(at.Sub(p.now))
		q50 := p.q50
		if p.bins != nil {
			q50 = p.bins[waitBin(raw.Seconds())]
		}
		q50 = guarded(raw.Seconds(), p.top, q50)
		p.est = calibrated(raw, p.now, q50, p.q90)
		p.est.Capped = capped
	} else {
		p.est = Estimate{Never: true}
	}
}

func work(jobs <-chan *pending) {
	for p := range jobs {
		p.settle(p.f.run(), p.f)
		p.f = nil
		close(p.done)
	}
}

// Stats returns the self-measurement so far.
func (e *Estimator) Stats() Stats {
	s := e.stats
	if s.N > 0 {
		s.P90Coverage = float64(s.covered) / float64(s.N)
		errs := append([]float64(nil), s.errs...)
		sort.Float64s(errs)
		s.MedianAbsS = quantileSorted(errs, 0.5)
	}
	s.errs = nil
	e.capped.mu.Lock()
	s.Capped, s.CappedTasks = e.capped.n, slices.Clone(e.capped.ids)
	e.capped.mu.Unlock()
	return s
}

// Estimate predicts when a queued task starts, at now.
func (e *Estimator) Estimate(st *domain.State, id string, now time.Time) Estimate {
	return e.estimate(st, id, now, false).est
}

// EstimateAll estimates every queued task with one forward simulation
// (arrivals of every class at their recent rates; each lands at its place
// in the order, so it delays only the tasks behind it).
func (e *Estimator) EstimateAll(st *domain.State, now time.Time) map[string]Estimate {
	var arr []Arrival
	if !e.NoArrivals {
		arr = e.arrivals(now, domain.Low)
	}
	starts, f := forward(st, e.Pol, e.Pred, now, "", 0.5, arr, e.steps(forwardAllSteps/forwardSteps), e.coarse())
	out := map[string]Estimate{}
	capped := e.cappedFn()
	for _, t := range st.Queued() {
		at, ok := starts[t.ID]
		switch {
		case !ok && f != nil && f.capped:
			est := e.calibrate(nonNeg(f.vnow.Sub(now)), now, t.Priority)
			est.Capped = true
			out[t.ID] = est
			capped(t.ID, f.vnow.Sub(now))
		case !ok:
			out[t.ID] = Estimate{Never: true}
		default:
			out[t.ID] = e.calibrate(nonNeg(at.Sub(now)), now, t.Priority)
		}
	}
	return out
}

// cappedList counts the estimates over budget and keeps the last few
// tasks (safe for the workers' goroutines).
type cappedList struct {
	mu  sync.Mutex
	n   int
	ids []string
}

// cappedKeep is how many capped tasks Stats lists.
const cappedKeep = 16

// cappedFn records one capped estimate and tells OnCapped.
func (e *Estimator) cappedFn() func(id string, simulated time.Duration) {
	return func(id string, simulated time.Duration) {
		c := &e.capped
		c.mu.Lock()
		c.n++
		if !slices.Contains(c.ids, id) {
			c.ids = append(c.ids, id)
			if len(c.ids) > cappedKeep {
				c.ids = c.ids[1:]
			}
		}
		c.mu.Unlock()
		if e.OnCapped != nil {
			e.OnCapped(id, simulated)
		}
	}
}

func nonNeg(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}

func (e *Estimator) calibrate(raw time.Duration, now time.Time, class domain.Priority) Estimate {
	q50, q90 := e.quantiles(class)
	q50 = guarded(raw.Seconds(), e.guardTop(), e.waitQuantile(class, waitBin(raw.Seconds()), q50))
	return calibrated(raw, now, q50, q90)
}

// addResidual records one residual of a task of the class: in res, and in
// the class's window, which keeps the class's residuals of res's span
// (at least its last MinClassResiduals). A window of a class's own last
// Window residuals reached weeks back for a small class and missed the
// bursts the pooled one had just seen (HIGH's coverage 0.74 on the mix
// scenario, docs/performance.md).
func (e *Estimator) addResidual(v float64, class domain.Priority) {
	if e.res.max == 0 {
		e.res.max = max(e.Window, 1)
	}
	c := int8(-1)
	if class.Valid() {
		c = int8(class)
	}
	if len(e.resClass) < e.res.max {
		e.resClass = append(e.resClass, c)
	} else {
		if old := e.resClass[e.resNext]; old >= 0 {
			e.inRes[old]--
			e.byClass[old].keep(max(MinClassResiduals, e.inRes[old]))
		}
		e.resClass[e.resNext] = c
		e.resNext = (e.resNext + 1) % e.res.max
	}
	e.res.add(v)
	if c >= 0 {
		e.inRes[c]++
		e.byClass[c].add(v)
		e.byClass[c].keep(max(MinClassResiduals, e.inRes[c]))
	}
}

// The P50 by size of simulated wait: a class's residuals differ with the
// simulated wait they calibrate (on the mix scenario's first 20,000 jobs
// its P50 was too short for waits simulated under 3 min, 90 % of them
// waited longer, and too long for waits simulated at 2–24 h, 73–86 %
// waited less), so the P50 of a wait simulated in bin b is the class's P50 moved toward the
// median of the class's last WaitBinWindow residuals of bin b, by
// n/(n+WaitBinShrink). The bins are factors of WaitBinFactor of the
// simulated wait plus calC. Chosen on both traces by replaying the
// calibration over the same runs (docs/performance.md): on the Philly
// mix the median P50 error 450 → 397 s, the standard scenario 706 → 719
// s, Alibaba at 6 nodes 914 → 893 s (mix 667 → 642); a pseudo-count of
// 10 or 30 instead of 100 cost the standard scenario 792 or 761 s, and
// windows of 300 or more per bin left the mix at 420–440 s.
const (
	waitBins      = 16
	WaitBinFactor = 4
	WaitBinWindow = 100
	WaitBinShrink = 100
)

// waitBin is the bin of a simulated wait of raw seconds: 0 below
// calC × (WaitBinFactor−1), then one bin per factor.
func waitBin(raw float64) int {
	b := int(math.Log((raw+calC)/calC) / math.Log(WaitBinFactor))
	return min(max(b, 0), waitBins-1)
}

// addWaitResidual records a residual of a task of the class whose
// simulated wait was raw seconds in the class's bin of that size.
func (e *Estimator) addWaitResidual(v, raw float64, class domain.Priority) {
	if !class.Valid() {
		return
	}
	b := &e.byWait[class][waitBin(raw)]
	if b.max == 0 {
		b.max = WaitBinWindow
	}
	b.add(v)
}

// waitQuantiles are the P50's log-ratios of a task of the class by bin
// of simulated wait, from the class's P50 q50 (nil: every bin's is q50).
func (e *Estimator) waitQuantiles(class domain.Priority, q50 float64) *[waitBins]float64 {
	if e.NoWaitBins || !class.Valid() {
		return nil
	}
	var out [waitBins]float64
	for i := range out {
		out[i] = e.waitQuantile(class, i, q50)
	}
	return &out
}

// waitQuantile is the P50's log-ratio in bin b of the class.
func (e *Estimator) waitQuantile(class domain.Priority, b int, q50 float64) float64 {
	if e.NoWaitBins || !class.Valid() {
		return q50
	}
	r := &e.byWait[class][b]
	n := float64(r.n())
	if n == 0 {
		return q50
	}
	return q50 + n/(n+WaitBinShrink)*(r.quantile(0.5)-q50)
}

// WaitGuard: a wait simulated longer than WaitGuard × the longest one
// among the pooled calibration window's residuals (res) gets no P50 calibration (the
// simulated wait is the P50): the residuals say nothing of waits that
// long, and their ratio, learned on shorter ones, is not extrapolated.
// On Alibaba at 3 nodes the residuals of pods simulated to wait 1–13 days
// (actual 10–20) scaled later pods simulated at 36–43 days (actual
// 17–22) to months: the median P50 error 4,948,808 s with the bins
// alone, 1,593,357 s (0.43× slurm-backfill's) with the guard; it changes
// no other scenario's P50 by more than 0.1 s (docs/performance.md).
// 1 and 1.5 gave the same figure there but cost Alibaba at 4 nodes
// (136,773 and 110,038 s against 97,190 without bins).
const WaitGuard = 2

// guardTop is the longest simulated wait among the calibration window's
// residuals (0: too few residuals to calibrate by, no guard).
func (e *Estimator) guardTop() float64 {
	if e.res.n() < 20 || e.resRaw.n() == 0 {
		return 0
	}
	return e.resRaw.sorted[e.resRaw.n()-1]
}

// guarded is the P50's log-ratio q50 for a wait simulated at raw seconds
// when the longest calibrated is top (WaitGuard).
func guarded(raw, top, q50 float64) float64 {
	if top > 0 && raw > WaitGuard*top {
		return 0
	}
	return q50
}

// quantiles are the calibration's log-ratios for the P50 and the P90 of a
// task of the class now: once its class has MinClassResiduals over the
// pooled window's span, the class's P50, and for the P90 the class's own
// or, when every class's is higher, the two blended by the class's
// weight n/(n+ClassShrink) — a class's own P90 alone under-covered HIGH
// (0.77 on the mix scenario: its few hundred residuals miss the bursts),
// the larger of the two over-covered MEDIUM (0.957 in two quarters:
// LOW's larger residuals raise the pooled one). Else every class's.
func (e *Estimator) quantiles(class domain.Priority) (q50, q90 float64) {
	if class.Valid() && e.byClass[class].n() >= MinClassResiduals {
		r := &e.byClass[class]
		own, all := r.quantile(0.9), e.res.quantile(0.9)
		if all > own {
			w := float64(r.n()) / float64(r.n()+ClassShrink)
			own = w*own + (1-w)*all
		}
		return r.quantile(0.5), own
	}
	if e.res.n() >= 20 {
		return e.res.quantile(0.5), e.res.quantile(0.9)
	}
	return 0, math.Log(2)
}

// calibrated scales a forward simulation's wait by the calibration's
// log-ratios.
func calibrated(raw time.Duration, now time.Time, q50, q90 float64) Estimate {
	scale := func(q float64) time.Duration {
		if raw == 0 {
			return 0 // it starts in this very pass: nothing to calibrate
		}
		w := (raw.Seconds()+calC)*math.Exp(q) - calC
		if w < 0 {
			w = 0
		}
		return seconds(w)
	}
	est := Estimate{Raw: raw, P50Wait: scale(q50), P90Wait: scale(q90)}
	if est.P90Wait < est.P50Wait {
		est.P90Wait = est.P50Wait
	}
	est.P50Start, est.P90Start = now.Add(est.P50Wait), now.Add(est.P90Wait)
	return est
}

// arrivals predicts the work of classes ≥ min that will be submitted in
// the next 24 hours from the last 24 hours of submissions: each class
// arrives at its observed rate, evenly spaced, with its mean size (capped
// at 200 arrivals). A class seen fewer than twice is left out.
func (e *Estimator) arrivals(now time.Time, min domain.Priority) []Arrival {
	const span = 24 * time.Hour
	type agg struct {
		n     int
		gpus  int
		hours float64
	}
	by := map[domain.Priority]*agg{}
	for i := len(e.recent) - 1; i >= 0; i-- {
		a := e.recent[i]
		if now.Sub(a.at) > span {
			break
		}
		if a.prio < min {
			continue
		}
		g := by[a.prio]
		if g == nil {
			g = &agg{}
			by[a.prio] = g
		}
		g.n++
		g.gpus += a.gpus
		g.hours += a.hours
	}
	var out []Arrival
	for _, p := range domain.Priorities {
		g := by[p]
		if g == nil {
			continue
		}
		if g.n < 2 {
			continue
		}
		every := span / time.Duration(g.n)
		for at := now.Add(every); at.Before(now.Add(span)) && len(out) < 200; at = at.Add(every) {
			out = append(out, Arrival{At: at, GPUs: int(math.Round(float64(g.gpus) / float64(g.n))), Hours: g.hours / float64(g.n), Priority: p})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}
