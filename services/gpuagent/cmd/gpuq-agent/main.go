// Command gpuq-agent runs the GPU agent of one host: NVML inventory and
// health, the tasks dispatched to this node, preemption signals.
//
// Without --mock it loads the real NVML (libnvidia-ml.so.1) and falls back
// to mock GPUs where there is none; a statically linked build cannot load
// it and always ends up on the mock (see docs/operations.md).
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/svcmain"
	"github.com/gpuq/gpuq/services/gpuagent"
	"github.com/gpuq/gpuq/services/gpuagent/inventory"
)

const name = "gpuq-agent"

type config struct {
	node, dataDir, ckptDir string
	inv                    inventory.Options
	heartbeat, killAfter   time.Duration
	progressEvery          time.Duration
	nodeTimeout            time.Duration
	stopOnExit             bool
	metricsAddr            string
	jobSigner              string
}

func main() {
	f := svcmain.NewFlags(name)
	c := f.Common()
	var a config
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".") // a node name is one subject token
	f.String(&a.node, "node", "GPUQ_NODE", host, "node name, unique per host (default the short hostname)")
	f.String(&a.dataDir, "data-dir", "GPUQ_DATA_DIR", "", "task logs under <dir>/tasks/<id>/ (default ./.gpuq/agents/<node>)")
	f.String(&a.ckptDir, "checkpoint-dir", "GPUQ_CHECKPOINT_DIR", "", "checkpoint root shared by all nodes (default ./.gpuq/checkpoints)")
	f.Bool(&a.inv.Mock, "mock", "GPUQ_MOCK", false, "use mock GPUs even where NVML is available")
	f.Int(&a.inv.MockGPUs, "gpus", "GPUQ_MOCK_GPUS", inventory.DefaultMockGPUs, "mock GPUs on this node")
	f.String(&a.inv.MockModel, "gpu-model", "GPUQ_GPU_MODEL", "a100", "mock GPU model: "+strings.Join(inventory.MockModels(), ", "))
	f.Duration(&a.heartbeat, "heartbeat", "GPUQ_HEARTBEAT", 5*time.Second, "heartbeat interval")
	f.Duration(&a.killAfter, "kill-after", "GPUQ_KILL_AFTER", 10*time.Second, "wait between SIGTERM and SIGKILL")
	f.Duration(&a.progressEvery, "progress-every", "GPUQ_PROGRESS_EVERY", 10*time.Second, "record a job's reported progress in the log when it moved, at most this often per task (0: never; it stays in the task socket's memory)")
	f.Duration(&a.nodeTimeout, "node-timeout", "GPUQ_NODE_TIMEOUT", 30*time.Second, "the scheduler's node timeout: cut off from NATS (or gone) this long, the node's tasks are stopped")
	f.Bool(&a.stopOnExit, "stop-tasks-on-exit", "GPUQ_STOP_TASKS_ON_EXIT", false, "stop the tasks when the agent stops (default: they keep running for the next agent to adopt)")
	f.String(&a.metricsAddr, "metrics", "GPUQ_METRICS_ADDR", "", `Prometheus /metrics listen address, e.g. ":9090" ("" = none)`)
	f.String(&a.jobSigner, "job-signer", "GPUQ_JOB_SIGNER", "", "this node's job signing key (creds/agent-<node>.jobs.nk of gpuq auth init): each run gets its own credential, good for its checkpoint and history only")
	f.Parse(c)
	switch {
	case !events.ValidKey(a.node):
		f.Invalid("node", "must be a non-empty NATS subject token (no '.', '*', '>' or spaces)")
	case a.inv.MockGPUs < 1:
		f.Invalid("gpus", "must be ≥ 1")
	case !slices.Contains(inventory.MockModels(), a.inv.MockModel):
		f.Invalid("gpu-model", "must be one of "+strings.Join(inventory.MockModels(), ", "))
	case a.heartbeat < 100*time.Millisecond:
		f.Invalid("heartbeat", "must be ≥ 100ms")
	case a.killAfter <= 0:
		f.Invalid("kill-after", "must be > 0")
	case a.progressEvery < 0 || (a.progressEvery > 0 && a.progressEvery < time.Second):
		f.Invalid("progress-every", "must be 0 (never) or ≥ 1s")
	case a.nodeTimeout < time.Second:
		f.Invalid("node-timeout", "must be ≥ 1s")
	}
	if a.progressEvery == 0 {
		a.progressEvery = -1 // gpuagent.Config: never
	}
	var signer *auth.JobSigner
	if a.jobSigner != "" {
		var err error
		if signer, err = auth.LoadJobSigner(a.jobSigner); err != nil {
			f.Invalid("job-signer", err.Error())
		} else if signer.Node != a.node {
			f.Invalid("job-signer", fmt.Sprintf("the key is node %s's, not %s's", signer.Node, a.node))
		}
	}
	a.inv.Node = a.node
	if a.dataDir == "" {
		a.dataDir = filepath.Join(".gpuq", "agents", a.node)
	}
	if a.ckptDir == "" {
		a.ckptDir = filepath.Join(".gpuq", "checkpoints")
	}
	for field, p := range map[string]*string{"data-dir": &a.dataDir, "checkpoint-dir": &a.ckptDir} {
		abs, err := filepath.Abs(*p)
		if err == nil {
			err = os.MkdirAll(abs, 0o755)
		}
		if err != nil {
			f.Invalid(field, err.Error())
		}
		*p = abs
	}

	svcmain.Shell{Binary: name + "-" + a.node, Component: "gpuagent", Common: c, MetricsAddr: a.metricsAddr, Fields: map[string]string{"node": a.node},
		Run: func(ctx context.Context, env svcmain.Env) error {
			logger := env.Logger
			// The task output is served beside the agent, on the same connection.
			stopLogs, err := gpuagent.StartLogs(gpuagent.LogsConfig{NC: env.NC, Node: a.node, DataDir: a.dataDir, Logger: logger})
			if err != nil {
				return err
			}
			defer stopLogs()
			return gpuagent.Run(ctx, gpuagent.Config{Metrics: env.Metrics, Log: env.Log, Replicas: c.Replicas, JS: env.Log.JetStream(), Node: a.node, NATSURL: c.NATSURL,
				DataDir: a.dataDir, CheckpointRoot: a.ckptDir, Inventory: a.inv, Heartbeat: a.heartbeat, KillAfter: a.killAfter, ProgressEvery: a.progressEvery,
				NodeTimeout: a.nodeTimeout, StopOnExit: a.stopOnExit, JobSigner: signer,
				Logger: logger, Ready: func() { logger.Info().Str("data", a.dataDir).Str("checkpoints", a.ckptDir).Msg("ready") }})
		}}.Main()
}
