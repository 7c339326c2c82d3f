package sim

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/trace"
)

// Policy names, for Config.Policies and the result.
const (
	FIFOStrict = "fifo-strict" // baseline: Helios FIFO, strict head-of-line blocking
	SJFOracle  = "sjf-oracle"  // baseline: Helios SJF on real durations
	GPUQ       = "gpuq"        // the gpuq policy as configured (default: FIFO within class, EASY backfill)
	GPUQSPF    = "gpuq-spf"    // gpuq with shortest-predicted within class and its aging guard
	// GPUQNewest is gpuq choosing the most recently started victims
	// (policy.Newest, Kueue's choice) rather than the least work lost.
	GPUQNewest = "gpuq-newest-victims"
)

// Policies lists the policy names Run knows.
func Policies() []string { return []string{FIFOStrict, SJFOracle, GPUQ, GPUQSPF, GPUQNewest} }

// Config is one simulation.
type Config struct {
	Nodes, GPUsPerNode int
	// Options are the gpuq policy's (gpuq-spf: the same with
	// WithinClass = shortest-predicted). Teams come in Options.Teams.
	Options policy.Options
	// Policies to run, by name (see Policies).
	Policies []string
	// Estimates: under the gpuq policy, estimate every submission's start
	// three ways and judge them (needs GPUQ in Policies).
	Estimates bool
	// Epoch is virtual time zero (the trace's first submission).
	Epoch time.Time
	// Parallel runs up to this many policies at once (default GOMAXPROCS);
	// the result does not depend on it.
	Parallel int
	// EstimateWindow is the gpuq estimator's forward-simulation window
	// (estimate.Estimator.Coarse): 0 the default, negative one pass per event.
	EstimateWindow float64
	// EstimateWorkers runs the gpuq estimator's forward simulations on up
	// to this many goroutines (estimate.Estimator.Workers; default
	// GOMAXPROCS); the result does not depend on it.
	EstimateWorkers int
	// CheckpointEvery is the agents' checkpoint model: 0 (the default), a
	// task asked to yield checkpoints at once and loses no work; > 0, every
	// running task checkpoints each CheckpointEvery of its run, and a
	// preempted one runs on for its grace (simGrace) and exits, losing the
	// work since its last checkpoint and the grace.
	CheckpointEvery time.Duration
	// PriorRuns is the run-time predictors' prior pseudo-count
	// (estimate.Predictor.PriorRuns): 0 the default
	// (estimate.DefaultPriorRuns), negative none (the learned ratio alone
	// once a run is learned).
	PriorRuns float64
	// PolicyPriorRuns, when not 0, is the policy's predictor's PriorRuns
	// instead (as PriorRuns: negative none): with it fixed, the judged
	// tasks are the same whatever the estimator's prior, so that a sweep
	// of PriorRuns measures the estimates alone.
	PolicyPriorRuns float64
	// Alarms: under estimates, measure the advisor's alarm on the gpuq run
	// (estimates.gpuq.alarms; alarms.go).
	Alarms bool
	// Faults: each is injected in one more gpuq run with estimates and
	// alarms, judged against the gpuq run without it (fault.go); implies
	// Alarms.
	Faults []Fault
	// ProgressModel is the jobs' progress reports (progress.go; the zero
	// value: none).
	ProgressModel ProgressModel
	// PolicyNoProgress: the gpuq policy's predictor ignores the progress
	// reports (estimate.Predictor.NoProgress), the advisor's reads them:
	// the schedule is the one without reports, so that the estimates'
	// change is measured on the same judged tasks.
	PolicyNoProgress bool
	// Progress, when set, is called from the policies' goroutines at every
	// hundredth of the submissions (and at the end), for long runs.
	Progress func(policy string, submitted, total int)
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Nodes < 1 {
		return fmt.Errorf("nodes must be ≥ 1 (got %d)", c.Nodes)
	}
	if c.GPUsPerNode < 1 {
		return fmt.Errorf("gpus-per-node must be ≥ 1 (got %d)", c.GPUsPerNode)
	}
	if len(c.Policies) == 0 {
		return fmt.Errorf("no policy to run")
	}
	if c.CheckpointEvery < 0 {
		return fmt.Errorf("checkpoint-every must be ≥ 0 (got %s)", c.CheckpointEvery)
	}
	if (c.Alarms || len(c.Faults) > 0) && (!c.Estimates || !slices.Contains(c.Policies, GPUQ)) {
		return fmt.Errorf("alarms and faults are measured on the gpuq run with estimates (want gpuq in the policies, with estimates)")
	}
	for _, f := range c.Faults {
		if err := f.validate(c.Nodes); err != nil {
			return err
		}
	}
	if m := c.ProgressModel; !(m.Share >= 0 && m.Share <= 1) || !(m.Early >= 0 && m.Early <= 1) || m.Every < 0 {
		return fmt.Errorf("progress-model: share and early must be between 0 and 1, every ≥ 0 (got %+v)", m)
	}
	seen := map[string]bool{}
	for _, p := range c.Policies {
		if !slices.Contains(Policies(), p) {
			return fmt.Errorf("unknown policy %q (want %s)", p, strings.Join(Policies(), ", "))
		}
		if seen[p] {
			return fmt.Errorf("policy %q given twice", p)
		}
		seen[p] = true
	}
	return c.Options.Validate()
}

