package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/gpuq/gpuq/pkg/estimate"
)

// Config sizes a run. Full and Quick are the two that `gpuq bench` runs.
type Config struct {
	Quick bool
	Dir   string // parent of the servers' temporary store directories ("" = the system's)

	RawMsgs    int // RawPublish
	IngestMsgs int // Ingest
	LogEvents  int // History: the log replayed, folded and restarted from
	LogNodes   int
	Rounds     int // History: replay/fold rounds, best counts
	Lifecycle  LifecycleOptions
	Placement  PlacementOptions
	// R3Msgs and R3Tasks size the runs on a 3-server cluster with the
	// stream at R3 (raw publish and ingest; lifecycle); 0 skips them.
	R3Msgs, R3Tasks int
	// Scheduler decides in the lifecycle runs (Lifecycle, one server and
	// R3): cmd/gpuq passes services/scheduler. Required by those groups.
	Scheduler SchedulerFunc
	// Advisor sizes the advisor's measurement (AdvisorMeasurement).
	Advisor AdvisorOptions
	// Only, when set, runs only these groups of measurements (Groups).
	Only []string
	// Progress, when set, is told each step as it starts.
	Progress func(step string)
	// Stream runs the stream group (StreamRun) with it (cmd/gpuq passes
	// services/submitter): 1,000 followers of GET /v1/events. The group
	// runs only when Only names it.
	Stream    StreamFunc
	StreamRun StreamOptions
}

// Groups are the groups of measurements a run is made of, for
// Config.Only (`gpuq bench --only`). A run without Only runs all of them
// but "stream" (heavy: 1,000 followers), which runs only when named.
var Groups = []string{"publish", "log", "lifecycle", "placement", "r3", "advisor", "stream"}

// namedOnly is the group that a run without Only leaves out.
const namedOnly = "stream"

// AdvisorFull is the advisor's measurement at the scale of the issue:
// 100,000 queued on 10,000 × 8 busy GPUs.
var AdvisorFull = AdvisorOptions{Nodes: 10_000, PerNode: 8, Queued: 100_000, Events: 40, Fresh: time.Minute, FreshGap: time.Second}

func (c Config) runs(group string) bool { return runs(c.Only, group) }

// runs is whether a run with only (Config.Only) measures group.
func runs(only []string, group string) bool {
	if len(only) == 0 {
		return group != namedOnly
	}
	return slices.Contains(only, group)
}

// RestartTarget is the log size restart_1m_s is named for.
const RestartTarget = 1_000_000

// Full is the full run: a few minutes on two cores.
func Full() Config {
	return Config{RawMsgs: 200_000, IngestMsgs: 200_000, LogEvents: RestartTarget, LogNodes: 125, Rounds: 2,
		Lifecycle: LifecycleOptions{Tasks: 20_000, Nodes: 125},
		Placement: PlacementOptions{Nodes: 1000, PerNode: 8, Queued: 100_000, Events: 1000, NoEnvQueued: 20_000},
		R3Msgs:    50_000, R3Tasks: 5_000, Advisor: AdvisorFull,
		StreamRun: StreamOptions{Followers: 1000, Events: 1000, Rate: 200}}
}

// Quick is the smaller run (under 30 s on two cores): fewer messages, a
// log of 50,000 events (the restart extrapolated to a million), 5,000
// tasks through the lifecycle, and 100 events for the placement on the
// same 100,000-task queue.
func Quick() Config {
	return Config{Quick: true, RawMsgs: 30_000, IngestMsgs: 30_000, LogEvents: 50_000, LogNodes: 125, Rounds: 1,
		Lifecycle: LifecycleOptions{Tasks: 5_000, Nodes: 125},
		Placement: PlacementOptions{Nodes: 1000, PerNode: 8, Queued: 100_000, Events: 100},
		R3Msgs:    10_000, R3Tasks: 2_000, Advisor: AdvisorOptions{Nodes: 1000, PerNode: 8, Queued: 10_000, Events: 20, Fresh: 10 * time.Second, FreshGap: 500 * time.Millisecond},
		StreamRun: StreamOptions{Followers: 1000, Events: 200, Rate: 100}}
}

