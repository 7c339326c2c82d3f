package estimate

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
)

// Predictor learns run times from completed tasks: the ratio of actual to
// user-estimated run time, by team and by name prefix, shrunk toward the
// global ratio when a group's history is thin, and the whole learned ratio
// shrunk toward the user's own estimate (the prior) while the runs learned
// are few. It keeps the most recent ratios of each group (a window), so it
// follows drift.
type Predictor struct {
	// Exact makes the predictor take the user's estimate at face value
	// (what Slurm's backfill does with walltimes): no learning, no spread.
	Exact bool
	// NoProgress makes the predictor ignore reported progress (to
	// measure what progress does to the estimates alone: gpuq sim
	// --policy-progress=false).
	NoProgress bool
	// PriorRuns is the prior's pseudo-count (NewPredictor sets
	// DefaultPriorRuns): the learned log-ratio weighs n/(n+PriorRuns)
	// against the user's own estimate (log-ratio 0, priorLogRatio's
	// spread), n being the runs learned, so that what a few runs suggest
	// outweighs the user only once there is evidence.
	PriorRuns float64
	window    int
	global    ring
	team      map[string]*ring
	prefix    map[string]*ring
	// The progress extrapolations' errors (progress.go): the log-ratio of
	// actual to extrapolated run time of completed tasks that reported
	// progress in their last run, by the same groups.
	pglobal ring
	pteam   map[string]*ring
	pprefix map[string]*ring
	snap    *Predictor // Snapshot's copy, until the predictor learns again
	// memo is the quantile functions' values at the bisection's points
	// (cdfMemo), shared by the predictor and its snapshots; memoGen is
	// this one's generation in it (a new one at each change). nil for a
	// predictor made without NewPredictor: every bisection computes.
	memo    *cdfMemo
	memoGen uint64
}

// Shrink is the pseudo-count of the shrinkage toward the global ratios: a
// group with n samples gets weight n/(n+Shrink).
const Shrink = 20

// DefaultPriorRuns is the prior's pseudo-count (Predictor.PriorRuns),
// chosen on both halves of the Philly trace and the cold start of a new
// cluster (docs/performance.md, "The prior pseudo-count"): three runs
// declared 2 h that ended after 3 s move a 3-minute task's P50 by a
// factor of e^(−7.8·3/53) ≈ 0.64 (to 116 s), not to a tenth of a second.
const DefaultPriorRuns = 50

// NewPredictor keeps the last window ratios per group (default 2000).
func NewPredictor(window int) *Predictor {
	if window <= 0 {
		window = 2000
	}
	return &Predictor{PriorRuns: DefaultPriorRuns, window: window, global: ring{max: window}, team: map[string]*ring{}, prefix: map[string]*ring{},
		pglobal: ring{max: window}, pteam: map[string]*ring{}, pprefix: map[string]*ring{}, memo: &cdfMemo{gen: 1}, memoGen: 1}
}

// changed is told that the predictor's learned windows changed: its
// snapshot and the bisection values it remembers are stale.
func (p *Predictor) changed() {
	p.snap = nil
	if p.memo != nil {
		p.memoGen = p.memo.next()
	}
}

// MinEstimateS is the least user estimate, in seconds, the predictor
// takes (validation refuses less, domain.Limits; a log may still hold a
// task estimated at 1e-300 hours from before): learned from such a task
// the ratio of actual to estimated run time was e^683, and every
// prediction drawing on it overflowed.
const MinEstimateS = 1.0

// userEstimate is t's estimate in seconds, at least MinEstimateS (0 when
// t gives none).
func userEstimate(t *domain.Task) float64 {
	est := t.Hours * 3600
	if est <= 0 || math.IsNaN(est) {
		return 0
	}
	return min(max(est, MinEstimateS), maxPredictS)
}

// Observe learns from a completed task.
func (p *Predictor) Observe(t *domain.Task) {
	est := userEstimate(t)
	if p.Exact {
		return
	}
	if t.RunSeconds <= 0 {
		return
	}
	p.observeProgress(t)
	if est <= 0 {
		return
	}
	r := math.Log(t.RunSeconds / est)
	p.changed()
	p.global.add(r)
	p.group(p.team, t.Team).add(r)
	p.group(p.prefix, Prefix(t.Name)).add(r)
}