// Result is the deterministic outcome of a run: encode it with
// encoding/json (map keys come out sorted) and the bytes are the same for
// the same trace and options.
type Result struct {
	Scenario  Scenario                   `json:"scenario"`
	Jobs      int                        `json:"jobs"`
	Policies  map[string]Metrics         `json:"policies"`
	Estimates map[string]EstimateMetrics `json:"estimates,omitempty"`
}

// Scenario describes what was simulated.
type Scenario struct {
	Trace       string `json:"trace"`
	Format      string `json:"format"`
	Nodes       int    `json:"nodes"`
	GPUsPerNode int    `json:"gpus_per_node"`
	TotalGPUs   int    `json:"total_gpus"`
	Teams       string `json:"teams"`
	// Policy, WithinClass, Backfill, AgingTauS and MaxWaitS are the gpuq policy's
	// options (gpuq-spf: shortest-predicted within class); Run fills them.
	Policy      string  `json:"policy"`
	WithinClass string  `json:"within_class"`
	Backfill    string  `json:"backfill"`
	AgingTauS   float64 `json:"aging_tau_s"`
	MaxWaitS    float64 `json:"max_wait_s"`
	// ClassAgingS and Victims are the gpuq policy's starvation guard across
	// classes and choice of victims (gpuq-newest-victims: newest); omitted
	// when off and the default, as before they existed.
	ClassAgingS float64 `json:"class_aging_s,omitempty"`
	// StarvationWaitS is the gpuq policy's starvation bound (omitted when
	// off, as before it existed).
	StarvationWaitS float64 `json:"starvation_wait_s,omitempty"`
	// PreemptPatienceS is the gpuq policy's preemption patience (omitted
	// when off, as before it existed).
	PreemptPatienceS float64 `json:"preempt_patience_s,omitempty"`
	Victims          string  `json:"victims,omitempty"`
	EstimateModel    string  `json:"estimate_model"`
	ClassMix         string  `json:"class_mix"`
	// Preemptible and Checkpoint state the agents' model; Run fills them.
	Preemptible string  `json:"preemptible"`
	Checkpoint  string  `json:"checkpoint"`
	Limit       int     `json:"limit,omitempty"`
	TraceJobs   int     `json:"trace_jobs"`
	Unplaceable int     `json:"unplaceable"`
	SpanS       float64 `json:"span_s"`
	OfferedLoad float64 `json:"offered_load"`

	// ProgressModel states the jobs' progress reports (omitted when none
	// report, as before it existed); Run fills it.
	ProgressModel string `json:"progress_model,omitempty"`

	// Window is the slice of the trace simulated (gpuq sim --from/--until,
	// --split): its jobs only, on an empty cluster; omitted for the whole.
	Window *trace.Window `json:"window,omitempty"`
}

