// Command gpuq-notifier runs the notifier on its own: predictive and
// state notifications as signed webhook POSTs.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/metrics"
	"github.com/gpuq/gpuq/pkg/svcmain"
	"github.com/gpuq/gpuq/services/notifier"
)

const name = "gpuq-notifier"

func main() {
	f := svcmain.NewFlags(name)
	c := f.Common()
	var metricsAddr, hooks, secretFile, allow string
	f.String(&metricsAddr, "metrics", "GPUQ_METRICS_ADDR", "", `Prometheus /metrics listen address, e.g. ":9090" ("" = none)`)
	f.String(&hooks, "webhook", "GPUQ_WEBHOOKS", "", "webhook URLs that get every notification, comma-separated (the teams' own: gpuq notify add)")
	f.String(&secretFile, "webhook-secret-file", "GPUQ_WEBHOOK_SECRET_FILE", "", "file holding the secret that signs the POSTs to --webhook (X-Gpuq-Signature)")
	f.String(&allow, "webhook-allow", "GPUQ_WEBHOOK_ALLOW", "", "CIDRs the teams' destinations (gpuq notify add) may be delivered to, comma-separated (default: any address but loopback and link-local)")
	f.Parse(c)
	nets, err := notifier.ParseAllow(allow)
	if err != nil {
		f.Invalid("webhook-allow", err.Error())
	}
	var secret []byte
	if secretFile != "" {
		b, err := os.ReadFile(secretFile)
		if err != nil {
			f.Invalid("webhook-secret-file", err.Error())
		}
		secret = []byte(strings.TrimSpace(string(b)))
	}
	var dests []notifier.Destination
	for _, u := range strings.Split(hooks, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if err := notifier.CheckURL(u); err != nil {
			f.Invalid("webhook", err.Error())
		}
		dests = append(dests, notifier.NewDestination("", u, secret, nil))
	}

	logger := svcmain.Logger("notifier", c.LogLevel)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, metricsAddr, dests, notifier.Allow{Nets: nets}, logger); err != nil && ctx.Err() == nil {
		logger.Error().Err(err).Msg("stopped")
		stop()
		os.Exit(1)
	}
	logger.Info().Msg("stopped")
}

func run(ctx context.Context, c *svcmain.Common, metricsAddr string, dests []notifier.Destination, allow notifier.Allow, logger zerolog.Logger) error {
	nc, log, err := svcmain.Connect(ctx, name, c, notify(logger))
	if err != nil {
		return err
	}
	defer nc.Close()
	var reg prometheus.Registerer
	if metricsAddr != "" {
		r := metrics.New()
		metrics.NATS(r, "notifier", nc)
		addr, err := metrics.Serve(ctx, metricsAddr, r, nil)
		if err != nil {
			return fmt.Errorf("metrics listen %s: %w", metricsAddr, err)
		}
		logger.Info().Str("addr", addr).Msg("metrics listening")
		reg = r
	}
	return notifier.Run(ctx, notifier.Config{Log: log, JS: log.JetStream(), Replicas: c.Replicas, Destinations: dests, Allow: allow, Metrics: reg, Logger: logger,
		Ready: func() { logger.Info().Int("destinations", len(dests)).Msg("ready") }})
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
