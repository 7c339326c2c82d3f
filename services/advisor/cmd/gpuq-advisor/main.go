// Command gpuq-advisor runs the advisor on its own: wait estimates, reasons,
// actions and alerts on the advice stream.
package main

import (
	"context"

	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/svcmain"
	"github.com/gpuq/gpuq/services/advisor"
)

func main() {
	f := svcmain.NewFlags("gpuq-advisor")
	c := f.Common()
	pf := f.Policy()
	var metricsAddr string
	f.String(&metricsAddr, "metrics", "GPUQ_METRICS_ADDR", "", `Prometheus /metrics listen address, e.g. ":9090" ("" = none)`)
	f.Parse(c)
	opts := f.PolicyOptions(pf)

	svcmain.Shell{Binary: "gpuq-advisor", Component: "advisor", Common: c, MetricsAddr: metricsAddr,
		Run: func(ctx context.Context, env svcmain.Env) error {
			return advisor.Run(ctx, advisor.Config{Metrics: env.Metrics, Log: env.Log, Replicas: c.Replicas, JS: env.Log.JetStream(), NC: env.NC,
				Policy: policy.New(opts), Logger: env.Logger, Ready: func() { env.Logger.Info().Msg("ready") }})
		}}.Main()
}