// Report is a Result with what plots and people need beside it.
type Report struct {
	Result Result
	// QueueLength is each policy's queue length over time (a step function).
	QueueLength map[string][]Point
	// Waits is each policy's queueing delay per task, in task order.
	Waits map[string][]time.Duration
	// WaitEstimates are the gpuq estimator's P50 and P90 at submission
	// against the actual wait, for the judged tasks.
	WaitEstimates []WaitEstimate
	Timings       Timings
}

// Timings is wall time (measurement only, never in the Result).
type Timings struct {
	Policies  map[string]time.Duration
	Estimates EstimateTimings
}

// Run simulates the tasks (from Prepare, in submit order) under every
// configured policy. sc is copied into the result as given, with the
// cluster's figures filled in.
func Run(ctx context.Context, cfg Config, sc Scenario, tasks []Task) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("no job to simulate")
	}
	for i := 1; i < len(tasks); i++ {
		if tasks[i].Submit < tasks[i-1].Submit {
			return nil, fmt.Errorf("tasks not in submit order at %s", tasks[i].ID)
		}
	}
	total := cfg.Nodes * cfg.GPUsPerNode
	sc.Nodes, sc.GPUsPerNode, sc.TotalGPUs = cfg.Nodes, cfg.GPUsPerNode, total
	o := policy.New(cfg.Options).Options()
	sc.Policy, sc.WithinClass, sc.Backfill, sc.AgingTauS, sc.MaxWaitS = o.Preemption, o.WithinClass, o.Backfill, o.AgingTau.Seconds(), o.MaxWait.Seconds()
	sc.ClassAgingS = o.ClassAging.Seconds()
	sc.StarvationWaitS = o.StarvationWait.Seconds()
	sc.PreemptPatienceS = o.PreemptPatience.Seconds()
	if sc.Preemptible == "" {
		sc.Preemptible = "all"
	}
	sc.Checkpoint = "at once on preemption request, no work lost"
	if cfg.CheckpointEvery > 0 {
		sc.Checkpoint = fmt.Sprintf("every %s of run; a preempted task runs on for its grace (%s) and loses the work since its last checkpoint", cfg.CheckpointEvery, simGrace)
	}
	if o.Victims != policy.LeastLost {
		sc.Victims = o.Victims
	}
	sc.ProgressModel = cfg.ProgressModel.String()
	if sc.ProgressModel != "" && cfg.PolicyNoProgress {
		sc.ProgressModel += "; the gpuq policy ignores the reports"
	}
	sc.SpanS = (tasks[len(tasks)-1].Submit - tasks[0].Submit).Seconds()
	if sc.SpanS > 0 {
		gs := 0.0
		for _, t := range tasks {
			gs += float64(t.GPUs) * t.Duration.Seconds()
		}
		sc.OfferedLoad = round(gs/(float64(total)*sc.SpanS), 4)
	}

	type done struct {
		out  *outcome
		est  *estimating
		took time.Duration
		err  error
	}
	results := make([]done, len(cfg.Policies))
	par := cfg.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	// Start the most expensive runs first.
	order := slices.Clone(cfg.Policies)
	slices.SortStableFunc(order, func(a, b string) int { return cost(cfg, a) - cost(cfg, b) })
	faulted := make([]done, len(cfg.Faults))
	faultAl := make([]*alarming, len(cfg.Faults))
	for k, f := range cfg.Faults {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			t0 := time.Now()
			d := newDriver(ctx, cfg, policy.New(cfg.Options), tasks, true)
			defer d.est.est.Close()
			d.alarms = newAlarming(len(tasks))
			d.setFault(f, cfg.Nodes, cfg.GPUsPerNode)
			if cfg.Progress != nil {
				d.progress = func(n int) { cfg.Progress(GPUQ+" --fault "+f.Spec, n, len(tasks)) }
			}
			out, err := d.simulate(cfg.Nodes, cfg.GPUsPerNode)
			faulted[k], faultAl[k] = done{out, d.est, time.Since(t0), err}, d.alarms
		}()
	}
	for _, name := range order {
		k := slices.Index(cfg.Policies, name)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			t0 := time.Now()
			out, est, err := runPolicy(ctx, cfg, name, tasks)
			results[k] = done{out, est, time.Since(t0), err}
		}()
	}
	wg.Wait()

	rep := &Report{Result: Result{Scenario: sc, Jobs: len(tasks), Policies: map[string]Metrics{}},
		QueueLength: map[string][]Point{}, Waits: map[string][]time.Duration{}, Timings: Timings{Policies: map[string]time.Duration{}}}
	for k, name := range cfg.Policies {
		r := results[k]
		if r.err != nil {
			return nil, fmt.Errorf("%s: %w", name, r.err)
		}
		m := metrics(tasks, r.out, total)
		m.ByClass = byClass(tasks, r.out)
		rep.Result.Policies[name] = m
		rep.QueueLength[name] = r.out.queueLen
		waits := make([]time.Duration, len(tasks))
		for i, t := range tasks {
			waits[i] = r.out.start[i] - t.Submit
		}
		rep.Waits[name] = waits
		rep.Timings.Policies[name] = r.took
		if r.est != nil {
			rep.Result.Estimates, rep.WaitEstimates = r.est.judge(tasks, r.out)
			rep.Timings.Estimates = r.est.timing
			if r.est.alarms != nil {
				base := alarmRun{tasks: tasks, out: r.out, est: r.est, al: r.est.alarms}
				am := base.metrics()
				for k, f := range cfg.Faults {
					fr := faulted[k]
					if fr.err != nil {
						return nil, fmt.Errorf("gpuq --fault %s: %w", f.Spec, fr.err)
					}
					am.Faults = append(am.Faults, judgeFault(f, base, alarmRun{tasks: tasks, out: fr.out, est: fr.est, al: faultAl[k]}))
					rep.Timings.Policies[GPUQ+" --fault "+f.Spec] = fr.took
				}
				m := rep.Result.Estimates[EstGPUQ]
				m.Alarms = am
				rep.Result.Estimates[EstGPUQ] = m
			}
		}
	}
	return rep, nil
}