// Result is one run: the headline metrics (the names `gpuq bench --json`
// prints), their ratios, the goals, and every measurement behind them.
type Result struct {
	Quick     bool     `json:"quick"`
	Only      []string `json:"only,omitempty"` // the groups run (Config.Only); none: all but stream
	Machine   Machine  `json:"machine"`
	Transport string   `json:"transport"`

	RawPublishDedupPerS float64 `json:"raw_publish_dedup_per_s"`
	SubmitIngestPerS    float64 `json:"submit_ingest_per_s"`
	RawReplayPerS       float64 `json:"raw_replay_per_s"`
	FoldPerS            float64 `json:"fold_per_s"`
	LifecycleTasksPerS  float64 `json:"lifecycle_tasks_per_s"`
	PlacementsPerS      float64 `json:"placements_per_s"`
	PlacementsBurstPerS float64 `json:"placements_burst_per_s"` // one pass on the free cluster
	PlacementP99Ms      float64 `json:"placement_p99_ms"`
	BytesPerQueuedTask  float64 `json:"bytes_per_queued_task"`
	// Restart1MS is the time from starting a server on an existing store
	// to a folded state, for a log of RestartTarget events, restarting
	// from a snapshot and folding the RestartTailEvents after it: measured
	// on RestartEvents events; when fewer, extrapolated (Extrapolated) by
	// scaling the server's start and the snapshot's load and decode
	// linearly with the events the snapshot covers, and the fold of the
	// tail with the tail a 1M log would have (restartTail).
	Restart1MS          float64 `json:"restart_1m_s"`
	RestartEvents       int     `json:"restart_events"`
	RestartTailEvents   int     `json:"restart_tail_events"`
	RestartMeasuredS    float64 `json:"restart_measured_s"`
	RestartExtrapolated bool    `json:"restart_extrapolated"`
	// RestartService1MS is Restart1MS without the server's own start (the
	// JetStream store's recovery): a service's restart while the server
	// stays up, as in production, where NATS is a process of its own, and
	// in a scheduler's failover. Information only; the goal is on
	// Restart1MS.
	RestartService1MS float64 `json:"restart_service_1m_s"`
	// RestartAged1MS is Restart1MS for the same log once its events are
	// older than the stream's de-duplication window (24 h): a log that
	// took more than a day to reach its size. Restart1MS is the worst
	// case, every event within the window, where the server's recovery
	// reloads each one to rebuild its table of message ids (see History).
	RestartAged1MS float64 `json:"restart_aged_1m_s"`
	Snapshots      bool    `json:"snapshots"` // restarts load a snapshot and fold the tail: always true
	// ServiceRestarts: each service's restart from its own snapshot with
	// RestartTarget events in the log, the server up (LogResult.Services),
	// beside the raw replay of the same log in the same run.
	ServiceRestarts []ServiceRestartRow `json:"service_restarts"`

	// On a 3-server cluster on loopback, the stream at R3 (an append is
	// acknowledged once two servers have it): the raw publish, gpuq's
	// ingest and the lifecycle, each against the raw R3 publish of the same
	// run. A task's lifecycle is four appends (submitted, dispatched,
	// started, completed), so lifecycle ratios compare tasks/s with the raw
	// publish rate ÷ 4.
	R3RawPublishDedupPerS float64 `json:"r3_raw_publish_dedup_per_s,omitempty"`
	R3SubmitIngestPerS    float64 `json:"r3_submit_ingest_per_s,omitempty"`
	R3LifecycleTasksPerS  float64 `json:"r3_lifecycle_tasks_per_s,omitempty"`
	R3IngestVsRaw         float64 `json:"r3_ingest_vs_raw,omitempty"`    // r3_submit_ingest_per_s / r3_raw_publish_dedup_per_s
	R3LifecycleVsRaw      float64 `json:"r3_lifecycle_vs_raw,omitempty"` // r3_lifecycle_tasks_per_s / (r3_raw_publish_dedup_per_s / 4)
	LifecycleVsRaw        float64 `json:"lifecycle_vs_raw"`              // lifecycle_tasks_per_s / (raw_publish_dedup_per_s / 4), one server

	IngestVsRaw float64 `json:"ingest_vs_raw"` // submit_ingest_per_s / raw_publish_dedup_per_s
	FoldVsRaw   float64 `json:"fold_vs_raw"`   // fold_per_s / raw_replay_per_s
	// The same ratios from CPU time per item (raw's over gpuq's): what the
	// wall-clock ratios tend to when the machine is busy with other work.
	IngestVsRawCPU float64 `json:"ingest_vs_raw_cpu"`
	FoldVsRawCPU   float64 `json:"fold_vs_raw_cpu"`

	// The advisor at scale (AdvisorMeasurement): one full re-estimate of
	// Detail.Advisor.Queued tasks, named for 100,000 (the figure is not
	// scaled when the run is smaller: see Detail.Advisor), the p99 from an
	// event's arrival to every changed advice computed, and the heap of the
	// advisor's fold, estimator and advice.
	EstimateAll100kS      float64 `json:"estimate_all_100k_s,omitempty"`
	AdviceAfterEventP99Ms float64 `json:"advice_after_event_p99_ms,omitempty"`
	AdvisorHeapBytes      uint64  `json:"advisor_heap_bytes,omitempty"`
	AdvisorQueued         int     `json:"advisor_queued,omitempty"`

	// The stream group: every record to each of 1,000 followers of GET
	// /v1/events (Detail.Stream).
	StreamP99Ms        float64 `json:"stream_p99_ms,omitempty"`
	StreamHeapGrowthMB float64 `json:"stream_heap_growth_mb,omitempty"`
	StreamRSSGrowthMB  float64 `json:"stream_rss_growth_mb,omitempty"`

	Goals  []Goal  `json:"goals"`
	Detail Detail  `json:"detail"`
	Steps  []Step  `json:"steps"` // what ran, and how long (with its setup)
	TookS  float64 `json:"took_s"`
}

// ServiceRestartRow is one service's restart at RestartTarget events:
// measured on Events, extrapolated as restart_1m_s is when fewer (the
// restore scaled with the events before the snapshot, the tail's fold
// with the tail). RawReplay1MS is the raw replay of the same run's log
// (an ordered consumer over the stream) scaled to RestartTarget events;
// VsRawReplay is the restart ÷ that raw replay of the whole log.
type ServiceRestartRow struct {
	Service      string  `json:"service"`
	Restart1MS   float64 `json:"restart_1m_s"`
	MeasuredS    float64 `json:"measured_s"`
	RestoreS     float64 `json:"restore_s"`
	TailFoldS    float64 `json:"tail_fold_s"`
	TailEvents   int     `json:"tail_events"`
	Events       int     `json:"events"`
	Extrapolated bool    `json:"extrapolated"`
	RawReplay1MS float64 `json:"raw_replay_1m_s"`
	VsRawReplay  float64 `json:"vs_raw_replay"`
}

