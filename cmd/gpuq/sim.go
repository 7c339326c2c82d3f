package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/audit"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/policy/policyflag"
	"github.com/gpuq/gpuq/pkg/sim"
	"github.com/gpuq/gpuq/pkg/trace"
)

type simFlags struct {
	trace, format, vcs     string
	workload               string
	alarms                 bool     // --alarms (simalarm.go)
	faults                 []string // --fault
	nodes                  []int
	perNode, limit         int
	teams, compare         string
	pol                    policyFlags
	ckptEvery              time.Duration
	preemptible, priorRuns float64
	policyPriorRuns        float64
	estModel, classMix     string
	estimates, json, times bool
	progress               bool
	plot                   string
	progressModel          string
	policyProgress         bool
	cpuProfile             string         // --cpuprofile
	export                 string         // --export
	window                 simWindowFlags // --from, --until, --split (simwindow.go)
}

func newSim() *cobra.Command {
	var f simFlags
	c := &cobra.Command{
		Use:   "sim (--trace FILE --format philly|alibaba-openb|audit-export | --workload synthetic:jobs=N,seed=S) --nodes N[,N…] [--compare fifo-strict,sjf-oracle,gpuq,gpuq-spf]",
		Short: "Replay a real cluster trace, your own log or a synthetic workload in virtual time under gpuq and baseline policies; compare JCT, queueing delay and wait estimates",
		Long: `sim replays a GPU-cluster trace (shared/traces) in virtual time on a
simulated cluster of --nodes × --gpus-per-node GPUs. The gpuq policies run
the real scheduler step and advisor over an in-memory event log; fifo-strict
and sjf-oracle are the HeliosArtifact baselines (strict head-of-line
blocking, consolidate placement; sjf-oracle knows real durations).

The trace has no user estimates, classes or teams; the model supplies them,
seeded: --estimate-model (estimate = real duration × e^N(mu, sigma)),
--class-mix (all MEDIUM by default), --teams vc (each VC a team guaranteed
its share of vcs.csv). By default every task is preemptible and a
preempted task checkpoints at once (no work lost); the realistic model is
--checkpoint-every (each task checkpoints at that interval of its run; a
preempted one runs on for its grace, 120 s, and loses the work since its
last checkpoint) with --preemptible (the share of preemptible tasks).
The policy flags (--policy, --within-class, --backfill, --max-wait,
--aging-tau, --class-aging, --starvation-wait, --preempt-patience,
--victims) are the scheduler's, with its defaults; they configure the gpuq
policy, and gpuq-spf (shortest-predicted within class) and
gpuq-newest-victims (newest victims) override one each.
--victims chooses among victims of the same classes (least-lost, the
policy's, or newest, Kueue's); --compare gpuq-newest-victims runs gpuq
with newest beside it. --starvation-wait is the starvation bound, the
scheduler's and the advisor's flag of the same name and default (96h):
under fifo within class a task that has waited that long without a start
goes ahead of every task below CRITICAL, across the teams' tiers and the
classes, in submit order; until then class order and the guarantees hold.
--class-aging (off by default) is an ageing across classes: each class
above LOW counts as submitted that much earlier per class.
--preempt-patience (the scheduler's flag; off by default, 30m measured): a
task below CRITICAL preempts only once its victims would lose at most its
wait × its GPUs since their checkpoints, or once it has waited that long
(0: at once).

The JSON reports per policy the preemptions, lost_gpu_hours, and by_class
(n, avg_queue_s, p95_queue_s, max_queue_s) when the tasks are of several
classes; the estimates are judged by class too. Same input, same output,
byte for byte.

--workload synthetic:jobs=N,seed=S[,load=L,gpus=G,mix=philly|alibaba]
generates a workload shaped like a published trace instead (no trace
file needed): power-of-two GPU counts at the trace's frequencies, run
times from its quantiles by size (heavy-tailed), arrivals following its
hour-of-day and weekday profile, and, for philly, its VCs (--teams vc
guarantees them their vcs.csv shares). load (default 0.82, the standard
scenario's) is the offered load on gpus GPUs (default: the smallest
cluster of --nodes). --trace FILE --format audit-export replays an export
of your own log (gpuq audit export): every task that ran and ended, at
its submit time, for the work it did, with its own class, team, estimate
and preemptibility.

--progress-model share=S,early=E[,every=D],seed=N models the jobs'
progress reports (a task socket's POST /v1/progress): share of the tasks
report the fraction of their planned total done, every D of their run
(default 10m); early of those end before their planned total, as failed
and killed runs do (they plan their real run over a share drawn in
[0.1, 0.9], report against that plan, and end at their real run). The
scheduler and the advisor read the reports from the log, through the one
run-time predictor. share=0 is the same run, byte for byte, as no model.

--nodes 8,16,32 sweeps cluster sizes in one run, the same workload on
each: the JSON is {"sweep": [{"nodes", and the result of that size}…]},
smallest first, and --plot draws queueing delay and JCT against size.

` + simWindowHelp,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runSim(c, f) },
	}
	fl := c.Flags()
	fl.StringVar(&f.trace, "trace", "", "trace file (e.g. ../shared/traces/philly/jobs-2017-10-11.csv)")
	fl.StringVar(&f.format, "format", "", "trace format: "+strings.Join(append(trace.Formats(), sim.FormatExport), ", ")+" (an export of the live log, gpuq audit export)")
	fl.StringVar(&f.workload, "workload", "", "a generated workload instead of --trace: synthetic:jobs=N,seed=S[,load=L,gpus=G,mix=philly|alibaba]")
	fl.IntSliceVar(&f.nodes, "nodes", nil, "simulated nodes; several, comma-separated, sweep the cluster sizes (e.g. 8,16,32)")
	fl.IntVar(&f.perNode, "gpus-per-node", 8, "GPUs per simulated node")
	fl.StringVar(&f.teams, "teams", "", `"vc": each VC is a team guaranteed its share of the VC node counts; "" (default): one team, no guarantees`)
	fl.StringVar(&f.vcs, "vcs", "", "VC node counts for --teams vc (default: vcs.csv beside the trace; Philly's for a synthetic workload)")
	fl.StringVar(&f.compare, "compare", sim.GPUQ, "policies to run, comma-separated: "+strings.Join(sim.Policies(), ", "))
	f.pol.v = policyflag.Bind(policyflag.Pflag(fl), policyflag.WithoutTeams()) // gpuq's policy; gpuq-spf and gpuq-newest-victims override one option each
	fl.DurationVar(&f.ckptEvery, "checkpoint-every", 0, "agents' model: each task checkpoints at this interval of its run, and a preemption loses the work since the last checkpoint plus the grace (0, the default: checkpoint at once on preemption, no work lost)")
	fl.Float64Var(&f.preemptible, "preemptible", 1, "share of the tasks that are preemptible (seeded draw, one per task; 1: all)")
	fl.Float64Var(&f.priorRuns, "prior-runs", estimate.DefaultPriorRuns, "run-time predictions: the weight of the user's own estimate against the learned ratio, in runs (the learned ratio weighs n/(n+prior-runs) after n runs; 0: the learned ratio alone once a run is learned)")
	fl.Float64Var(&f.policyPriorRuns, "policy-prior-runs", -1, "the policy's predictions alone: --prior-runs for the gpuq policy's predictor (-1, the default: --prior-runs), to measure the estimates on the same schedule")
	fl.StringVar(&f.estModel, "estimate-model", sim.DefaultEstimateModel, `users' run-time estimates: "exact" or lognormal:mu=M,sigma=S,seed=N`)
	fl.StringVar(&f.classMix, "class-mix", "", `task classes, e.g. critical=0.05,high=0.15,medium=0.6,low=0.2,seed=1 (default: all medium)`)
	fl.BoolVar(&f.estimates, "estimates", true, "under gpuq, estimate every submission's start (gpuq advisor, slurm-backfill, seed-formula) and judge them")
	fl.StringVar(&f.plot, "plot", "", "write SVG charts into this directory")
	fl.BoolVar(&f.json, "json", false, "print JSON")
	fl.IntVar(&f.limit, "limit", 0, "simulate only the first N jobs of the trace, in submit order (quick runs)")
	fl.BoolVar(&f.times, "timings", false, "print wall and CPU times to stderr: the load, each policy's run, and where the gpuq run's time goes")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the simulation to this file (go tool pprof)")
	fl.StringVar(&f.export, "export", "", "write the gpuq policy's simulated log to this file as gpuq audit export writes it (JSON Lines): gpuq audit verify --file checks it, gpuq sim --format audit-export replays it; one cluster size, not with --split")
	fl.BoolVar(&f.progress, "progress", false, "report each policy's progress on stderr")
	fl.BoolVar(&f.alarms, "alarms", false, "measure the advisor's alarm on the gpuq run (estimates.gpuq.alarms: rate, the share of judged tasks alarmed; on a healthy run every alarm is false)")
	fl.StringArrayVar(&f.faults, "fault", nil, "inject a fault in one more gpuq run, judged against the run without it (implies --alarms; repeatable): stall@OFFSET+DURATION (the scheduler decides nothing, e.g. stall@240h+3h) or nodes-down@OFFSET+DURATION:N (N nodes lost, their tasks requeued, e.g. nodes-down@240h+6h:8); OFFSET from the first submission")
	fl.BoolVar(&f.policyProgress, "policy-progress", true, "with --progress-model, the gpuq policy's predictor reads the reports as the advisor's does (false: the policy ignores them, so that the estimates are measured on the schedule without reports)")
	fl.StringVar(&f.progressModel, "progress-model", "", `jobs' progress reports: share=S,early=E[,every=D][,seed=N] — S of the tasks report the fraction done every D of run (default 10m), E of those end before their planned total (default: none report)`)
	// The held-out windows (simwindow.go).
	fl.StringVar(&f.window.from, "from", "", "simulate only the jobs submitted from this time on, on an empty cluster: "+trace.BoundRule)
	fl.StringVar(&f.window.until, "until", "", "simulate only the jobs submitted before this time, on an empty cluster: "+trace.BoundRule)
	fl.StringVar(&f.window.split, "split", "", "simulate each part of the trace alone, then the whole: "+trace.SplitRule)
	return c
}

