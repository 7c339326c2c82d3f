package svcmain

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/metrics"
)

// Env is what the shell hands a service once connected.
type Env struct {
	NC  *nats.Conn
	Log *jetstream.Log
	// Metrics is the registry /metrics serves (--metrics), nil without
	// one; the connection's own metrics are registered on it.
	Metrics prometheus.Registerer
	Logger  zerolog.Logger
	Common  *Common
}

// Shell is a service's main around its Run: the logger, SIGINT and
// SIGTERM, the connection to NATS and the log (Connect, waiting while
// they are not up), /metrics on MetricsAddr when set, and exit 1 when
// Run fails before a signal. Every service binary is its flags and one
// Shell.
type Shell struct {
	Binary      string // gpuq-advisor: the NATS connection's name
	Component   string // advisor: the logs' and metrics' service label
	Common      *Common
	MetricsAddr string // "" = no /metrics of the shell's
	// Fields are more fields on every log line (an agent's node).
	Fields map[string]string
	// Run runs the service until ctx ends.
	Run func(ctx context.Context, env Env) error
}

// Main runs the shell; it returns only after the service stopped on a
// signal (it exits 1 on a failure).
func (s Shell) Main() {
	logger := s.logger(Logger(s.Component, s.Common.LogLevel))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := s.run(ctx, logger); err != nil && ctx.Err() == nil {
		logger.Error().Err(err).Msg("stopped")
		stop()
		os.Exit(1)
	}
	logger.Info().Msg("stopped")
}

// logger is base with the shell's Fields.
func (s Shell) logger(base zerolog.Logger) zerolog.Logger {
	for _, k := range slices.Sorted(maps.Keys(s.Fields)) {
		base = base.With().Str(k, s.Fields[k]).Logger()
	}
	return base
}

func (s Shell) run(ctx context.Context, logger zerolog.Logger) error {
	nc, log, err := Connect(ctx, s.Binary, s.Common, LogNotify(logger))
	if err != nil {
		return err
	}
	defer nc.Close()
	env := Env{NC: nc, Log: log, Logger: logger, Common: s.Common}
	if s.MetricsAddr != "" {
		r := metrics.New()
		metrics.NATS(r, s.Component, nc)
		addr, err := metrics.Serve(ctx, s.MetricsAddr, r, nil)
		if err != nil {
			return fmt.Errorf("metrics listen %s: %w", s.MetricsAddr, err)
		}
		logger.Info().Str("addr", addr).Msg("metrics listening")
		env.Metrics = r
	}
	return s.Run(ctx, env)
}

// LogNotify logs what Connect reports: problems at warn, news at info.
func LogNotify(logger zerolog.Logger) Notify {
	return func(msg string, err error) {
		if err != nil {
			logger.Warn().Err(err).Msg(msg)
			return
		}
		logger.Info().Msg(msg)
	}
}

// List splits a comma-separated flag value, dropping blanks.
func List(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
