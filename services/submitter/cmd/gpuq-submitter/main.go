// Command gpuq-submitter runs the submitter on its own: the write gateway
// (HTTP API and NATS request/reply API) over the audit log.
package main

import (
	"context"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/metrics"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/svcmain"
	"github.com/gpuq/gpuq/services/submitter"
)

const name = "gpuq-submitter"

func main() {
	f := svcmain.NewFlags(name)
	c := f.Common()
	var httpAddr, hosts, origins, metricsAddr string
	var lim domain.Limits
	f.String(&httpAddr, "http", "GPUQ_HTTP_ADDR", ":8080", `HTTP API address ("" = NATS API only)`)
	f.String(&hosts, "http-host", "GPUQ_HTTP_HOSTS", "", `more Host names the HTTP API answers to, comma-separated (a DNS name, a compose service name; "*": any, when a proxy in front checks Host); the listen address's own names always count`)
	f.String(&origins, "http-origin", "GPUQ_HTTP_ORIGINS", "", "browser origins (scheme://host[:port]) allowed to call the HTTP API besides its own, comma-separated")
	f.String(&metricsAddr, "metrics", "GPUQ_METRICS_ADDR", "", `also serve /metrics on this address without a token, e.g. "127.0.0.1:9090" ("" = only on the HTTP API, behind the admin token when --tokens is set)`)
	f.Int(&lim.MaxGPUs, "max-gpus", "GPUQ_MAX_GPUS", domain.DefaultLimits.MaxGPUs, "largest GPU count a task may ask for")
	f.Float(&lim.MaxHours, "max-hours", "GPUQ_MAX_HOURS", domain.DefaultLimits.MaxHours, "largest estimate (hours) a task may give")
	h := f.HTTPAuth()
	pf := f.Policy() // the scheduler's: the dashboard's plan, teams and explanations run it
	f.Parse(c)
	tokens, tlsCfg := f.HTTPAuthOptions(h)
	cfg := submitter.Config{HTTPAddr: httpAddr, Limits: lim, Tokens: tokens, TLS: tlsCfg, Policy: policy.New(f.PolicyOptions(pf)),
		HTTPHosts: svcmain.List(hosts), HTTPOrigins: svcmain.List(origins), MetricsAddr: metricsAddr, NATSAuth: c.Creds != ""}
	switch {
	case lim.MaxGPUs < 1:
		f.Invalid("max-gpus", "must be ≥ 1")
	case !(lim.MaxHours > 0):
		f.Invalid("max-hours", "must be > 0")
	}
	if err := submitter.CheckOrigins(cfg.HTTPOrigins); err != nil {
		f.Invalid("http-origin", err.Error())
	}

	// The submitter serves /metrics itself: on the HTTP API (behind the
	// admin token) and on --metrics without one.
	svcmain.Shell{Binary: name, Component: "submitter", Common: c,
		Run: func(ctx context.Context, env svcmain.Env) error {
			cfg.Logger = env.Logger
			cfg.NC, cfg.Log, cfg.Replicas = env.NC, env.Log, c.Replicas
			cfg.Metrics = metrics.New()
			metrics.NATS(cfg.Metrics, "submitter", env.NC)
			cfg.Ready = func() { env.Logger.Info().Str("http", cfg.HTTPAddr).Str("nats", c.NATSURL).Msg("ready") }
			return submitter.Run(ctx, cfg)
		}}.Main()
}