// simGCPercent is gpuq sim's garbage-collector target (GOGC), unless
// GOGC is set: a simulation keeps a few hundred MiB live and allocates
// fast, and at the default of 100 the collector took a large share of its
// CPU; at 400 the 20,000-job slice of the standard scenario used 17 %
// less CPU for 2.3× the memory (docs/performance.md). Unless GOMEMLIMIT
// is set, a soft limit of simMemoryLimit makes the collector work harder
// before a run's heap grows past it (the mix scenario peaked at 3.2 GB
// without it).
const (
	simGCPercent   = 400
	simMemoryLimit = 2 << 30
)

func runSim(c *cobra.Command, f simFlags) error {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(simGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(simMemoryLimit)
	}
	// 1. Check the flags.
	var syn trace.Synthetic
	if f.workload != "" {
		var err error
		if syn, err = trace.ParseSynthetic(f.workload); err != nil {
			return invalid("workload", err.Error())
		}
	}
	fromLog := f.format == sim.FormatExport
	switch {
	case f.trace != "" && f.workload != "":
		return invalid("workload", "give --trace or --workload, not both")
	case f.workload != "" && f.format != "":
		return invalid("format", "is for --trace; a --workload has its own")
	case f.trace == "" && f.workload == "":
		return invalid("trace", "is required: a trace file (or --workload synthetic:jobs=N,seed=S)")
	case f.workload == "" && f.format != trace.FormatPhilly && f.format != trace.FormatAlibabaOpenB && !fromLog:
		return invalid("format", "must be "+strings.Join(append(trace.Formats(), sim.FormatExport), ", "))
	case len(f.nodes) == 0:
		return invalid("nodes", "is required: the simulated nodes (e.g. 16, or 8,16,32 to sweep)")
	case f.perNode < 1:
		return invalid("gpus-per-node", fmt.Sprintf("must be ≥ 1 (got %d)", f.perNode))
	case f.limit < 0:
		return invalid("limit", fmt.Sprintf("must be ≥ 0 (got %d)", f.limit))
	case f.teams != "" && f.teams != "vc":
		return invalid("teams", `must be "vc" or empty`)
	case f.teams == "vc" && f.workload == "" && f.format != trace.FormatPhilly && !fromLog:
		return invalid("teams", "vc needs a trace with VCs (philly, audit-export or a synthetic philly mix)")
	case f.teams == "vc" && f.workload != "" && !syn.HasVCs():
		return invalid("teams", "vc needs a workload with VCs: mix=philly")
	case f.ckptEvery < 0:
		return invalid("checkpoint-every", "must be ≥ 0")
	case !(f.priorRuns >= 0) || math.IsInf(f.priorRuns, 0):
		return invalid("prior-runs", fmt.Sprintf("must be a number ≥ 0 (got %g)", f.priorRuns))
	case !(f.policyPriorRuns >= 0 || f.policyPriorRuns == -1) || math.IsInf(f.policyPriorRuns, 0):
		return invalid("policy-prior-runs", fmt.Sprintf("must be a number ≥ 0, or -1 for --prior-runs (got %g)", f.policyPriorRuns))
	case !(f.preemptible >= 0 && f.preemptible <= 1):
		return invalid("preemptible", fmt.Sprintf("must be between 0 and 1 (got %g)", f.preemptible))
	}
	seenNodes := map[int]bool{}
	for _, n := range f.nodes {
		if n < 1 {
			return invalid("nodes", fmt.Sprintf("must be ≥ 1 (got %d)", n))
		}
		if seenNodes[n] {
			return invalid("nodes", fmt.Sprintf("%d given twice", n))
		}
		seenNodes[n] = true
	}
	sizes := slices.Clone(f.nodes)
	slices.Sort(sizes)
	if err := checkSimWindowFlags(f, sizes); err != nil {
		return err
	}
	var export *os.File
	if f.export != "" {
		if len(sizes) > 1 || f.window.split != "" {
			return invalid("export", "writes one run's log: give one --nodes, without --split")
		}
		var err error
		if export, err = os.Create(f.export); err != nil { // before the run, not after it
			return invalid("export", err.Error())
		}
		defer export.Close()
	}
	if fromLog {
		// The log has the tasks' own estimates, classes and
		// preemptibility: the model's flags would be silently ignored.
		for _, fl := range []string{"estimate-model", "class-mix", "preemptible"} {
			if c.Flags().Changed(fl) {
				return invalid(fl, "does not apply to an audit-export: its tasks keep their own estimates, classes and preemptibility")
			}
		}
	}
	var names []string
	for _, p := range strings.Split(f.compare, ",") {
		if p = strings.TrimSpace(p); p != "" {
			names = append(names, p)
		}
	}
	em, err := sim.ParseEstimateModel(f.estModel)
	if err != nil {
		return invalid("estimate-model", err.Error())
	}
	cm, err := sim.ParseClassMix(f.classMix)
	if err != nil {
		return invalid("class-mix", err.Error())
	}
	pm, err := sim.ParseProgressModel(f.progressModel)
	if err != nil {
		return invalid("progress-model", err.Error())
	}
	opts, err := f.pol.v.Options()
	if err != nil {
		return invalid(policyflag.Field(err), err.Error())
	}
	cfg := sim.Config{Nodes: sizes[0], GPUsPerNode: f.perNode, Options: opts, Policies: names, Estimates: f.estimates, CheckpointEvery: f.ckptEvery}
	if cfg.Alarms, cfg.Faults, err = simAlarms(f, names, sizes); err != nil {
		return err
	}
	cfg.ProgressModel, cfg.PolicyNoProgress = pm, !f.policyProgress
	cfg.PriorRuns = f.priorRuns
	if f.priorRuns == 0 {
		cfg.PriorRuns = -1 // none
	}
	switch {
	case f.policyPriorRuns == 0:
		cfg.PolicyPriorRuns = -1 // none
	case f.policyPriorRuns > 0:
		cfg.PolicyPriorRuns = f.policyPriorRuns
	}
	if err := cfg.Validate(); err != nil {
		return invalid("compare", err.Error())
	}

	// 2. Read the trace (or generate the workload) and model it.
	t0 := time.Now()
	var jobs []trace.Job
	switch {
	case f.workload != "":
		if syn.GPUs == 0 {
			syn.GPUs = sizes[0] * f.perNode
		}
		if jobs, err = syn.Generate(); err != nil {
			return invalid("workload", err.Error())
		}
		f.trace, f.format = syn.String(), trace.FormatSynthetic
	case fromLog:
		jobs, _, err = sim.LoadExport(f.trace)
	default:
		jobs, err = trace.Load(f.trace, f.format)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return invalid("trace", err.Error())
		}
		if fromLog {
			return invalid("trace", err.Error())
		}
		return err
	}
	traceJobs := len(jobs)
	if f.limit > 0 && f.limit < len(jobs) {
		jobs = jobs[:f.limit]
	}
	if len(jobs) == 0 {
		return invalid("trace", "has no job to simulate")
	}
	win, parts, err := simWindows(f, jobs)
	if err != nil {
		return err
	}
	if f.teams == "vc" {
		path := f.vcs
		if path == "" {
			path = filepath.Join(filepath.Dir(f.trace), "vcs.csv")
		}
		var vcs map[string]int
		if f.workload != "" && f.vcs == "" {
			vcs = trace.SyntheticVCs()
		} else if vcs, err = readVCs(path); err != nil {
			return invalid("vcs", err.Error())
		}
		cfg.Options.Teams = sim.TeamsByVC(vcs)
	}
	cfg.Epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	if !jobs[0].SubmitTime.IsZero() {
		cfg.Epoch = jobs[0].SubmitTime.Add(-jobs[0].Submit)
	}
	// prepare models the jobs for a cluster of the given nodes.
	prepare := func(nodes int) ([]sim.Task, sim.Scenario, error) {
		tasks, unplaceable := sim.Prepare(jobs, nodes*f.perNode, em, cm, f.teams == "vc")
		preemptible := "all"
		if f.preemptible < 1 {
			sim.MarkPreemptible(tasks, f.preemptible, preemptibleSeed)
			preemptible = fmt.Sprintf("%g (seed %d)", f.preemptible, preemptibleSeed)
		}
		if len(tasks) == 0 {
			return nil, sim.Scenario{}, invalid("nodes", fmt.Sprintf("no job of the trace fits %d GPUs", nodes*f.perNode))
		}
		teams := "none"
		if f.teams == "vc" {
			teams = "vc"
		}
		estimates, classes := em.String(), cm.String()
		if fromLog {
			estimates, classes, preemptible = "from the log", "from the log", "from the log"
		}
		sc := sim.Scenario{Trace: f.trace, Format: f.format, Teams: teams, EstimateModel: estimates, ClassMix: classes,
			Limit: f.limit, TraceJobs: traceJobs, Unplaceable: unplaceable, Preemptible: preemptible}
		return tasks, sc, nil
	}
	if win != nil {
		prepare, cfg.Epoch = windowed(prepare, jobs, *win, f.perNode, cfg.Epoch)
	}
	if parts != nil {
		cfg.Nodes = sizes[0]
		return runSplit(c, f, cfg, parts, names, jobs, prepare, time.Since(t0))
	}
	if len(sizes) > 1 {
		return runSweep(c, f, cfg, sizes, names, prepare, time.Since(t0))
	}
	tasks, sc, err := prepare(sizes[0])
	if err != nil {
		return err
	}
	loaded := time.Since(t0)

	// 3. Simulate.
	if f.progress {
		var mu sync.Mutex
		cfg.Progress = func(name string, n, total int) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(os.Stderr, "%s: %d%% (%d of %d submitted)\n", name, n*100/total, n, total)
		}
	}
	t1 := time.Now()
	stop, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return invalid("cpuprofile", err.Error())
	}
	cpu0 := cpuTime()
	rep, err := sim.Run(c.Context(), cfg, sc, tasks)
	stop()
	if err != nil {
		return err
	}
	ran := time.Since(t1)
	if f.times {
		printTimings(os.Stderr, rep, names, loaded, ran)
		fmt.Fprintf(os.Stderr, "  CPU (user+sys, every goroutine) %s\n", (cpuTime() - cpu0).Round(time.Millisecond))
	}

	// 4. Report.
	if err := writePlots(f, func() ([]string, error) { return sim.WritePlots(f.plot, rep, names) }); err != nil {
		return err
	}
	if f.export != "" {
		if err := exportSim(c.Context(), export, cfg, tasks); err != nil {
			return err
		}
	}
	if f.json {
		return printJSON(os.Stdout, rep.Result)
	}
	printSim(os.Stdout, rep.Result, names)
	return nil
}

