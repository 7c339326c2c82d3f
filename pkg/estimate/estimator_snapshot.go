package estimate

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
)

// estimatorFormat is the layout Estimator.MarshalBinary writes (JSON of
// estimatorSnap); another format is refused and the log folded again.
const estimatorFormat = 2

// estimatorSnap is what an Estimator has learned from the log, for the
// advisor's snapshot (service.Snapshots): the calibration's residuals
// (pooled, by class, each residual's class in ring order), the estimates
// made at submission of the tasks not yet started, the recent arrivals,
// the self-measurement and the run-time predictor. Its settings (policy,
// window, coarse, workers) are the running advisor's, not the snapshot's.
// Floats are written as their bits where NaN or an infinity could be
// among them (JSON has neither).
type estimatorSnap struct {
	Format   int            `json:"format"`
	Window   int            `json:"window"`
	Res      ringSnap       `json:"res"`
	ByClass  [][]uint64     `json:"by_class"` // oldest first
	ResClass []int8         `json:"res_class"`
	ResNext  int            `json:"res_next"`
	InRes    []int          `json:"in_res"`
	ByWait   [][]ringSnap   `json:"by_wait"` // [class][bin]
	ResRaw   ringSnap       `json:"res_raw"`
	AtSubmit []atSubmitSnap `json:"at_submit"` // sorted by task
	Recent   []arrivalSnap  `json:"recent"`
	Stats    statsSnap      `json:"stats"`
	Pred     []byte         `json:"pred"` // Predictor.MarshalBinary
}

type ringSnap struct {
	Max  int      `json:"max"`
	Next int      `json:"next"`
	Vals []uint64 `json:"vals"` // float64 bits, insertion order
}

type atSubmitSnap struct {
	Task string   `json:"task"`
	Est  Estimate `json:"est"`
}

type arrivalSnap struct {
	At    time.Time       `json:"at"`
	Prio  domain.Priority `json:"prio"`
	GPUs  int             `json:"gpus"`
	Hours float64         `json:"hours"`
	Team  string          `json:"team"`
}

type statsSnap struct {
	N       int      `json:"n"`
	Covered int      `json:"covered"`
	Alerts  int      `json:"alerts"`
	Errs    []uint64 `json:"errs"`
}

func bits(vs []float64) []uint64 {
	out := make([]uint64, len(vs))
	for i, v := range vs {
		out[i] = math.Float64bits(v)
	}
	return out
}

func floats(bs []uint64) []float64 {
	out := make([]float64, len(bs))
	for i, b := range bs {
		out[i] = math.Float64frombits(b)
	}
	return out
}

