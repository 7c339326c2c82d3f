// Command gpuq-notifier runs the notifier on its own: predictive and
// state notifications as signed webhook POSTs.
package main

import (
	"context"
	"os"
	"strings"

	"github.com/gpuq/gpuq/pkg/svcmain"
	"github.com/gpuq/gpuq/services/notifier"
)

const name = "gpuq-notifier"

func main() {
	f := svcmain.NewFlags(name)
	c := f.Common()
	var metricsAddr, hooks, adminHooks, secretFile, allow string
	f.String(&metricsAddr, "metrics", "GPUQ_METRICS_ADDR", "", `Prometheus /metrics listen address, e.g. ":9090" ("" = none)`)
	f.String(&hooks, "webhook", "GPUQ_WEBHOOKS", "", "webhook URLs that get every notification, comma-separated (the teams' own: gpuq notify add)")
	f.String(&adminHooks, "admin-webhook", "GPUQ_ADMIN_WEBHOOKS", "", "the operators' alarm: webhook URLs that get every alert (a wait past 2× its estimate with scheduling broken) and nothing else, comma-separated, signed with --webhook-secret-file")
	f.String(&secretFile, "webhook-secret-file", "GPUQ_WEBHOOK_SECRET_FILE", "", "file holding the secret that signs the POSTs to --webhook and --admin-webhook (X-Gpuq-Signature)")
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
	for _, u := range svcmain.List(hooks) {
		if err := notifier.CheckURL(u); err != nil {
			f.Invalid("webhook", err.Error())
		}
		dests = append(dests, notifier.NewDestination("", u, secret, nil))
	}
	admin, err := notifier.AdminDestinations(svcmain.List(adminHooks), svcmain.List(hooks), secret)
	if err != nil {
		f.Invalid("admin-webhook", err.Error())
	}
	dests = append(dests, admin...)

	svcmain.Shell{Binary: name, Component: "notifier", Common: c, MetricsAddr: metricsAddr,
		Run: func(ctx context.Context, env svcmain.Env) error {
			return notifier.Run(ctx, notifier.Config{Log: env.Log, JS: env.Log.JetStream(), Replicas: c.Replicas, Destinations: dests,
				Allow: notifier.Allow{Nets: nets}, Metrics: env.Metrics, Logger: env.Logger,
				Ready: func() { env.Logger.Info().Int("destinations", len(dests)).Int("admin", len(admin)).Msg("ready") }})
		}}.Main()
}
