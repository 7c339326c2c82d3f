package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/trace"
)

// EstimateModel turns a job's real duration into the user's estimate.
type EstimateModel struct {
	Exact     bool    // the estimate is the real duration
	Mu, Sigma float64 // lognormal: duration × e^N(Mu, Sigma)
	Seed      uint64
}

// DefaultEstimateModel is the standard scenario's: users overestimate by
// e^0.7 ≈ 2× at the median, with a wide spread.
const DefaultEstimateModel = "lognormal:mu=0.7,sigma=1,seed=1"

// ParseEstimateModel reads "exact" or "lognormal:mu=M,sigma=S,seed=N"
// (every key optional: mu 0, sigma 1, seed 1).
func ParseEstimateModel(s string) (EstimateModel, error) {
	s = strings.TrimSpace(s)
	if s == "exact" {
		return EstimateModel{Exact: true}, nil
	}
	kind, rest, _ := strings.Cut(s, ":")
	if kind != "lognormal" {
		return EstimateModel{}, fmt.Errorf("%q: want exact or lognormal:mu=M,sigma=S,seed=N", s)
	}
	m := EstimateModel{Sigma: 1, Seed: 1}
	kv, err := keyValues(rest)
	if err != nil {
		return EstimateModel{}, err
	}
	for _, k := range sortedKeys(kv) {
		v := kv[k]
		switch k {
		case "mu":
			m.Mu, err = finite(k, v)
		case "sigma":
			m.Sigma, err = finite(k, v)
			if err == nil && m.Sigma < 0 {
				err = fmt.Errorf("sigma must be ≥ 0 (got %s)", v)
			}
		case "seed":
			m.Seed, err = strconv.ParseUint(v, 10, 64)
			if err != nil {
				err = fmt.Errorf("seed must be a non-negative integer (got %q)", v)
			}
		default:
			err = fmt.Errorf("unknown key %q (want mu, sigma, seed)", k)
		}
		if err != nil {
			return EstimateModel{}, err
		}
	}
	return m, nil
}

// String is the canonical form ParseEstimateModel reads back.
func (m EstimateModel) String() string {
	if m.Exact {
		return "exact"
	}
	return fmt.Sprintf("lognormal:mu=%s,sigma=%s,seed=%d", num(m.Mu), num(m.Sigma), m.Seed)
}

// ClassMix draws each task's class; the zero value makes every task MEDIUM.
type ClassMix struct {
	Shares map[domain.Priority]float64 // sum to 1
	Seed   uint64
}

// ParseClassMix reads "" (all MEDIUM) or
// "critical=0.05,high=0.15,medium=0.6,low=0.2,seed=2": the shares of the
// classes named (missing ones get none) must add up to 1.
func ParseClassMix(s string) (ClassMix, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "medium" {
		return ClassMix{}, nil
	}
	kv, err := keyValues(s)
	if err != nil {
		return ClassMix{}, err
	}
	m := ClassMix{Shares: map[domain.Priority]float64{}, Seed: 1}
	sum := 0.0
	for _, k := range sortedKeys(kv) {
		v := kv[k]
		if k == "seed" {
			if m.Seed, err = strconv.ParseUint(v, 10, 64); err != nil {
				return ClassMix{}, fmt.Errorf("seed must be a non-negative integer (got %q)", v)
			}
			continue
		}
		p, err := domain.ParsePriority(k)
		if err != nil {
			return ClassMix{}, fmt.Errorf("unknown key %q (want critical, high, medium, low, seed)", k)
		}
		f, err := finite(k, v)
		if err != nil {
			return ClassMix{}, err
		}
		if f < 0 || f > 1 {
			return ClassMix{}, fmt.Errorf("%s must be between 0 and 1 (got %s)", k, v)
		}
		m.Shares[p] = f
		sum += f
	}
	if math.Abs(sum-1) > 1e-9 {
		return ClassMix{}, fmt.Errorf("class shares add up to %s, want 1", num(sum))
	}
	return m, nil
}

// String is the canonical form ("medium" when every task is MEDIUM).
func (m ClassMix) String() string {
	if len(m.Shares) == 0 {
		return "medium"
	}
	var parts []string
	for _, p := range domain.Priorities {
		if f, ok := m.Shares[p]; ok {
			parts = append(parts, p.String()+"="+num(f))
		}
	}
	return strings.Join(parts, ",") + fmt.Sprintf(",seed=%d", m.Seed)
}