// MarshalBinary writes what the estimator has learned (see estimatorSnap),
// deterministically: the same estimator writes the same bytes. It waits
// for estimates at submission still being simulated (Workers > 1).
func (e *Estimator) MarshalBinary() ([]byte, error) {
	e.init()
	s := estimatorSnap{Format: estimatorFormat, Window: e.Window,
		Res:      ringSnap{Max: e.res.max, Next: e.res.next, Vals: bits(e.res.vals)},
		ResRaw:   ringSnap{Max: e.resRaw.max, Next: e.resRaw.next, Vals: bits(e.resRaw.vals)},
		ResClass: slices.Clone(e.resClass), ResNext: e.resNext, InRes: e.inRes[:],
		Stats: statsSnap{N: e.stats.N, Covered: e.stats.covered, Alerts: e.stats.Alerts, Errs: bits(e.stats.errs)}}
	for i := range e.byClass {
		s.ByClass = append(s.ByClass, bits(e.byClass[i].vals[e.byClass[i].head:]))
	}
	for c := range e.byWait {
		bins := make([]ringSnap, waitBins)
		for i, r := range e.byWait[c] {
			bins[i] = ringSnap{Max: r.max, Next: r.next, Vals: bits(r.vals)}
		}
		s.ByWait = append(s.ByWait, bins)
	}
	for id, p := range e.atSubmit {
		s.AtSubmit = append(s.AtSubmit, atSubmitSnap{Task: id, Est: p.get()})
	}
	sort.Slice(s.AtSubmit, func(i, j int) bool { return s.AtSubmit[i].Task < s.AtSubmit[j].Task })
	for _, a := range e.recent {
		s.Recent = append(s.Recent, arrivalSnap{At: a.at, Prio: a.prio, GPUs: a.gpus, Hours: a.hours, Team: a.team})
	}
	var err error
	if s.Pred, err = e.Pred.MarshalBinary(); err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

// UnmarshalBinary replaces what e has learned with what MarshalBinary
// wrote. It refuses another format, another calibration window, and
// anything inconsistent, leaving e as it was.
func (e *Estimator) UnmarshalBinary(b []byte) error {
	e.init()
	var s estimatorSnap
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("estimate: damaged estimator snapshot: %w", err)
	}
	if s.Format != estimatorFormat {
		return fmt.Errorf("estimate: estimator snapshot format %d, this build reads %d", s.Format, estimatorFormat)
	}
	if s.Window != e.Window || s.Res.Max != e.res.max {
		return fmt.Errorf("estimate: estimator snapshot of window %d, this estimator keeps %d", s.Window, e.Window)
	}
	classes := int(domain.Critical) + 1
	bad := func(what string) error { return fmt.Errorf("estimate: damaged estimator snapshot: %s", what) }
	switch {
	case len(s.Res.Vals) > s.Res.Max || s.Res.Next < 0 || s.Res.Next >= max(s.Res.Max, 1) || s.Res.Next != 0 && len(s.Res.Vals) < s.Res.Max:
		return bad("residual ring")
	case len(s.ResClass) != len(s.Res.Vals) || s.ResNext < 0 || s.ResNext >= max(s.Res.Max, 1) || s.ResNext != 0 && len(s.ResClass) < s.Res.Max:
		return bad("residual classes")
	case len(s.ByClass) != classes || len(s.InRes) != classes:
		return bad("classes")
	}
	counts := make([]int, classes)
	for _, c := range s.ResClass {
		if int(c) >= classes || c < -1 {
			return bad("a residual's class")
		}
		if c >= 0 {
			counts[c]++
		}
	}
	if !slices.Equal(counts, s.InRes) {
		return bad("residuals by class")
	}
	rr := s.ResRaw
	if rr.Max != 0 && rr.Max != s.Res.Max || len(rr.Vals) != len(s.Res.Vals) || rr.Next != s.Res.Next {
		return bad("simulated waits of the residuals")
	}
	resRaw := ring{max: rr.Max, next: rr.Next, vals: floats(rr.Vals)}
	resRaw.sorted = slices.Clone(resRaw.vals)
	slices.Sort(resRaw.sorted)
	if len(s.ByWait) != classes {
		return bad("bins of simulated wait")
	}
	var byWait [domain.Critical + 1][waitBins]ring
	for c, bins := range s.ByWait {
		if len(bins) != waitBins {
			return bad("bins of simulated wait")
		}
		for i, rs := range bins {
			if rs.Max < 0 || len(rs.Vals) > rs.Max || rs.Next < 0 || rs.Next >= max(rs.Max, 1) || rs.Next != 0 && len(rs.Vals) < rs.Max {
				return bad("a bin of simulated wait")
			}
			r := ring{max: rs.Max, next: rs.Next, vals: floats(rs.Vals)}
			r.sorted = slices.Clone(r.vals)
			slices.Sort(r.sorted)
			byWait[c][i] = r
		}
	}
	pred := NewPredictor(e.Pred.window)
	pred.Exact, pred.PriorRuns = e.Pred.Exact, e.Pred.PriorRuns
	if err := pred.UnmarshalBinary(s.Pred); err != nil {
		return err
	}
	res := ring{max: s.Res.Max, next: s.Res.Next, vals: floats(s.Res.Vals)}
	res.sorted = slices.Clone(res.vals)
	slices.Sort(res.sorted)
	var byClass [domain.Critical + 1]window
	for i, vs := range s.ByClass {
		w := window{vals: floats(vs)}
		w.sorted = slices.Clone(w.vals)
		slices.Sort(w.sorted)
		byClass[i] = w
	}
	atSubmit := make(map[string]*pending, len(s.AtSubmit))
	for _, a := range s.AtSubmit {
		atSubmit[a.Task] = &pending{est: a.Est}
	}
	var recent []arrival
	for _, a := range s.Recent {
		recent = append(recent, arrival{at: a.At, prio: a.Prio, gpus: a.GPUs, hours: a.Hours, team: a.Team})
	}
	e.res, e.byClass, e.resClass, e.resNext, e.byWait, e.resRaw = res, byClass, slices.Clone(s.ResClass), s.ResNext, byWait, resRaw
	copy(e.inRes[:], s.InRes)
	e.atSubmit, e.recent, e.Pred = atSubmit, recent, pred
	e.stats = Stats{N: s.Stats.N, covered: s.Stats.Covered, Alerts: s.Stats.Alerts, errs: floats(s.Stats.Errs)}
	return nil
}

// init sets the window defaults Observe sets on its first record, so that
// a snapshot taken or loaded before any record agrees with one after.
func (e *Estimator) init() {
	if e.res.max == 0 {
		if e.Window <= 0 {
			e.Window = DefaultWindow
		}
		e.res.max = e.Window
	}
}
