// Command gpuq-scheduler runs one scheduler instance on its own. Several may
// run; the one holding the leader lease decides, the others stand by.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/metrics"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/svcmain"
	"github.com/gpuq/gpuq/services/scheduler"
)

const name = "gpuq-scheduler"

func main() {
	f := svcmain.NewFlags(name)
	c := f.Common()
	var leaseTTL time.Duration
	var instance string
	var nodeTimeout time.Duration
	pf := f.Policy()
	f.Duration(&nodeTimeout, "node-timeout", "GPUQ_NODE_TIMEOUT", 30*time.Second, "a node without heartbeat this long is lost")
	f.Duration(&leaseTTL, "lease-ttl", "GPUQ_LEASE_TTL", 10*time.Second, "leader lease TTL: how soon a standby takes over from a dead leader")
	f.String(&instance, "instance", "GPUQ_INSTANCE", "", "this instance's name in the lease (default hostname-pid)")
	var metricsAddr string
	f.String(&metricsAddr, "metrics", "GPUQ_METRICS_ADDR", "", `Prometheus /metrics listen address, e.g. ":9090" ("" = none)`)
	var snapEvery int
	f.Int(&snapEvery, "snapshot-every", "GPUQ_SNAPSHOT_EVERY", scheduler.DefaultSnapshotEvery,
		"write a state snapshot every this many applied events; a restart folds only the log after it (0: no snapshots)")
	f.Parse(c)
	opts := f.PolicyOptions(pf)
	if leaseTTL < time.Second {
		f.Invalid("lease-ttl", "must be ≥ 1s")
	}
	switch {
	case snapEvery < 0:
		f.Invalid("snapshot-every", "must not be negative")
	case snapEvery == 0:
		snapEvery = -1 // scheduler.Config: negative is none
	}

	logger := svcmain.Logger("scheduler", c.LogLevel)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, leaseTTL, instance, nodeTimeout, snapEvery, metricsAddr, opts, logger); err != nil && ctx.Err() == nil {
		logger.Error().Err(err).Msg("stopped")
		stop()
		os.Exit(1)
	}
	logger.Info().Msg("stopped")
}

func run(ctx context.Context, c *svcmain.Common, leaseTTL time.Duration, instance string, nodeTimeout time.Duration, snapEvery int,
	metricsAddr string, opts policy.Options, logger zerolog.Logger) error {
	nc, log, err := svcmain.Connect(ctx, name, c, notify(logger))
	if err != nil {
		return err
	}
	defer nc.Close()
	var reg *prometheus.Registry
	if metricsAddr != "" {
		reg = metrics.New()
		metrics.NATS(reg, "scheduler", nc)
		addr, err := metrics.Serve(ctx, metricsAddr, reg, nil)
		if err != nil {
			return fmt.Errorf("metrics listen %s: %w", metricsAddr, err)
		}
		logger.Info().Str("addr", addr).Msg("metrics listening")
	}
	return scheduler.Run(ctx, scheduler.Config{Metrics: registerer(reg), Log: log, Replicas: c.Replicas, JS: log.JetStream(), Policy: policy.New(opts),
		Logger: logger, Instance: instance, LeaseTTL: leaseTTL, NodeTimeout: nodeTimeout, SnapshotEvery: snapEvery,
		Ready: func() { logger.Info().Msg("ready: leading") }})
}

// registerer is reg, or nil (no metrics) when reg is nil.
func registerer(reg *prometheus.Registry) prometheus.Registerer {
	if reg == nil {
		return nil
	}
	return reg
}

// notify logs what svcmain.Connect reports: problems at warn, news at info.
func notify(logger zerolog.Logger) svcmain.Notify {
	return func(msg string, err error) {
		if err != nil {
			logger.Warn().Err(err).Msg(msg)
			return
		}
		logger.Info().Msg(msg)
	}
}
