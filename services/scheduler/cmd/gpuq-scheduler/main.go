// Command gpuq-scheduler runs one scheduler instance on its own. Several may
// run; the one holding the leader lease decides, the others stand by.
package main

import (
	"context"
	"time"

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

	svcmain.Shell{Binary: name, Component: "scheduler", Common: c, MetricsAddr: metricsAddr,
		Run: func(ctx context.Context, env svcmain.Env) error {
			return scheduler.Run(ctx, scheduler.Config{Metrics: env.Metrics, Log: env.Log, Replicas: c.Replicas, JS: env.Log.JetStream(), Policy: policy.New(opts),
				Logger: env.Logger, Instance: instance, LeaseTTL: leaseTTL, NodeTimeout: nodeTimeout, SnapshotEvery: snapEvery,
				Ready: func() { env.Logger.Info().Msg("ready: leading") }})
		}}.Main()
}
