package gpuagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/services/gpuagent/runner"
)

func (a *Agent) start(ctx context.Context, t *domain.Task, pl events.Placement) {
	key := runKey(t.ID, t.DispatchSeq)
	// 0. Never on a GPU a live process of another run still holds (an
	//    orphan being stopped, say): the task waits until it is free.
	busy := a.busy()
	for _, g := range pl.GPUs {
		if other := busy[g]; other != "" && other != key {
			a.cfg.Logger.Warn().Str("task_id", t.ID).Str("gpu", g).Str("held_by", other).Msg("gpuagent: a GPU of the placement is still held by a live process; waiting")
			return
		}
	}
	taskDir := filepath.Join(a.cfg.DataDir, "tasks", t.ID)
	runDir := filepath.Join(taskDir, "runs", fmt.Sprint(t.DispatchSeq))
	ckpt := filepath.Join(a.cfg.CheckpointRoot, t.ID)
	// 1. The exported environment is in the task's submitted event only.
	sub, err := events.ReadSubmitted(ctx, a.cfg.Log, t.ID, t.SubmitSeq)
	if errors.Is(err, events.ErrNotSubmitted) {
		a.reported[key] = true
		a.append(ctx, events.Failed{TaskID: t.ID, Node: a.cfg.Node, ExitCode: -1, Error: "could not start: " + err.Error()},
			fmt.Sprintf("exit:%s:%d", t.ID, t.DispatchSeq))
		return
	}
	if err != nil {
		a.cfg.Logger.Warn().Err(err).Str("task_id", t.ID).Msg("gpuagent: could not read the task's submission; retrying")
		return // the next pass tries again
	}
	// 2. Claim the start in the log, guarded: a cancel that came first wins.
	_, err = events.Append(ctx, a.cfg.Log, events.Started{TaskID: t.ID, Node: a.cfg.Node, LogDir: taskDir}, events.Meta{Time: a.cfg.Now()},
		fmt.Sprintf("started:%s:%d", t.ID, t.DispatchSeq), &events.Expect{Filter: events.TaskSubjects(t.ID), LastSeq: t.LastSeq})
	if errors.Is(err, events.ErrConflict) {
		return // the task changed; the next pass sees why
	}
	if err != nil {
		a.cfg.Logger.Error().Err(err).Str("task_id", t.ID).Msg("gpuagent: could not record start")
		return
	}
	// 3. Start the process under its supervisor, with a credential of its
	//    own when the node has a job signing key.
	creds := a.jobCreds(t, runDir)
	sock, bindSocket := a.openSocket(key, a.socketTask(t, t.DispatchSeq, pl.GPUs), runDir)
	placements, _ := json.Marshal(t.Placements)
	var env []string
	for _, k := range sortedKeys(sub.Env) {
		env = append(env, k+"="+sub.Env[k])
	}
	env = append(env,
		"CUDA_VISIBLE_DEVICES="+strings.Join(pl.GPUs, ","),
		"GPUQ_TASK_ID="+t.ID,
		"GPUQ_CHECKPOINT_DIR="+ckpt,
		"GPUQ_NATS_URL="+a.cfg.NATSURL,
		"GPUQ_NODE="+a.cfg.Node,
		"GPUQ_PLACEMENTS="+string(placements),
		// Never the agent's own credentials (issue 15): the run's own
		// (jobCreds), or none.
		"GPUQ_NATS_CREDS="+creds, "GPUQ_NATS_KEY=",
		"GPUQ_TASK_SOCKET="+sock,
	)
	if t.ResumeFrom != "" {
		env = append(env, "GPUQ_RESUME_FROM="+t.ResumeFrom)
	}
	_ = os.MkdirAll(ckpt, 0o755)
	dir := taskDir
	if st, err := os.Stat(t.Dir); t.Dir != "" && err == nil && st.IsDir() {
		dir = t.Dir // the submitter's working directory, when this node has it
	}
	_ = os.MkdirAll(taskDir, 0o755)
	sig := syscall.SIGUSR1
	if s := domain.Signals[t.PreemptSignal]; s != 0 {
		sig = s
	}
	spec := runner.Spec{TaskID: t.ID, Command: t.Command, Env: env, LogPath: filepath.Join(taskDir, "output.log"), Dir: dir,
		RunDir: runDir, GPUs: pl.GPUs, Dispatch: t.DispatchSeq, Log: a.logID,
		Fence: &runner.Fence{AgentFile: a.agentFile(), After: a.cfg.NodeTimeout, Signal: int(sig),
			Grace: time.Duration(t.GraceS * float64(time.Second)), KillAfter: a.cfg.KillAfter}}
	p, err := runner.Start(spec)
	if err != nil {
		a.socks.Close(key)
		a.reported[key] = true
		a.append(ctx, events.Failed{TaskID: t.ID, Node: a.cfg.Node, ExitCode: -1, Error: "could not start: " + err.Error()},
			fmt.Sprintf("exit:%s:%d", t.ID, t.DispatchSeq))
		_ = os.RemoveAll(runDir)
		return
	}
	bindSocket(p)
	a.cfg.Logger.Info().Str("task_id", t.ID).Str("run", runDir).Str("gpus", strings.Join(pl.GPUs, ",")).Msg("gpuagent: started")
	pr := &proc{key: key, p: p, task: t.ID, dispatch: t.DispatchSeq, gpus: pl.GPUs}
	a.procs[key] = pr
	a.watch(pr)
	a.countLive()
}

// DefaultJobCredsTTL is Config.JobCredsTTL's default.
const DefaultJobCredsTTL = 7 * 24 * time.Hour

// jobCreds mints the run's own credential into its run directory and
// answers its path; "" without a job signing key, or when minting failed
// (the job then has none, as without auth, and its checkpoints go
// through the spool).
func (a *Agent) jobCreds(t *domain.Task, runDir string) string {
	if a.cfg.JobSigner == nil {
		return ""
	}
	ttl := a.cfg.JobCredsTTL
	if est := time.Duration(2 * t.Hours * float64(time.Hour)); est > ttl {
		ttl = est
	}
	// The run directory alone is the job's (0700); the task's stays as the
	// runner makes it.
	_ = os.MkdirAll(filepath.Dir(runDir), 0o755)
	path := filepath.Join(runDir, auth.JobCredsFile)
	if err := a.cfg.JobSigner.MintJob(path, t.ID, t.DispatchSeq, a.cfg.Now().Add(ttl)); err != nil {
		a.cfg.Logger.Warn().Err(err).Str("task_id", t.ID).Msg("gpuagent: could not mint the job's credential; it runs without one")
		return ""
	}
	return path
}