// Snapshot returns a copy that predicts as p does now and never changes
// (nothing may Observe on it), for readers on other goroutines while p
// goes on learning. Successive snapshots share one copy until p learns.
func (p *Predictor) Snapshot() *Predictor {
	if p.snap != nil {
		return p.snap
	}
	c := &Predictor{Exact: p.Exact, PriorRuns: p.PriorRuns, window: p.window, global: p.global.clone(),
		team: cloneGroups(p.team), prefix: cloneGroups(p.prefix),
		pglobal: p.pglobal.clone(), pteam: cloneGroups(p.pteam), pprefix: cloneGroups(p.pprefix),
		memo: p.memo, memoGen: p.memoGen}
	c.snap = c
	p.snap = c
	return c
}

func cloneGroups(m map[string]*ring) map[string]*ring {
	c := make(map[string]*ring, len(m))
	for k, r := range m {
		rc := r.clone()
		c[k] = &rc
	}
	return c
}

func (p *Predictor) group(m map[string]*ring, k string) *ring {
	g := m[k]
	if g == nil {
		g = &ring{max: p.window / 4}
		m[k] = g
	}
	return g
}

// Prefix is a task name's family: up to the first digit or separator
// after the first letter ("resnet50-lr3e-4" → "resnet").
func Prefix(name string) string {
	name = strings.ToLower(name)
	for i, c := range name {
		if i > 0 && (c == '-' || c == '_' || c == '.' || c == ' ' || c == '/' || (c >= '0' && c <= '9')) {
			return name[:i]
		}
	}
	return name
}

// BasisEstimate is Basis for a prediction that is the user's own estimate.
const BasisEstimate = "your estimate"

// Basis says what t's run-time prediction rests on: "your estimate" while
// the runs learned weigh less than it (PriorRuns) — with how many there
// are once there are some — else the runs learned from: of t's team or
// its name's family when that group weighs at least as much as every run
// of the cluster (Shrink runs), the larger, else the cluster's. A running
// task whose reported progress carries its prediction (ProgressWeight at
// least a half) says "progress 40 %".
func (p *Predictor) Basis(t *domain.Task) string {
	if s, ok := p.progressBasis(t); ok {
		return s
	}
	n := p.global.n()
	switch {
	case p.Exact || n == 0:
		return BasisEstimate
	case float64(n) < p.PriorRuns:
		return fmt.Sprintf("%s (%s learned so far)", BasisEstimate, runs(n))
	}
	team, fam := p.team[t.Team], p.prefix[Prefix(t.Name)]
	tn, fn := 0, 0
	if team != nil {
		tn = team.n()
	}
	if fam != nil {
		fn = fam.n()
	}
	switch {
	case tn >= Shrink && tn >= fn:
		return fmt.Sprintf("learned from %s of team %s", runs(tn), t.Team)
	case fn >= Shrink:
		return fmt.Sprintf("learned from %s named %s…", runs(fn), Prefix(t.Name))
	}
	return fmt.Sprintf("learned from %s on this cluster", runs(n))
}

func runs(n int) string {
	if n == 1 {
		return "1 run"
	}
	return fmt.Sprintf("%d runs", n)
}

// ratioOf resolves t's groups once into f, its log-ratio quantile
// function (for the bisection in cdf, which evaluates it many times): a
// value the caller keeps (on its stack), so nothing is allocated and
// nothing is remembered across calls, which Observe would make stale.
func (p *Predictor) ratioOf(t *domain.Task, f *ratioFn) {
	p.ratioOfPrefix(t, Prefix(t.Name), f)
}

// ratioOfPrefix is ratioOf given t's name's Prefix.
func (p *Predictor) ratioOfPrefix(t *domain.Task, prefix string, f *ratioFn) {
	if p.global.n() == 0 {
		f.prior = true
		return
	}
	f.setLearned(&p.global, max(p.PriorRuns, 0), p.team[t.Team], p.prefix[prefix])
}

