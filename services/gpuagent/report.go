package gpuagent

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// exited turns a run's end into its report, according to what the log
// says of the task; the report is appended by flush, retried until the
// log has it.
func (a *Agent) exited(x exit) {
	pr := a.procs[x.key]
	delete(a.procs, x.key)
	a.socks.Close(x.key)
	a.countLive()
	if pr == nil {
		return
	}
	t, placed := a.placedHere(pr.task, pr.dispatch)
	if pr.orphan || !placed {
		// Not this node's to report (moved, ended, or already reported).
		a.reported[x.key] = true
		_ = os.RemoveAll(pr.p.RunDir())
		return
	}
	res := x.res
	msgID := fmt.Sprintf("exit:%s:%d", pr.task, pr.dispatch)
	forced := pr.forced || res.Forced
	var ev events.Event
	preempted, why := preemptedOutcome(t, pr, res, a.gpuDied(pr))
	switch {
	case preempted:
		ev = events.Preempted{TaskID: pr.task, Node: a.cfg.Node, Checkpoint: t.Checkpoint, Forced: forced,
			LostGPUSeconds: map[bool]float64{true: a.lost(t), false: 0}[forced], ExitCode: res.ExitCode, Reason: why}
		msgID = fmt.Sprintf("preempted:%s:%d", pr.task, pr.dispatch)
	case res.ExitCode == 0 && !pr.cancelled && !res.Lost:
		ev = events.Completed{TaskID: pr.task, Node: a.cfg.Node}
	default:
		msg := fmt.Sprintf("exit code %d", res.ExitCode)
		switch {
		case pr.cancelled || t.State == domain.Cancelled:
			msg = "stopped: task cancelled"
		case res.Lost:
			msg = "process lost"
		}
		if res.Err != nil {
			msg += ": " + res.Err.Error()
		}
		ev = events.Failed{TaskID: pr.task, Node: a.cfg.Node, ExitCode: res.ExitCode, Error: msg, StderrTail: res.StderrTail}
	}
	a.pending[x.key] = report{ev: ev, msgID: msgID, task: pr.task, runDir: pr.p.RunDir(), dispatch: pr.dispatch}
	l := a.cfg.Logger.Info()
	if f, ok := ev.(events.Failed); ok {
		l = a.cfg.Logger.Warn().Str("error", f.Error)
	}
	l.Str("task_id", pr.task).Str("event", string(ev.EventType())).Int("exit_code", res.ExitCode).Bool("adopted", pr.adopted).Msg("gpuagent: task ended")
}

// gpuDied reports whether a GPU the run held is unhealthy now: a job that
// ends then (crashed with its GPU, typically) is preempted, not failed,
// and resumes elsewhere from its checkpoint.
func (a *Agent) gpuDied(pr *proc) bool {
	for _, g := range a.gpus {
		if !g.Healthy && slices.Contains(pr.gpus, g.UUID) {
			return true
		}
	}
	return false
}

// flush appends the pending exit reports, all of them published before
// any ack is awaited (events.AppendAll: asynchronous publishes on one
// connection, a bounded window in flight, one wait for the lot instead
// of one per report); one that fails — its ack timed out, the connection
// went — stays pending and is appended again by the next flush with the
// same message id, so a retry of one that was stored is a no-op. A report
// the log has overtaken (the task moved meanwhile) is dropped.
func (a *Agent) flush(ctx context.Context) {
	if !a.fenced.Load() {
		a.spooled(ctx)
	}
	var (
		keys []string
		msgs []events.Msg
	)
	for key, r := range a.pending {
		if _, placed := a.placedHere(r.task, r.dispatch); !placed {
			delete(a.pending, key)
			a.reported[key] = true
			_ = os.RemoveAll(r.runDir)
			continue
		}
		if a.fenced.Load() {
			continue
		}
		subj, data, _, err := events.Encode(r.ev, events.Meta{Time: a.cfg.Now()})
		if err != nil {
			a.cfg.Logger.Error().Err(err).Str("task_id", r.task).Str("event", string(r.ev.EventType())).Msg("gpuagent: report does not encode")
			continue
		}
		keys = append(keys, key)
		msgs = append(msgs, events.Msg{Subject: subj, Data: data, MsgID: r.msgID})
	}
	if len(msgs) == 0 {
		return
	}
	for i, res := range events.AppendAll(ctx, a.cfg.Log, msgs) {
		key := keys[i]
		r := a.pending[key]
		if res.Err != nil {
			if ctx.Err() == nil {
				a.cfg.Logger.Warn().Err(res.Err).Str("task_id", r.task).Str("event", string(r.ev.EventType())).Msg("gpuagent: report failed; will retry")
			}
			continue
		}
		delete(a.pending, key)
		a.reported[key] = true
		_ = os.RemoveAll(r.runDir)
	}
}

// pendingRefFile is where a job's `gpuq checkpoint` keeps its ref when
// NATS is unreachable (cmd/gpuq writes the same name).
const pendingRefFile = ".gpuq-pending-ref"

// spooled reports the checkpoint refs jobs kept while NATS was
// unreachable, before any exit report of theirs, so that a preempted task
// resumes from the checkpoint it saved during a partition.
func (a *Agent) spooled(ctx context.Context) {
	tasks := map[string]bool{}
	for _, pr := range a.procs {
		tasks[pr.task] = true
	}
	for _, r := range a.pending {
		tasks[r.task] = true
	}
	for task := range tasks {
		path := filepath.Join(a.cfg.CheckpointRoot, task, pendingRefFile)
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		ref, step := readSpool(b)
		t := a.view.task(task)
		if ref == "" || t == nil || !t.HoldsGPUs() || t.Checkpoint == ref {
			_ = os.Remove(path)
			continue
		}
		sum := sha256.Sum256([]byte(ref))
		_, err = events.Append(ctx, a.cfg.Log, events.Checkpointed{TaskID: task, Ref: ref, Step: step}, events.Meta{Time: a.cfg.Now()},
			fmt.Sprintf("ckpt:%s:%x", task, sum[:8]), nil)
		if err != nil {
			continue
		}
		_ = os.Remove(path)
		a.cfg.Logger.Info().Str("task_id", task).Str("ref", ref).Msg("gpuagent: reported a checkpoint kept while NATS was unreachable")
		// A report not yet in the log carries it too.
		for key, r := range a.pending {
			if p, ok := r.ev.(events.Preempted); ok && r.task == task {
				p.Checkpoint = ref
				r.ev = p
				a.pending[key] = r
			}
		}
	}
}

// countLive refreshes the heartbeat's count of live runs.
func (a *Agent) countLive() {
	var live []bool
	for _, pr := range a.procs {
		live = append(live, pr.live())
	}
	a.procMu.Lock()
	a.liveRuns = live
	a.procMu.Unlock()
}

// lost is the GPU-seconds of work since the task's last checkpoint.
func (a *Agent) lost(t *domain.Task) float64 {
	from := t.StartedAt
	if t.CheckpointAt.After(from) {
		from = t.CheckpointAt
	}
	if from.IsZero() {
		return 0
	}
	return a.cfg.Now().Sub(from).Seconds() * float64(len(t.GPUUUIDs()))
}

func (a *Agent) append(ctx context.Context, e events.Event, msgID string) {
	if _, err := events.Append(ctx, a.cfg.Log, e, events.Meta{Time: a.cfg.Now()}, msgID, nil); err != nil && ctx.Err() == nil {
		a.cfg.Logger.Error().Err(err).Str("event", string(e.EventType())).Str("task_id", e.Key()).Msg("gpuagent: append failed")
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