// startCPUProfile starts a CPU profile into path ("": none) and returns
// what stops it.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	w, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(w); err != nil {
		w.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); w.Close() }, nil
}

// cpuTime is the process's CPU time so far (user + system; 0 where the
// system does not say): on a shared machine, what a run cost, whatever
// its wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// preemptibleSeed seeds --preemptible's draws.
const preemptibleSeed = 1

func readVCs(path string) (map[string]int, error) {
	r, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	vcs, err := trace.ReadPhillyVCs(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return vcs, nil
}

func printSim(w io.Writer, r sim.Result, names []string) {
	s := r.Scenario
	fmt.Fprintf(w, "trace %s (%s): %d jobs simulated of %d", s.Trace, s.Format, r.Jobs, s.TraceJobs)
	if s.Unplaceable > 0 {
		fmt.Fprintf(w, ", %d left out (larger than the cluster)", s.Unplaceable)
	}
	if s.Window != nil {
		fmt.Fprintf(w, "\nwindow %s: its jobs only, on an empty cluster", s.Window)
	}
	fmt.Fprintf(w, "\ncluster %d × %d = %d GPUs, offered load %.3f over %s; teams %s; estimates %s; classes %s\n\n",
		s.Nodes, s.GPUsPerNode, s.TotalGPUs, s.OfferedLoad, days(s.SpanS), s.Teams, s.EstimateModel, s.ClassMix)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tavg JCT\tmedian JCT\tp95 JCT\tavg queue\tmedian queue\tp95 queue\tp99 queue\tmax queue\tutil\tpreempt\tlost GPU-h\t")
	for _, n := range names {
		m := r.Policies[n]
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.3f\t%d\t%.1f\t\n", n, m.AvgJCT, m.MedianJCT, m.P95JCT,
			m.AvgQueue, m.MedianQueue, m.P95Queue, m.P99Queue, m.MaxQueue, m.Utilization, m.Preemptions, m.LostGPUHours)
	}
	tw.Flush()
	fmt.Fprintln(w, "(seconds)")
	if len(r.Policies[names[0]].ByClass) > 0 {
		fmt.Fprintln(w, "\nqueueing delay by class (s):")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "policy\tclass\tn\tavg queue\tp95 queue\tmax queue\t")
		for _, n := range names {
			for _, p := range domain.Priorities {
				if c, ok := r.Policies[n].ByClass[p.String()]; ok {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t\n", n, p, c.N, c.AvgQueue, c.P95Queue, c.MaxQueue)
				}
			}
		}
		tw.Flush()
	}
	if len(r.Estimates) == 0 {
		return
	}
	fmt.Fprintln(w, "\nstart estimates at submission, under gpuq, over tasks that waited ≥ 60 s:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "estimator\tn\tP90 coverage\tby quarter\tmedian |err| of P50 (s)\tnever\t")
	for _, n := range []string{sim.EstGPUQ, sim.EstSlurm, sim.EstSeed} {
		e := r.Estimates[n]
		var q []string
		for _, c := range e.P90CoverageByQuarter {
			if c == nil {
				q = append(q, "-")
			} else {
				q = append(q, fmt.Sprintf("%.2f", *c))
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%s\t%.0f\t%d\t\n", n, e.N, e.P90Coverage, strings.Join(q, " "), e.P50MedianAbsErrS, e.Never)
	}
	tw.Flush()
	fmt.Fprintln(w, "(slurm-backfill and seed-formula give one number: their coverage is the share started by it)")
	printAlarms(w, r)
}

func printTimings(w io.Writer, rep *sim.Report, names []string, loaded, ran time.Duration) {
	fmt.Fprintf(w, "timings: load %s, simulate %s (policies in parallel)\n", loaded.Round(time.Millisecond), ran.Round(time.Millisecond))
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, rep.Timings.Policies[n].Round(time.Millisecond))
	}
	if e := rep.Timings.Estimates; e.Submissions > 0 {
		per := func(d time.Duration) string {
			return fmt.Sprintf("%s (%s per submission)", d.Round(time.Millisecond), (d / time.Duration(e.Submissions)).Round(time.Microsecond))
		}
		fmt.Fprintf(w, "  estimates at %d submissions: gpuq %s, slurm-backfill %s, seed-formula %s\n",
			e.Submissions, per(e.GPUQ), per(e.Slurm), per(e.Seed))
	}
}