func serviceRows(l LogResult) []ServiceRestartRow {
	var out []ServiceRestartRow
	raw := 0.0
	if l.RawReplay.N > 0 {
		raw = l.RawReplay.Took.Seconds() * float64(RestartTarget) / float64(l.RawReplay.N)
	}
	for _, sr := range l.Services {
		row := ServiceRestartRow{Service: sr.Service, MeasuredS: sr.Restart.Seconds(), RestoreS: sr.Restore.Seconds(),
			TailFoldS: sr.TailFold.Seconds(), TailEvents: sr.TailEvents, Events: l.Events, RawReplay1MS: raw}
		row.Restart1MS = row.MeasuredS
		if l.Events != RestartTarget && l.Events > 0 {
			tail1M := serviceTail(sr.Service, RestartTarget)
			// the records the snapshot held (restored, not folded): a tail
			// cut by the advisor's budget still starts at the snapshot
			before := float64(sr.Seq)
			tailS := sr.TailFold.Seconds() * float64(tail1M) / float64(max(sr.TailEvents, 1))
			if sr.Service == "advisor" {
				// its tail is cut by the budget too: at most the budget and
				// the one record that crossed it
				tailS = min(tailS, (advisorBudget + sr.TailFold/time.Duration(max(sr.TailEvents, 1))).Seconds())
			}
			row.Restart1MS = (sr.Restart-sr.TailFold).Seconds()*float64(RestartTarget-tail1M)/max(before, 1) + tailS
			row.Extrapolated = true
		}
		row.VsRawReplay = ratio(row.Restart1MS, raw)
		out = append(out, row)
	}
	return out
}

// Detail holds the measurements behind the headline metrics.
type Detail struct {
	RawPublish   Rate             `json:"raw_publish"`
	Ingest       Rate             `json:"ingest"`
	Log          LogResult        `json:"log"`
	Lifecycle    LifecycleResult  `json:"lifecycle"`
	Placement    PlacementResult  `json:"placement"`
	R3RawPublish *Rate            `json:"r3_raw_publish,omitempty"`
	R3Ingest     *Rate            `json:"r3_ingest,omitempty"`
	R3Lifecycle  *LifecycleResult `json:"r3_lifecycle,omitempty"`
	Advisor      *AdvisorResult   `json:"advisor,omitempty"`
	Stream       *StreamResult    `json:"stream,omitempty"`
}

// Step is one measurement of a run and its wall time, setup included.
type Step struct {
	Name  string  `json:"name"`
	TookS float64 `json:"took_s"`
}