// setLearned sets f to the learned quantile function: global's ratios
// weighed against the prior by n/(n+priorRuns), and each group (team,
// prefix) that has ratios blended in by n/(n+Shrink). It returns the
// largest group's count.
func (f *ratioFn) setLearned(global *ring, priorRuns float64, team, prefix *ring) (groupN int) {
	f.global = global.sorted
	n := float64(global.n())
	f.wl = n / (n + priorRuns)
	f.wp = 1 - f.wl
	for _, r := range [2]*ring{team, prefix} {
		if r != nil && r.n() > 0 {
			f.groups[f.n] = r.sorted
			w := float64(r.n()) / float64(r.n()+Shrink)
			f.w[f.n], f.w1[f.n] = w, 1-w
			f.n++
			groupN = max(groupN, r.n())
		}
	}
	return groupN
}

// ratioFn is a task's log-ratio quantile function (ratioOf): the prior
// before any history, else the learned one — the average of its groups'
// estimates, each shrunk toward the global one with weight w = n/(n+Shrink)
// — blended with the prior's, quantile by quantile, by the weight wl of
// the runs learned (Predictor.PriorRuns). It holds the rings' sorted
// windows, which it does not outlive: the next Observe changes them.
type ratioFn struct {
	prior  bool
	prog   bool // progress errors (progressFn): progressPrior is the prior
	n      int  // groups with history
	global []float64
	groups [2][]float64
	w, w1  [2]float64 // w1[i] = 1-w[i]
	wl, wp float64    // the learned quantile's weight and the prior's (1-wl)
}

// at is the q-quantile of the log ratio.
func (f *ratioFn) at(q float64) float64 {
	if f.prog {
		if f.prior {
			return progressPrior(q)
		}
		return f.wl*f.learned(q) + f.wp*progressPrior(q)
	}
	if f.prior {
		return priorLogRatio(q)
	}
	v := f.learned(q)
	if f.wp == 0 {
		return v
	}
	return f.wl*v + f.wp*priorLogRatio(q)
}

// learned is the q-quantile of the learned log ratio.
func (f *ratioFn) learned(q float64) float64 {
	g := quantileSorted(f.global, q)
	if f.n == 0 {
		return g
	}
	// Average the groups' shrunk estimates: each is w_i·group + (1-w_i)·global
	// (the sum from 0, in the groups' order, as a loop over them would).
	v := 0.0
	v += f.w[0]*quantileSorted(f.groups[0], q) + f.w1[0]*g
	if f.n == 1 {
		return v // v / 1
	}
	v += f.w[1]*quantileSorted(f.groups[1], q) + f.w1[1]*g
	return v * 0.5 // v / 2: the same real number, so the same rounding
}

// priorLogRatio: before any history, the user's estimate is the median and
// a factor of 3 the P90 (users' estimates are famously loose).
func priorLogRatio(q float64) float64 {
	return priorScale * normQuantile(q)
}

// priorScale is priorLogRatio's factor: log 3 over the standard normal's
// P90 (math.Log(3) / 1.2816, the same float64 as computed in the
// expression).
var priorScale = math.Log(3) / 1.2816

// Total is the q-quantile of t's whole run time.
func (p *Predictor) Total(t *domain.Task, q float64) time.Duration {
	est := userEstimate(t)
	if est <= 0 {
		est = 4 * 3600
	}
	if p.Exact {
		return seconds(est)
	}
	var f ratioFn
	p.ratioOf(t, &f)
	return seconds(est * math.Exp(f.at(q)))
}

// ForPolicy is the run-time prediction the policy takes
// (policy.Input.Predict) at now: for a queued task the P50 of its whole
// run less what earlier runs did; for a running one, the run so far plus the P50 of what remains
// given that it has run that long. Without the conditioning a task past
// its P50 would be expected to end within the second, and the backfill
// reservation behind it would be placed at once, barring backfill around
// GPUs that are in fact busy for a while yet; with it, the default policy's
// average JCT on the standard Philly scenario drops by 16%
// (docs/performance.md).
func (p *Predictor) ForPolicy(now time.Time) func(*domain.Task) time.Duration {
	return func(t *domain.Task) time.Duration { return p.PolicyRun(t, now) }
}