func days(s float64) string { return fmt.Sprintf("%.1f days", s/86400) }

// runSweep simulates the same jobs on each cluster size, smallest first,
// one size after another (each size's policies in parallel, as a single
// run), and reports them together.
func runSweep(c *cobra.Command, f simFlags, cfg sim.Config, sizes []int, names []string,
	prepare func(int) ([]sim.Task, sim.Scenario, error), loaded time.Duration) error {
	if f.progress {
		var mu sync.Mutex
		cfg.Progress = func(name string, n, total int) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(os.Stderr, "%d nodes: %s: %d%% (%d of %d submitted)\n", cfg.Nodes, name, n*100/total, n, total)
		}
	}
	var sw sim.SweepResult
	for _, n := range sizes {
		tasks, sc, err := prepare(n)
		if err != nil {
			return err
		}
		cfg.Nodes = n
		t1 := time.Now()
		rep, err := sim.Run(c.Context(), cfg, sc, tasks)
		if err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		if f.times {
			fmt.Fprintf(os.Stderr, "%d nodes: ", n)
			printTimings(os.Stderr, rep, names, loaded, time.Since(t1))
		}
		sw.Sweep = append(sw.Sweep, sim.SweepEntry{Nodes: n, Result: rep.Result})
	}
	if err := writePlots(f, func() ([]string, error) { return sim.WriteSweepPlots(f.plot, sw, names) }); err != nil {
		return err
	}
	if f.json {
		return printJSON(os.Stdout, sw)
	}
	printSweep(os.Stdout, sw, names)
	return nil
}