// Machine describes where the run ran.
type Machine struct {
	CPU        string `json:"cpu"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	OS         string `json:"os"`
	Go         string `json:"go"`
	NATSServer string `json:"nats_server"`
	// Revision is the build's VCS revision ("+dirty" when modified), when
	// the build recorded one (workspace builds such as `make build` do not).
	Revision string `json:"revision,omitempty"`
	// Load is the 1-minute load average when the run started and ended
	// (Linux): other work on the machine slows every rate.
	LoadStart string `json:"load_start,omitempty"`
	LoadEnd   string `json:"load_end,omitempty"`
}

// Goal is one target of the issue and whether this run met it. Goals are
// information: a missed goal is not an error.
type Goal struct {
	Metric string  `json:"metric"`
	Op     string  `json:"op"` // ">=" or "<="
	Target float64 `json:"target"`
	Value  float64 `json:"value"`
	Met    bool    `json:"met"`
	Why    string  `json:"why"`
}

// Run runs every measurement in turn, each on its own fresh server.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	res := &Result{Quick: cfg.Quick, Machine: machine(), Transport: "in-process (embedded nats-server, file store)"}
	last := start
	step := func(s string) {
		now := time.Now()
		if n := len(res.Steps); n > 0 {
			res.Steps[n-1].TookS = now.Sub(last).Seconds()
		}
		last = now
		res.Steps = append(res.Steps, Step{Name: s})
		if cfg.Progress != nil {
			cfg.Progress(s)
		}
		runtime.GC()
	}
	var err error
	if cfg.runs("stream") && cfg.Stream == nil {
		return nil, fmt.Errorf("the stream group needs Config.Stream")
	}

	res.Only = cfg.Only
	if cfg.runs("publish") {
		// Raw and gpuq's ingest alternate, twice; the best of each counts (the
		// first publishes of a process run on a cold heap and page cache).
		step(fmt.Sprintf("publish: %d raw async publishes of %d B with message ids, then %d validated submits, twice",
			cfg.RawMsgs, RawMsgBytes, cfg.IngestMsgs))
		for i := 0; i < 2; i++ {
			raw, err := RawPublish(ctx, cfg.Dir, cfg.RawMsgs)
			if err != nil {
				return nil, fmt.Errorf("raw publish: %w", err)
			}
			res.Detail.RawPublish = faster(res.Detail.RawPublish, raw)
			ing, err := Ingest(ctx, cfg.Dir, cfg.IngestMsgs)
			if err != nil {
				return nil, fmt.Errorf("ingest: %w", err)
			}
			res.Detail.Ingest = faster(res.Detail.Ingest, ing)
		}
	}
	if cfg.runs("log") {
		step(fmt.Sprintf("log: %d events written, replayed, folded, restarted", cfg.LogEvents))
		if res.Detail.Log, err = History(ctx, cfg.Dir, cfg.LogNodes, cfg.LogEvents, cfg.Rounds); err != nil {
			return nil, fmt.Errorf("log: %w", err)
		}
	}
	if cfg.runs("lifecycle") {
		// Best of 2, as the raw rate it is compared with: the first run
		// in a process is the slower one (measured: 285–383 µs of CPU a
		// task first, 225–248 µs second, the same code), and whether it
		// came first depended on the groups run.
		step(fmt.Sprintf("lifecycle: %d tasks on %d GPUs, best of 2", cfg.Lifecycle.Tasks, cfg.Lifecycle.Nodes*8))
		lo := cfg.Lifecycle
		lo.Scheduler = cfg.Scheduler
		for i := 0; i < 2; i++ {
			lr, err := Lifecycle(ctx, cfg.Dir, lo)
			if err != nil {
				return nil, fmt.Errorf("lifecycle: %w", err)
			}
			if i == 0 || lr.PerS() > res.Detail.Lifecycle.PerS() {
				res.Detail.Lifecycle = lr
			}
		}
	}
	if cfg.runs("placement") {
		step(fmt.Sprintf("placement: %d queued on %d × %d GPUs, %d events", cfg.Placement.Queued, cfg.Placement.Nodes,
			cfg.Placement.PerNode, cfg.Placement.Events))
		if res.Detail.Placement, err = Placement(ctx, cfg.Placement); err != nil {
			return nil, fmt.Errorf("placement: %w", err)
		}
	}
	if cfg.R3Msgs > 0 && cfg.runs("r3") {
		step(fmt.Sprintf("r3: %d raw publishes and %d submits on a 3-server cluster at R3, best of 2", cfg.R3Msgs, cfg.R3Msgs))
		var raw, ing Rate
		for i := 0; i < 2; i++ {
			r, err := RawPublishR3(ctx, cfg.Dir, cfg.R3Msgs)
			if err != nil {
				return nil, fmt.Errorf("r3 raw publish: %w", err)
			}
			raw = faster(raw, r)
			g, err := IngestR3(ctx, cfg.Dir, cfg.R3Msgs)
			if err != nil {
				return nil, fmt.Errorf("r3 ingest: %w", err)
			}
			ing = faster(ing, g)
		}
		res.Detail.R3RawPublish, res.Detail.R3Ingest = &raw, &ing
	}
	if cfg.R3Tasks > 0 && cfg.runs("r3") {
		step(fmt.Sprintf("r3 lifecycle: %d tasks on %d GPUs, 3-server cluster at R3", cfg.R3Tasks, cfg.Lifecycle.Nodes*8))
		lo := LifecycleOptions{Tasks: cfg.R3Tasks, Nodes: cfg.Lifecycle.Nodes, Replicas: 3, Scheduler: cfg.Scheduler}
		lr, err := Lifecycle(ctx, cfg.Dir, lo)
		if err != nil {
			return nil, fmt.Errorf("r3 lifecycle: %w", err)
		}
		res.Detail.R3Lifecycle = &lr
	}
	if cfg.runs("advisor") && cfg.Advisor.Queued > 0 {
		a := cfg.Advisor
		step(fmt.Sprintf("advisor: %d queued on %d × %d busy GPUs, %d events", a.Queued, a.Nodes, a.PerNode, a.Events))
		ar, err := Advisor(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("advisor: %w", err)
		}
		res.Detail.Advisor = &ar
		res.EstimateAll100kS, res.AdviceAfterEventP99Ms = ar.EstimateAll.Seconds(), ar.P99Ms
		res.AdvisorHeapBytes, res.AdvisorQueued = ar.HeapBytes, ar.Queued
	}
	if cfg.runs("stream") {
		if err := runStream(ctx, cfg, res, step); err != nil {
			return nil, err
		}
	}
	if len(res.Steps) > 0 {
		res.Steps[len(res.Steps)-1].TookS = time.Since(last).Seconds()
	}
	runtime.GC()

	d := res.Detail
	res.RawPublishDedupPerS = d.RawPublish.PerS()
	res.SubmitIngestPerS = d.Ingest.PerS()
	res.RawReplayPerS = d.Log.RawReplay.PerS()
	res.FoldPerS = d.Log.Fold.PerS()
	res.LifecycleTasksPerS = d.Lifecycle.PerS()
	res.PlacementsPerS = d.Placement.PerS()
	res.PlacementsBurstPerS = d.Placement.BurstPerS()
	res.PlacementP99Ms = float64(d.Placement.P99) / float64(time.Millisecond)
	res.BytesPerQueuedTask = d.Placement.BytesPerQueuedTask
	res.RestartEvents = d.Log.Events
	res.RestartMeasuredS = d.Log.Restart.Seconds()
	res.Restart1MS, res.RestartExtrapolated = restart1M(d.Log)
	up := d.Log
	up.Restart -= up.ServerStart
	res.RestartService1MS, _ = restart1M(up)
	aged := d.Log
	aged.Restart, aged.ServerStart, aged.Snapshot = d.Log.Aged.Restart, d.Log.Aged.ServerStart, d.Log.Aged.Snapshot
	res.RestartAged1MS, _ = restart1M(aged)
	res.RestartTailEvents, res.Snapshots = d.Log.Snapshot.TailEvents, true
	res.ServiceRestarts = serviceRows(d.Log)
	res.IngestVsRaw = ratio(res.SubmitIngestPerS, res.RawPublishDedupPerS)
	res.LifecycleVsRaw = ratio(res.LifecycleTasksPerS, res.RawPublishDedupPerS/4)
	if d.R3RawPublish != nil {
		res.R3RawPublishDedupPerS, res.R3SubmitIngestPerS = d.R3RawPublish.PerS(), d.R3Ingest.PerS()
		res.R3IngestVsRaw = ratio(res.R3SubmitIngestPerS, res.R3RawPublishDedupPerS)
	}
	if d.R3Lifecycle != nil {
		res.R3LifecycleTasksPerS = d.R3Lifecycle.PerS()
		res.R3LifecycleVsRaw = ratio(res.R3LifecycleTasksPerS, res.R3RawPublishDedupPerS/4)
	}
	res.FoldVsRaw = ratio(res.FoldPerS, res.RawReplayPerS)
	res.IngestVsRawCPU = ratio(float64(d.RawPublish.CPUPerOp()), float64(d.Ingest.CPUPerOp()))
	res.FoldVsRawCPU = ratio(float64(d.Log.RawReplay.CPUPerOp()), float64(d.Log.Fold.CPUPerOp()))
	res.Goals = Goals(res)
	res.Machine.LoadEnd = loadavg()
	res.TookS = time.Since(start).Seconds()
	return res, nil
}

// restart1M is the restart of a RestartTarget-event log from l's
// measurement of a shorter one (see Result.Restart1MS): the server's start,
// the snapshot's load and decode grow with the log before the snapshot,
// the fold after it with the tail.
func restart1M(l LogResult) (float64, bool) {
	if l.Events == RestartTarget || l.Events == 0 {
		return l.Restart.Seconds(), false
	}
	tail := l.Snapshot.TailEvents
	before := float64(l.Events - tail)
	tail1M := restartTail(RestartTarget)
	head := (l.Restart - l.Snapshot.TailFold).Seconds() * float64(RestartTarget-tail1M) / max(before, 1)
	return head + l.Snapshot.TailFold.Seconds()*float64(tail1M)/float64(max(tail, 1)), true
}

// faster returns the rate that took less time (a zero Rate loses).
func faster(a, b Rate) Rate {
	if a.Took == 0 || (b.Took > 0 && b.Took < a.Took) {
		return b
	}
	return a
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Goals evaluates the targets on r.
func Goals(r *Result) []Goal {
	var g []Goal
	// A group's goals only when the run measured it (Config.Only).
	for _, gl := range fullGoals(r) {
		if r.ran(goalGroup(gl.Metric)) {
			g = append(g, gl)
		}
	}
	if r.Detail.Stream != nil {
		g = append(g,
			Goal{Metric: "stream_p99_ms", Op: "<=", Target: 1000, Value: r.StreamP99Ms, Why: "every record to each of 1,000 followers of GET /v1/events within 1 s (p99)"},
			Goal{Metric: "stream_heap_growth_mb", Op: "<=", Target: 200, Value: r.StreamHeapGrowthMB, Why: "the heap's growth with 1,000 followers (theirs in the same process included)"})
	}
	for i := range g {
		if g[i].Op == ">=" {
			g[i].Met = g[i].Value >= g[i].Target
		} else {
			g[i].Met = g[i].Value <= g[i].Target
		}
	}
	return g
}

// fullGoals are the goals of the full run.
func fullGoals(r *Result) []Goal {
	g := []Goal{
		{Metric: "ingest_vs_raw", Op: ">=", Target: 0.5, Value: r.IngestVsRaw, Why: "validated submits at least half the raw publish rate"},
		{Metric: "fold_vs_raw", Op: ">=", Target: 0.5, Value: r.FoldVsRaw, Why: "the fold at least half the raw replay rate"},
		{Metric: "lifecycle_tasks_per_s", Op: ">=", Target: 10_000, Value: r.LifecycleTasksPerS, Why: "20× Slurm's high-throughput guide (500 jobs/s)"},
		{Metric: "placements_per_s", Op: ">=", Target: 20_000, Value: r.PlacementsPerS, Why: "100,000 queued on 1,000 × 8 GPUs"},
		{Metric: "placement_p99_ms", Op: "<=", Target: 5, Value: r.PlacementP99Ms, Why: "one pass after an event"},
		{Metric: "bytes_per_queued_task", Op: "<=", Target: 2048, Value: r.BytesPerQueuedTask, Why: "≤ 2 KiB of heap per queued task"},
		{Metric: "restart_1m_s", Op: "<=", Target: 2, Value: r.Restart1MS, Why: "restart with 1M events in the log, all of them within the last 24 h (the worst case)"},
		{Metric: "restart_aged_1m_s", Op: "<=", Target: 2, Value: r.RestartAged1MS, Why: "the same log once its events are older than the 24 h de-duplication window"},
		{Metric: "lifecycle_vs_raw", Op: ">=", Target: 0.5, Value: r.LifecycleVsRaw, Why: "tasks/s at least half the raw publish rate ÷ 4 (a task's four appends), one server"},
	}
	for _, sr := range r.ServiceRestarts {
		g = append(g, Goal{Metric: "restart_" + sr.Service + "_1m_s", Op: "<=", Target: 2, Value: sr.Restart1MS,
			Why: "the " + sr.Service + "'s restart from its snapshot with 1M events in the log, NATS up"})
	}
	if r.R3RawPublishDedupPerS > 0 {
		g = append(g, Goal{Metric: "r3_ingest_vs_raw", Op: ">=", Target: 0.5, Value: r.R3IngestVsRaw, Why: "validated submits at least half the raw R3 publish rate"})
	}
	if r.R3LifecycleTasksPerS > 0 {
		g = append(g, Goal{Metric: "r3_lifecycle_vs_raw", Op: ">=", Target: 0.5, Value: r.R3LifecycleVsRaw, Why: "R3 tasks/s at least half the raw R3 publish rate ÷ 4"})
	}
	if r.Detail.Advisor != nil {
		g = append(g,
			Goal{Metric: "estimate_all_100k_s", Op: "<=", Target: 1, Value: r.EstimateAll100kS, Why: "one full re-estimate, 100,000 queued on 10,000 × 8 busy GPUs"},
			Goal{Metric: "advice_after_event_p99_ms", Op: "<=", Target: 100, Value: r.AdviceAfterEventP99Ms, Why: "from an event's arrival to every changed advice computed, same scale"},
			Goal{Metric: "advisor_heap_bytes", Op: "<=", Target: 2 << 30, Value: float64(r.AdvisorHeapBytes), Why: "the advisor's fold, estimator and advice at that scale, ≤ 2 GiB"})
	}
	return g
}

// WriteTable writes r for people.
func (r *Result) WriteTable(w io.Writer) error {
	bw := bufio.NewWriter(w)
	m := r.Machine
	kind := "full"
	if r.Quick {
		kind = "quick"
	}
	rev := ""
	if m.Revision != "" {
		rev = "; revision " + m.Revision
	}
	fmt.Fprintf(bw, "gpuq bench (%s) — %s, %d CPUs (GOMAXPROCS %d), %s, %s, nats-server %s, %s; load %s → %s%s\n\n",
		kind, m.CPU, m.NumCPU, m.GOMAXPROCS, m.OS, m.Go, m.NATSServer, r.Transport, m.LoadStart, m.LoadEnd, rev)
	d := r.Detail
	row := func(name, value, note string) {
		if r.ran(goalGroup(name)) {
			fmt.Fprintf(bw, "  %-30s %14s   %s\n", name, value, note)
		}
	}
	row("raw_publish_dedup_per_s", rate(r.RawPublishDedupPerS), fmt.Sprintf("%d × %d B, async, Nats-Msg-Id, best of 2; cpu %s/msg", d.RawPublish.N, RawMsgBytes, us(d.RawPublish.CPUPerOp())))
	row("submit_ingest_per_s", rate(r.SubmitIngestPerS), fmt.Sprintf("%d submits of %.0f B, best of 2; cpu %s/submit; ingest_vs_raw %.2f (cpu %.2f)",
		d.Ingest.N, perN(d.Ingest.Bytes, d.Ingest.N), us(d.Ingest.CPUPerOp()), r.IngestVsRaw, r.IngestVsRawCPU))
	row("raw_replay_per_s", rate(r.RawReplayPerS), fmt.Sprintf("ordered consumer, %d events of %.0f B, best of %d; cpu %s/event",
		d.Log.Events, perN(d.Log.LogBytes, d.Log.Events), d.Log.Rounds, us(d.Log.RawReplay.CPUPerOp())))
	row("fold_per_s", rate(r.FoldPerS), fmt.Sprintf("ReadAll + Apply; cpu %s/event; fold_vs_raw %.2f (cpu %.2f); %d GCs, heap peak %d MB, live %d MB; in memory: Decode %s, Apply %s",
		us(d.Log.Fold.CPUPerOp()), r.FoldVsRaw, r.FoldVsRawCPU, d.Log.FoldMem.GCs, d.Log.FoldMem.HeapPeak>>20, d.Log.FoldMem.HeapLive>>20,
		rate(d.Log.Decode.PerS()), rate(d.Log.Apply.PerS())))
	row("lifecycle_tasks_per_s", rate(r.LifecycleTasksPerS), fmt.Sprintf("%d tasks on %d GPUs, %s, best of 2; %d passes, %.1f decisions each; %s events appended",
		d.Lifecycle.Tasks, d.Lifecycle.GPUs, d.Lifecycle.Scheduler, d.Lifecycle.Passes, perPass(d.Lifecycle), rate(d.Lifecycle.EventsPerS())))
	if d.R3RawPublish != nil {
		row("r3_raw_publish_dedup_per_s", rate(r.R3RawPublishDedupPerS), fmt.Sprintf("3 servers on loopback, stream at R3: %d × %d B, best of 2; cpu %s/msg (all 3 servers)",
			d.R3RawPublish.N, RawMsgBytes, us(d.R3RawPublish.CPUPerOp())))
		row("r3_submit_ingest_per_s", rate(r.R3SubmitIngestPerS), fmt.Sprintf("%d submits at R3, best of 2; r3_ingest_vs_raw %.2f", d.R3Ingest.N, r.R3IngestVsRaw))
	}
	if d.R3Lifecycle != nil {
		row("r3_lifecycle_tasks_per_s", rate(r.R3LifecycleTasksPerS), fmt.Sprintf("%d tasks at R3; r3_lifecycle_vs_raw %.2f (vs raw R3 ÷ 4); one server: lifecycle_vs_raw %.2f; starts refused %d",
			d.R3Lifecycle.Tasks, r.R3LifecycleVsRaw, r.LifecycleVsRaw, d.R3Lifecycle.StartsRefused))
	}
	row("placements_per_s", rate(r.PlacementsPerS), fmt.Sprintf("%d placements in %d passes, %d queued on %d GPUs; cpu %.1f ms/pass",
		d.Placement.Placements, d.Placement.Events, d.Placement.Queued, d.Placement.GPUs, ms(d.Placement.CPU)/float64(max(d.Placement.Events, 1))))
	row("placements_burst_per_s", rate(r.PlacementsBurstPerS), fmt.Sprintf("one pass on the free cluster: %d placements in %.1f ms (cpu %.1f ms)",
		d.Placement.BurstPlacements, ms(d.Placement.BurstTook), ms(d.Placement.BurstCPU)))
	row("placement_p99_ms", fmt.Sprintf("%.2f", r.PlacementP99Ms), fmt.Sprintf("p50 %.2f ms, max %.2f ms; thread cpu p50 %.2f ms, p99 %.2f ms",
		ms(d.Placement.P50), ms(d.Placement.Max), ms(d.Placement.P50CPU), ms(d.Placement.P99CPU)))
	note := fmt.Sprintf("heap after GC; submissions carry %d B of env", d.Placement.EnvBytes)
	if d.Placement.BytesPerQueuedTaskNoEnv > 0 {
		note += fmt.Sprintf(" (%.0f B without)", d.Placement.BytesPerQueuedTaskNoEnv)
	}
	row("bytes_per_queued_task", fmt.Sprintf("%.0f", r.BytesPerQueuedTask), note)
	sn := d.Log.Snapshot
	note = fmt.Sprintf("measured on %d events: %.2f s (server start %.2f s, snapshot load %.2f s, decode %.2f s, tail of %d events %.2f s); snapshots: %v",
		r.RestartEvents, r.RestartMeasuredS, d.Log.ServerStart.Seconds(), sn.Load.Seconds(), sn.Decode.Seconds(), sn.TailEvents, sn.TailFold.Seconds(), r.Snapshots)
	if r.RestartExtrapolated {
		note = "EXTRAPOLATED, " + note
	}
	row("restart_1m_s", fmt.Sprintf("%.2f", r.Restart1MS), note)
	ag := d.Log.Aged
	row("restart_aged_1m_s", fmt.Sprintf("%.2f", r.RestartAged1MS), fmt.Sprintf("the same log, its events older than the de-duplication window: %.2f s (server start %.2f s, load %.2f s, decode %.2f s, tail %.2f s)",
		ag.Restart.Seconds(), ag.ServerStart.Seconds(), ag.Snapshot.Load.Seconds(), ag.Snapshot.Decode.Seconds(), ag.Snapshot.TailFold.Seconds()))
	row("restart_service_1m_s", fmt.Sprintf("%.2f", r.RestartService1MS), "the same without the server's start: a service restarting while NATS stays up")
	for _, sr := range r.ServiceRestarts {
		note := fmt.Sprintf("%s from its own snapshot, NATS up: restore %.2f s, tail of %d events %.2f s; raw replay of the same %s events %.2f s (restart ÷ raw %.2f)",
			sr.Service, sr.RestoreS, sr.TailEvents, sr.TailFoldS, num(float64(RestartTarget)), sr.RawReplay1MS, sr.VsRawReplay)
		if sr.Extrapolated {
			note = fmt.Sprintf("EXTRAPOLATED from %d events (%.2f s), ", sr.Events, sr.MeasuredS) + note
		}
		row("restart_"+sr.Service+"_1m_s", fmt.Sprintf("%.2f", sr.Restart1MS), note)
	}
	row("snapshot_bytes", fmt.Sprintf("%d", sn.StoredBytes), fmt.Sprintf("%d tasks at seq %d: state %d B before S2; encode %.2f s, store %.2f s",
		sn.Tasks, sn.Seq, sn.StateBytes, sn.Encode.Seconds(), sn.Store.Seconds()))
	if a := d.Advisor; a != nil {
		row("estimate_all_100k_s", fmt.Sprintf("%.3f", r.EstimateAll100kS), fmt.Sprintf("one full re-estimate of %d queued on %d GPUs, all busy, best of 2 (thread cpu %.3f s); full advice %.3f s",
			a.Queued, a.GPUs, a.EstimateAllCPU.Seconds(), a.Advise.Seconds()))
		row("advice_after_event_p99_ms", fmt.Sprintf("%.1f", r.AdviceAfterEventP99Ms), fmt.Sprintf("%d events (completions with their dispatches, submissions): p50 %.1f ms, max %.1f ms; thread cpu p50 %.1f ms, p99 %.1f ms; %d full re-estimates, %d partial",
			a.Events, a.P50Ms, a.MaxMs, a.P50CPUMs, a.P99CPUMs, a.Full, a.Incremental))
		row("advisor_heap_bytes", fmt.Sprintf("%d", r.AdvisorHeapBytes), "live heap of the fold, the estimator and every queued task's advice (in-process)")
		if a.FreshEvents > 0 {
			row("advice_delay_p99_s", fmt.Sprintf("%.2f", a.FreshP99S), fmt.Sprintf("the service's budget (re-estimates at most every %v and half the wall clock): %d events at %.1f/s, %d full re-estimates of %.2f s on average; each event's advice p50 %.2f s, max %.2f s after it arrived",
				estimate.DefaultLiveInterval, a.FreshEvents, a.FreshRateHz, a.FreshFull, a.FreshEstAvgS, a.FreshP50S, a.FreshMaxS))
		}
	}
	if s := d.Stream; s != nil {
		row("stream_p99_ms", fmt.Sprintf("%.1f", r.StreamP99Ms), fmt.Sprintf("%d followers × %d records at %.0f/s: delivered %d, missing %d, behind at the end %d; p50 %.1f ms, max %.1f ms; connected in %.2f s; cpu %.1f s (%.2f µs per delivery, all in one process)",
			s.Followers, s.Events, float64(s.Events)/max(s.Took.Seconds(), 1e-9), s.Delivered, s.Missing, s.Ended, ms(s.P50), ms(s.Max), s.Connect.Seconds(),
			s.CPU.Seconds(), float64(s.CPU)/float64(time.Microsecond)/float64(max(s.Delivered, 1))))
		row("stream_heap_growth_mb", fmt.Sprintf("%.1f", r.StreamHeapGrowthMB), fmt.Sprintf("heap in use %d → peak %d MB; resident set %d → peak %d MB (+%.1f MB); the followers run in the same process",
			s.HeapBefore>>20, s.HeapPeak>>20, s.RSSBefore>>20, s.RSSPeak>>20, r.StreamRSSGrowthMB))
	}
	fmt.Fprintf(bw, "\ngoals (information; a miss is not an error):\n")
	for _, g := range r.Goals {
		mark := "met   "
		if !g.Met {
			mark = "MISSED"
		}
		fmt.Fprintf(bw, "  %s %-24s %12s %s %-8s  %s\n", mark, g.Metric, num(g.Value), g.Op, num(g.Target), g.Why)
	}
	fmt.Fprintf(bw, "\ntook %.1f s:", r.TookS)
	for _, s := range r.Steps {
		name, _, _ := strings.Cut(s.Name, ":")
		fmt.Fprintf(bw, " %s %.1f s;", name, s.TookS)
	}
	fmt.Fprintln(bw)
	return bw.Flush()
}

func rate(v float64) string      { return fmt.Sprintf("%.0f/s", v) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func num(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func perN(b int64, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(b) / float64(n)
}

func machine() Machine {
	m := Machine{NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), OS: runtime.GOOS + "/" + runtime.GOARCH,
		Go: runtime.Version(), NATSServer: server.VERSION, CPU: "unknown"}
	m.LoadStart = loadavg()
	if bi, ok := debug.ReadBuildInfo(); ok {
		dirty := false
		for _, st := range bi.Settings {
			switch st.Key {
			case "vcs.revision":
				m.Revision = st.Value
			case "vcs.modified":
				dirty = st.Value == "true"
			}
		}
		if dirty && m.Revision != "" {
			m.Revision += "+dirty"
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// loadavg is the 1-minute load average, "" where unknown.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return ""
}

func us(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond)) }

// goalGroup is the group of measurements a goal's metric comes from.
func goalGroup(metric string) string {
	switch {
	case strings.HasPrefix(metric, "r3_"):
		return "r3"
	case strings.HasPrefix(metric, "stream_"):
		return "stream"
	case strings.HasPrefix(metric, "estimate_all"), strings.HasPrefix(metric, "advice_"), strings.HasPrefix(metric, "advisor_"):
		return "advisor"
	case strings.HasPrefix(metric, "lifecycle"):
		return "lifecycle"
	case strings.HasPrefix(metric, "placement"), metric == "bytes_per_queued_task":
		return "placement"
	case strings.HasPrefix(metric, "restart"), strings.HasPrefix(metric, "fold"), metric == "raw_replay_per_s", metric == "snapshot_bytes":
		return "log"
	}
	return "publish"
}

// ran is whether the run measured the group (Config.Only).
func (r *Result) ran(group string) bool { return runs(r.Only, group) }

// runStream runs the stream group into res.
func runStream(ctx context.Context, cfg Config, res *Result, step func(string)) error {
	o := cfg.StreamRun
	step(fmt.Sprintf("stream: %d followers of GET /v1/events, %d records at %.0f/s", o.Followers, o.Events, o.Rate))
	sr, err := Stream(ctx, cfg.Dir, o, cfg.Stream)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	res.Detail.Stream = &sr
	res.StreamP99Ms = ms(sr.P99)
	res.StreamHeapGrowthMB, res.StreamRSSGrowthMB = sr.HeapGrowthMB(), sr.RSSGrowthMB()
	return nil
}