// PolicyRun is ForPolicy's prediction for one task at now.
func (p *Predictor) PolicyRun(t *domain.Task, now time.Time) time.Duration {
	if el, ok := runningFor(t, now); ok {
		return el + p.Remaining(t, el, 0.5)
	}
	return p.LeftToRun(t, 0.5)
}

// LeftToRun is the q-quantile of what a task not running is still to run:
// its whole run less what earlier runs did (a task resumed from a
// checkpoint), at least 5 s.
func (p *Predictor) LeftToRun(t *domain.Task, q float64) time.Duration {
	return max(p.Total(t, q)-time.Duration(t.RunSeconds*float64(time.Second)), 5*time.Second)
}

// runningFor is how long a running task's current run has lasted.
func runningFor(t *domain.Task, now time.Time) (time.Duration, bool) {
	if t.State != domain.Running || t.StartedAt.IsZero() || !now.After(t.StartedAt) {
		return 0, false
	}
	return now.Sub(t.StartedAt), true
}

// Remaining is the q-quantile of t's remaining run time given that it has
// run for elapsed (conditioned: the quantile is taken in the part of the
// distribution beyond elapsed), never below 5 s or a tenth of elapsed: a
// task past its prediction is expected to end soon, not now. A running
// task that reported progress in this run has the learned prediction
// blended with the extrapolation of its progress (withProgress).
func (p *Predictor) Remaining(t *domain.Task, elapsed time.Duration, q float64) time.Duration {
	done := t.RunSeconds + elapsed.Seconds()
	est := userEstimate(t)
	if est <= 0 {
		est = 4 * 3600
	}
	if done <= 0 {
		return p.Total(t, q)
	}
	if p.Exact {
		return seconds(math.Max(est-done, 5))
	}
	// u = P(total ≤ done); the conditional q-quantile is at u + q(1-u).
	x := math.Log(done / est)
	var f ratioFn
	prefix := Prefix(t.Name)
	p.ratioOfPrefix(t, prefix, &f)
	u := p.cdf(&f, memoKey{team: t.Team, prefix: prefix}, x)
	qq := u + q*(1-u)
	if qq > 0.995 {
		qq = 0.995
	}
	rem := est*math.Exp(f.at(qq)) - done
	if tot, ok := progressTotal(t); ok && !p.NoProgress {
		rem = p.withProgress(t, prefix, &f, tot, done, q, rem)
	}
	if min := math.Max(5, 0.1*elapsed.Seconds()); rem < min {
		rem = min
	}
	return seconds(rem)
}

// cdf inverts the log-ratio quantile function by bisection (it is
// monotone in q): cdfSteps halvings of [0, 1]. The points it tries are
// the nodes of a fixed binary tree (the first ½, then ¼ or ¾, …: node j's
// children are 2j and 2j+1), so the prior's normal quantile at the nodes
// of its first bisectTabDepth levels is read from a table
// (bisectNormQuantile) instead of computed: the same float64 values, so the
// same comparisons and the same result, bit for bit (TestRatioFnExact,
// TestBisectTable).
func (f *ratioFn) cdf(x float64) float64 {
	return f.cdfMemo(x, nil, 0)
}

// cdfMemo is cdf reading and filling m's values of f at the bisection
// tree's nodes stamped gen (m nil: none).
func (f *ratioFn) cdfMemo(x float64, m []memoNode, gen uint64) float64 {
	tab := bisectTable()
	lo, hi := 0.0, 1.0
	j := 1
	for i := 0; i < cdfSteps; i++ {
		mid := (lo + hi) / 2
		var v float64
		switch {
		case j < len(m) && m[j].gen == gen:
			v = m[j].v
		case j < len(tab):
			v = f.atNormQuantile(mid, tab[j])
		default:
			v = f.at(mid)
		}
		if j < len(m) {
			m[j] = memoNode{gen: gen, v: v}
		}
		if v < x {
			lo = mid
			j = 2*j + 1
		} else {
			hi = mid
			j = 2 * j
		}
	}
	return (lo + hi) / 2
}