// printSweep prints a sweep for people: one row per size and policy, and
// the queueing delay by class when the tasks are of several classes.
func printSweep(w io.Writer, sw sim.SweepResult, names []string) {
	s := sw.Sweep[0].Scenario
	fmt.Fprintf(w, "trace %s (%s): %d jobs", s.Trace, s.Format, s.TraceJobs)
	if s.Limit > 0 {
		fmt.Fprintf(w, ", the first %d simulated", s.Limit)
	}
	var sizes []string
	for _, e := range sw.Sweep {
		sizes = append(sizes, fmt.Sprint(e.Nodes))
	}
	fmt.Fprintf(w, "\nclusters of %s nodes × %d GPUs; teams %s; estimates %s; classes %s\n\n",
		strings.Join(sizes, ", "), s.GPUsPerNode, s.Teams, s.EstimateModel, s.ClassMix)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tGPUs\tleft out\tload\tpolicy\tavg JCT\tp95 JCT\tavg queue\tmedian queue\tp95 queue\tmax queue\tutil\tpreempt\t")
	for _, e := range sw.Sweep {
		for _, n := range names {
			m := e.Policies[n]
			fmt.Fprintf(tw, "%d\t%d\t%d\t%.3f\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.3f\t%d\t\n", e.Nodes, e.Scenario.TotalGPUs, e.Scenario.Unplaceable,
				e.Scenario.OfferedLoad, n, m.AvgJCT, m.P95JCT, m.AvgQueue, m.MedianQueue, m.P95Queue, m.MaxQueue, m.Utilization, m.Preemptions)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "(seconds; left out: jobs larger than the cluster)")
	if len(sw.Sweep[0].Policies[names[0]].ByClass) == 0 {
		return
	}
	fmt.Fprintln(w, "\nqueueing delay by class (s):")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tpolicy\tclass\tn\tavg queue\tp95 queue\tmax queue\t")
	for _, e := range sw.Sweep {
		for _, n := range names {
			for _, p := range domain.Priorities {
				if c, ok := e.Policies[n].ByClass[p.String()]; ok {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t\n", e.Nodes, n, p, c.N, c.AvgQueue, c.P95Queue, c.MaxQueue)
				}
			}
		}
	}
	tw.Flush()
}

// writePlots writes the plots with write when --plot names a directory,
// and says which files it wrote unless the output is JSON.
func writePlots(f simFlags, write func() ([]string, error)) error {
	if f.plot == "" {
		return nil
	}
	files, err := write()
	if err != nil {
		return err
	}
	if !f.json {
		for _, p := range files {
			fmt.Fprintln(os.Stderr, "wrote", p)
		}
	}
	return nil
}

// exportSim writes the gpuq policy's log of a healthy run of cfg over
// tasks (sim.Log: the agents' and submitters' records and the scheduler's
// decisions, in order) to path as audit lines, the format of gpuq audit
// export (the caller closes out on an error).
func exportSim(ctx context.Context, out *os.File, cfg sim.Config, tasks []sim.Task) error {
	recs, err := sim.Log(ctx, cfg, policy.New(cfg.Options), tasks)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(out, 1<<16)
	for _, m := range recs {
		b, err := json.Marshal(audit.LineOf(m))
		if err != nil {
			return err
		}
		w.Write(b)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return out.Close()
}
