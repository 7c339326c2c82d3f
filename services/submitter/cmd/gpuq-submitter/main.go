// Command gpuq-submitter runs the submitter on its own: the write gateway
// (HTTP API and NATS request/reply API) over the audit log.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/metrics"
	"github.com/gpuq/gpuq/pkg/svcmain"
	"github.com/gpuq/gpuq/services/submitter"
)

const name = "gpuq-submitter"

func main() {
	f := svcmain.NewFlags(name)
	c := f.Common()
	var httpAddr string
	var lim domain.Limits
	f.String(&httpAddr, "http", "GPUQ_HTTP_ADDR", ":8080", `HTTP API address ("" = NATS API only)`)
	f.Int(&lim.MaxGPUs, "max-gpus", "GPUQ_MAX_GPUS", domain.DefaultLimits.MaxGPUs, "largest GPU count a task may ask for")
	f.Float(&lim.MaxHours, "max-hours", "GPUQ_MAX_HOURS", domain.DefaultLimits.MaxHours, "largest estimate (hours) a task may give")
	h := f.HTTPAuth()
	f.Parse(c)
	tokens, tlsCfg := f.HTTPAuthOptions(h)
	switch {
	case lim.MaxGPUs < 1:
		f.Invalid("max-gpus", "must be ≥ 1")
	case !(lim.MaxHours > 0):
		f.Invalid("max-hours", "must be > 0")
	}

	logger := svcmain.Logger("submitter", c.LogLevel)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, submitter.Config{HTTPAddr: httpAddr, Limits: lim, Logger: logger, Tokens: tokens, TLS: tlsCfg}); err != nil && ctx.Err() == nil {
		logger.Error().Err(err).Msg("stopped")
		stop()
		os.Exit(1)
	}
	logger.Info().Msg("stopped")
}

func run(ctx context.Context, c *svcmain.Common, cfg submitter.Config) error {
	nc, log, err := svcmain.Connect(ctx, name, c, notify(cfg.Logger))
	if err != nil {
		return err
	}
	defer nc.Close()
	cfg.NC, cfg.Log, cfg.Replicas = nc, log, c.Replicas
	cfg.Metrics = metrics.New() // served at /metrics on the HTTP address
	metrics.NATS(cfg.Metrics, "submitter", nc)
	cfg.Ready = func() { cfg.Logger.Info().Str("http", cfg.HTTPAddr).Str("nats", c.NATSURL).Msg("ready") }
	return submitter.Run(ctx, cfg)
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