// cdf is f.cdf(x) for f, the quantile function of the tasks of key's
// groups in p (ratioOfPrefix, progressFn): the values at the bisection's
// first memoDepth levels are remembered for the next bisection of the
// same function — the running tasks of a team and family share one, and
// the scheduler's passes and the forward simulations ask it for each
// holder at each instant. The same values, so the same result, bit for
// bit (TestCdfMemoExact). Without the memo (a predictor made without
// NewPredictor, or another goroutine using it now) it computes them.
func (p *Predictor) cdf(f *ratioFn, key memoKey, x float64) float64 {
	m := p.memo
	if m == nil || !m.mu.TryLock() {
		return f.cdf(x)
	}
	defer m.mu.Unlock()
	key.prog, key.priorRuns = f.prog, p.PriorRuns
	fn := m.fns[key]
	if fn == nil {
		if len(m.fns) >= memoFns {
			return f.cdf(x)
		}
		if m.fns == nil {
			m.fns = map[memoKey][]memoNode{}
		}
		fn = make([]memoNode, 1<<memoDepth)
		m.fns[key] = fn
	}
	return f.cdfMemo(x, fn, p.memoGen)
}

// cdfMemo remembers quantile functions' values at the bisection's points
// (Predictor.cdf), by the groups that make the function, each value
// stamped with the generation of the predictor that computed it: a
// predictor and its snapshots share one, each reading only its own
// generation's values (the windows it learned from), so a snapshot taken
// before a change never reads values of the windows after it.
type cdfMemo struct {
	mu  sync.Mutex
	gen uint64 // the last generation handed out
	fns map[memoKey][]memoNode
}

// next is a new generation, for a predictor whose windows changed.
func (m *cdfMemo) next() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	return m.gen
}

// memoKey is what a quantile function is made from besides the windows:
// the task's team and name prefix (its groups), the kind of function
// (run-time ratio or progress error) and the prior's pseudo-count.
type memoKey struct {
	team, prefix string
	prog         bool
	priorRuns    float64
}

// memoNode is a remembered value at one node of the bisection tree (index
// as bisectTable's), valid for the generation gen (0: none yet).
type memoNode struct {
	gen uint64
	v   float64
}

// memoDepth is how many of the bisection's levels a cdfMemo keeps (16
// bytes a node: 256 KiB a function), and memoFns how many functions it
// keeps at most (16 MiB; beyond, the bisections compute).
const (
	memoDepth = 14
	memoFns   = 64
)

// cdfSteps is the bisection's halvings in cdf.
const cdfSteps = 20

// bisectTabDepth is how many of the bisection's levels bisectTable holds
// (2^bisectTabDepth float64s): the first levels, which every bisection
// visits; the deeper ones compute the quantile (a table of all 20 levels
// is 8 MiB, whose deep levels miss the caches and cost more than the
// arithmetic).
const bisectTabDepth = 12

var (
	bisectOnce sync.Once
	bisectTab  []float64
)

// bisectTable is normQuantile at the bisection tree's nodes: index j (1 the
// root, 2j and 2j+1 its children below and above) holds it at the point
// cdf tries there; index 0 is unused.
func bisectTable() []float64 {
	bisectOnce.Do(func() {
		tab := make([]float64, 1<<bisectTabDepth)
		var fill func(j int, lo, hi float64)
		fill = func(j int, lo, hi float64) {
			if j >= len(tab) {
				return
			}
			mid := (lo + hi) / 2
			tab[j] = normQuantile(mid)
			fill(2*j, lo, mid)
			fill(2*j+1, mid, hi)
		}
		fill(1, 0, 1)
		bisectTab = tab
	})
	return bisectTab
}

// atNormQuantile is at(q) given nq = normQuantile(q) (the priors are
// multiples of it).
func (f *ratioFn) atNormQuantile(q, nq float64) float64 {
	if f.prog {
		if f.prior {
			return progressPriorScale * nq
		}
		return f.wl*f.learned(q) + f.wp*(progressPriorScale*nq)
	}
	if f.prior {
		return priorScale * nq
	}
	v := f.learned(q)
	if f.wp == 0 {
		return v
	}
	return f.wl*v + f.wp*(priorScale*nq)
}

// maxPredictS bounds every prediction, in seconds (ten years): beyond
// it a float's conversion to a time.Duration overflows (to a negative
// duration: a run that ended before it began).
const maxPredictS = 10 * 365 * 24 * 3600.0