// draw picks a class from u in [0, 1): classes highest first, cumulative.
func (m ClassMix) draw(u float64) domain.Priority {
	if len(m.Shares) == 0 {
		return domain.Medium
	}
	acc := 0.0
	last := domain.Medium
	for _, p := range domain.Priorities {
		f, ok := m.Shares[p]
		if !ok || f == 0 {
			continue
		}
		acc += f
		last = p
		if u < acc {
			return p
		}
	}
	return last
}

// Task is a trace job as the simulation submits it: the trace's facts
// plus the model's estimate, class and team.
type Task struct {
	ID       string
	VC       string
	Team     string
	Priority domain.Priority
	Submit   time.Duration // offset from the trace start
	Duration time.Duration // real run time: only the agents and sjf-oracle read it
	GPUs     int
	Hours    float64 // the user's estimate
	// Fixed: not preemptible (MarkPreemptible); every task is by default.
	Fixed bool
}

// MarkPreemptible keeps a fraction of the tasks preemptible and marks the
// others Fixed: one draw per task, in order, from its own PCG(seed), so it
// shifts no other draw. A fraction of 1 keeps every task preemptible.
func MarkPreemptible(tasks []Task, fraction float64, seed uint64) {
	if fraction >= 1 {
		return
	}
	r := rand.New(rand.NewPCG(seed, 0x9ee3b7))
	for i := range tasks {
		tasks[i].Fixed = r.Float64() >= fraction
	}
}

// minEstimate is the smallest user estimate the model gives.
const minEstimate = time.Minute

// SingleTeam is every task's team without teams by VC.
const SingleTeam = "trace"

// Prepare models the trace's jobs as tasks for a cluster of totalGPUs:
// estimates, classes and teams (by VC when byVC). A job's own Class,
// Estimate and NotPreemptible (an export of a gpuq log has them; the
// published traces do not) are kept instead of the model's draws. Jobs asking for more
// GPUs than the cluster has are left out and counted. Order is kept.
func Prepare(jobs []trace.Job, totalGPUs int, em EstimateModel, cm ClassMix, byVC bool) (tasks []Task, unplaceable int) {
	est := rand.New(rand.NewPCG(em.Seed, 0x5eed0e57))
	cls := rand.New(rand.NewPCG(cm.Seed, 0xc1a55))
	tasks = make([]Task, 0, len(jobs))
	for _, j := range jobs {
		// One draw of each kind per job, kept or not, so that dropping a job
		// does not shift the draws of the others.
		z := est.NormFloat64()
		u := cls.Float64()
		if j.GPUs > totalGPUs || j.GPUs <= 0 {
			unplaceable++
			continue
		}
		secs := j.Duration.Seconds()
		if !em.Exact {
			secs *= math.Exp(em.Mu + em.Sigma*z)
		}
		secs = math.Max(secs, minEstimate.Seconds())
		team := SingleTeam
		if byVC && j.VC != "" {
			team = j.VC
		}
		// What the trace records itself (an export of a gpuq log) wins
		// over the model.
		class := cm.draw(u)
		if p, err := domain.ParsePriority(j.Class); j.Class != "" && err == nil {
			class = p
		}
		if j.Estimate > 0 {
			secs = j.Estimate.Seconds()
		}
		tasks = append(tasks, Task{ID: j.ID, VC: j.VC, Team: team, Priority: class, Submit: j.Submit,
			Duration: j.Duration, GPUs: j.GPUs, Hours: secs / 3600, Fixed: j.NotPreemptible})
	}
	return tasks, unplaceable
}

// TeamsByVC gives each VC a guarantee: its share of the VC node counts
// (e.g. vcs.csv). VCs with no nodes get none.
func TeamsByVC(vcNodes map[string]int) policy.Teams {
	total := 0
	for _, n := range vcNodes {
		total += n
	}
	ts := policy.Teams{}
	if total == 0 {
		return ts
	}
	for _, vc := range sortedKeys(vcNodes) {
		if n := vcNodes[vc]; n > 0 {
			// Floor at 1e-12 so that rounding never makes the sum exceed 1.
			ts[vc] = policy.Guarantee{Share: math.Floor(float64(n)/float64(total)*1e12) / 1e12}
		}
	}
	return ts
}

func keyValues(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%q: want key=value", part)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("key %q given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

func finite(k, v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s must be a number (got %q)", k, v)
	}
	return f, nil
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
