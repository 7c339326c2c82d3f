// Command gpuq-advisor runs the advisor on its own: wait estimates, reasons,
// actions and alerts on the advice stream.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/metrics"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/svcmain"
	"github.com/gpuq/gpuq/services/advisor"
)

const name = "gpuq-advisor"

func main() {
	f := svcmain.NewFlags(name)
	c := f.Common()
	pf := f.Policy()
	var metricsAddr string
	f.String(&metricsAddr, "metrics", "GPUQ_METRICS_ADDR", "", `Prometheus /metrics listen address, e.g. ":9090" ("" = none)`)
	f.Parse(c)
	opts := f.PolicyOptions(pf)

	logger := svcmain.Logger("advisor", c.LogLevel)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, metricsAddr, opts, logger); err != nil && ctx.Err() == nil {
		logger.Error().Err(err).Msg("stopped")
		stop()
		os.Exit(1)
	}
	logger.Info().Msg("stopped")
}

func run(ctx context.Context, c *svcmain.Common, metricsAddr string, opts policy.Options, logger zerolog.Logger) error {
	nc, log, err := svcmain.Connect(ctx, name, c, notify(logger))
	if err != nil {
		return err
	}
	defer nc.Close()
	var reg prometheus.Registerer
	if metricsAddr != "" {
		r := metrics.New()
		metrics.NATS(r, "advisor", nc)
		addr, err := metrics.Serve(ctx, metricsAddr, r, nil)
		if err != nil {
			return fmt.Errorf("metrics listen %s: %w", metricsAddr, err)
		}
		logger.Info().Str("addr", addr).Msg("metrics listening")
		reg = r
	}
	return advisor.Run(ctx, advisor.Config{Metrics: reg, Log: log, Replicas: c.Replicas, JS: log.JetStream(), NC: nc, Policy: policy.New(opts), Logger: logger,
		Ready: func() { logger.Info().Msg("ready") }})
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