// seconds converts s to a Duration, saturating at 0 and maxPredictS (NaN
// is 0).
func seconds(s float64) time.Duration {
	switch {
	case !(s > 0):
		return 0
	case s > maxPredictS:
		s = maxPredictS
	}
	return time.Duration(s * float64(time.Second))
}

// ring is a window of the most recent values, kept sorted as it changes
// (an insertion and a removal each cost a binary search and a copy, not a
// sort), so its quantiles are always at hand.
type ring struct {
	max    int
	vals   []float64
	next   int
	sorted []float64
}

func (r *ring) add(v float64) {
	if len(r.vals) < r.max {
		r.vals = append(r.vals, v)
	} else {
		old := r.vals[r.next]
		r.vals[r.next] = v
		r.next = (r.next + 1) % r.max
		i, _ := slices.BinarySearch(r.sorted, old)
		r.sorted = slices.Delete(r.sorted, i, i+1)
	}
	i, _ := slices.BinarySearch(r.sorted, v)
	r.sorted = slices.Insert(r.sorted, i, v)
}

func (r *ring) n() int { return len(r.vals) }

func (r *ring) clone() ring {
	return ring{max: r.max, vals: slices.Clone(r.vals), next: r.next, sorted: slices.Clone(r.sorted)}
}

func (r *ring) quantile(q float64) float64 { return quantileSorted(r.sorted, q) }

// window is a queue of the most recent values whose length its owner
// sets (keep), kept sorted as it changes like ring.
type window struct {
	vals   []float64 // oldest first, from head
	head   int
	sorted []float64
}

func (w *window) add(v float64) {
	w.vals = append(w.vals, v)
	i, _ := slices.BinarySearch(w.sorted, v)
	w.sorted = slices.Insert(w.sorted, i, v)
}

// keep drops the oldest values beyond the last k.
func (w *window) keep(k int) {
	for w.n() > k {
		old := w.vals[w.head]
		w.head++
		i, _ := slices.BinarySearch(w.sorted, old)
		w.sorted = slices.Delete(w.sorted, i, i+1)
	}
	if w.head > 1024 && w.head > len(w.vals)/2 {
		w.vals = append(w.vals[:0], w.vals[w.head:]...)
		w.head = 0
	}
}

func (w *window) n() int { return len(w.vals) - w.head }

func (w *window) quantile(q float64) float64 { return quantileSorted(w.sorted, q) }

// quantileSorted interpolates linearly between order statistics.
func quantileSorted(s []float64, q float64) float64 {
	if len(s) == 0 {
		return 0
	}
	if q <= 0 {
		return s[0]
	}
	if q >= 1 {
		return s[len(s)-1]
	}
	pos := q * float64(len(s)-1)
	i := int(pos)
	if i+1 >= len(s) {
		return s[i]
	}
	f := pos - float64(i)
	return s[i]*(1-f) + s[i+1]*f
}

// normQuantile is the standard normal quantile (Acklam's approximation).
func normQuantile(p float64) float64 {
	if p <= 0 {
		return -8
	}
	if p >= 1 {
		return 8
	}
	a := []float64{-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00}
	b := []float64{-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01, -1.328068155288572e+01}
	c := []float64{-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00}
	d := []float64{7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00}
	const pl = 0.02425
	switch {
	case p < pl:
		q := math.Sqrt(-2 * math.Log(p))
		return (((((c[0]*q+c[1])*q+c[2])*q+c[3])*q+c[4])*q + c[5]) / ((((d[0]*q+d[1])*q+d[2])*q+d[3])*q + 1)
	case p > 1-pl:
		q := math.Sqrt(-2 * math.Log(1-p))
		return -(((((c[0]*q+c[1])*q+c[2])*q+c[3])*q+c[4])*q + c[5]) / ((((d[0]*q+d[1])*q+d[2])*q+d[3])*q + 1)
	}
	q := p - 0.5
	r := q * q
	return (((((a[0]*r+a[1])*r+a[2])*r+a[3])*r+a[4])*r + a[5]) * q / (((((b[0]*r+b[1])*r+b[2])*r+b[3])*r+b[4])*r + 1)
}
