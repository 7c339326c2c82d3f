package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/bench"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/services/scheduler"
	"github.com/gpuq/gpuq/services/submitter"
)

func newBench() *cobra.Command {
	var (
		asJSON, quick bool
		dir, profile  string
		logEvents     int
		only          []string
		adv           bench.AdvisorOptions
	)
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure gpuq against an embedded JetStream (raw rates, ingest, fold, lifecycle, placement, restart)",
		Long: `bench starts its own embedded nats-server (file store in a temporary
directory, in-process connections) for each measurement; the raw replay,
the fold and the restart share one server and its log. It reports, from
the same run: the raw JetStream rates, gpuq's rates beside them and their
ratios, the placement policy on 100,000 queued tasks, the advisor's
re-estimates on 100,000 queued tasks, the heap per queued
task, the scheduler's cold restart and each service's restart (scheduler,
submitter, advisor, agent) from its own snapshot with the raw replay of
the same log beside it, with the goals of docs/performance.md met or
missed. A missed goal is information: the exit code is 0 unless a
measurement fails. --only runs some groups of measurements alone; the
stream group runs only when --only names it (it is heavy): it has 1,000
followers of GET /v1/events on one submitter and reports every record's
latency to every follower and the memory it took. --quick runs a smaller
version (under 30 s on 2 cores).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg := bench.Full()
			if quick {
				cfg = bench.Quick()
			}
			if logEvents < 0 || logEvents > 0 && logEvents < 1000 {
				return &exitError{exitInvalid, fmt.Errorf("--log-events: must be at least 1000 (or 0 for the run's own size)")}
			}
			if logEvents > 0 {
				cfg.LogEvents = logEvents
			}
			for _, g := range only {
				if !slices.Contains(bench.Groups, g) {
					return &exitError{exitInvalid, fmt.Errorf("--only: %q is not a group of measurements (one of %s)", g, strings.Join(bench.Groups, ", "))}
				}
			}
			cfg.Only = only
			for _, v := range []struct {
				name string
				n    *int
			}{{"--advisor-queued", &adv.Queued}, {"--advisor-nodes", &adv.Nodes}, {"--advisor-events", &adv.Events}} {
				if *v.n < 0 {
					return &exitError{exitInvalid, fmt.Errorf("%s: must be ≥ 1 (or 0 for the run's own size)", v.name)}
				}
			}
			if adv.Queued > 0 {
				cfg.Advisor.Queued = adv.Queued
			}
			if adv.Nodes > 0 {
				cfg.Advisor.Nodes = adv.Nodes
			}
			if adv.Events > 0 {
				cfg.Advisor.Events = adv.Events
			}
			cfg.Dir = dir
			cfg.Scheduler = serviceScheduler
			cfg.Stream = serviceStream
			cfg.Progress = func(s string) { fmt.Fprintln(os.Stderr, "bench:", s) }
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if profile != "" {
				f, err := os.Create(profile)
				if err != nil {
					return &exitError{exitInvalid, fmt.Errorf("--cpuprofile: %w", err)}
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			r, err := bench.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(os.Stdout, r)
			}
			return r.WriteTable(os.Stdout)
		},
	}
	fl := c.Flags()
	fl.BoolVar(&asJSON, "json", false, "print JSON (every metric, ratio, goal and measurement)")
	fl.BoolVar(&quick, "quick", false, "a smaller run: under 30 s on 2 cores; the restart is extrapolated from 50,000 events")
	fl.StringVar(&profile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof; the embedded server's share is under nats-server)")
	fl.StringVar(&dir, "dir", "", "parent directory of the temporary JetStream stores (default: the system's temp dir)")
	fl.IntVar(&logEvents, "log-events", 0, "events in the log that is replayed, folded and restarted from, every service's restart included (0: 1,000,000, the figure the restart goals name; 50,000 with --quick, extrapolated to 1M)")
	fl.StringSliceVar(&only, "only", nil, "run only these groups of measurements (comma-separated: "+strings.Join(bench.Groups, ", ")+"; without --only, all but stream run)")
	fl.IntVar(&adv.Queued, "advisor-queued", 0, "queued tasks of the advisor's measurement (0: 100,000; 10,000 with --quick)")
	fl.IntVar(&adv.Nodes, "advisor-nodes", 0, "nodes of 8 busy GPUs of the advisor's measurement (0: 10,000; 1,000 with --quick)")
	fl.IntVar(&adv.Events, "advisor-events", 0, "events after which the advisor's advice is timed (0: 40; 20 with --quick)")
	return c
}

// serviceScheduler runs services/scheduler as `gpuq dev` does, for the
// lifecycle measurement: default policy, its metrics in reg, no node
// timeout (the mock agents send no heartbeats), no logging.
func serviceScheduler(ctx context.Context, log *jetstream.Log, reg prometheus.Registerer, ready func()) error {
	return scheduler.Run(ctx, scheduler.Config{Log: log, JS: log.JetStream(), Logger: zerolog.Nop(),
		Instance: "bench", NodeTimeout: -1, Metrics: reg, Ready: ready})
}

// serviceStream runs services/submitter with its HTTP API on addr, for the
// stream measurement: no logging, no snapshots.
func serviceStream(ctx context.Context, log *jetstream.Log, nc *nats.Conn, addr string, ready func()) error {
	return submitter.Run(ctx, submitter.Config{Log: log, NC: nc, HTTPAddr: addr, Logger: zerolog.Nop(),
		Limits: domain.DefaultLimits, SnapshotEvery: -1, Ready: ready})
}