// cost orders runs, most expensive first.
func cost(cfg Config, name string) int {
	switch name {
	case GPUQ:
		if cfg.Estimates {
			return 0
		}
		return 1
	case GPUQSPF, GPUQNewest:
		return 1
	}
	return 2
}

func runPolicy(ctx context.Context, cfg Config, name string, tasks []Task) (*outcome, *estimating, error) {
	switch name {
	case FIFOStrict, SJFOracle:
		out := baselineRun(tasks, cfg.Nodes, cfg.GPUsPerNode, name == SJFOracle)
		if cfg.Progress != nil {
			cfg.Progress(name, len(tasks), len(tasks))
		}
		return out, nil, nil
	}
	opts := cfg.Options
	switch name {
	case GPUQSPF:
		opts.WithinClass = policy.ShortestPredicted
	case GPUQNewest:
		opts.Victims = policy.Newest
	}
	d := newDriver(ctx, cfg, policy.New(opts), tasks, name == GPUQ && cfg.Estimates)
	if d.est != nil {
		defer d.est.est.Close()
		if cfg.Alarms || len(cfg.Faults) > 0 {
			d.alarms = newAlarming(len(tasks))
			d.est.alarms = d.alarms
		}
	}
	if cfg.Progress != nil {
		d.progress = func(n int) { cfg.Progress(name, n, len(tasks)) }
	}
	out, err := d.simulate(cfg.Nodes, cfg.GPUsPerNode)
	return out, d.est, err
}
