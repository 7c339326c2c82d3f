package gpuagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/services/gpuagent/runner"
)

// foreign tells whether a run was recorded under another log than the
// agent's: never adopted (its task ids mean nothing in this log; adopting
// it would stop a live task of the other log as an orphan and delete its
// records).
func (a *Agent) foreign(s runner.Spec) bool {
	return s.Log != "" && a.logID != "" && s.Log != a.logID
}

// adopt takes over the runs an earlier agent left under the data
// directory (once, when the log is folded) and returns them (their
// sockets are opened again once the view names their tasks: reopenSocket);
// a run recorded under another log is left alone, and logged.
func (a *Agent) adopt() (adopted []*proc) {
	dirs, _ := filepath.Glob(filepath.Join(a.cfg.DataDir, "tasks", "*", "runs", "*"))
	sort.Strings(dirs)
	for _, dir := range dirs {
		p, err := runner.Adopt(dir)
		if err != nil {
			a.cfg.Logger.Warn().Err(err).Str("run", dir).Msg("gpuagent: not a run; removing it")
			_ = os.RemoveAll(dir)
			continue
		}
		s := p.Spec()
		if a.foreign(s) {
			a.cfg.Logger.Warn().Str("run", dir).Str("run_log", s.Log).Str("log", a.logID).Bool("live", !p.Exited()).
				Msg("gpuagent: a run recorded under another event log; not adopted, left alone (its GPUs count as busy while it lives)")
			a.others = append(a.others, p)
			continue
		}
		pr := &proc{key: runKey(s.TaskID, s.Dispatch), p: p, task: s.TaskID, dispatch: s.Dispatch, gpus: s.GPUs, adopted: true}
		if _, dup := a.procs[pr.key]; dup || s.TaskID == "" {
			continue
		}
		a.procs[pr.key] = pr
		a.watch(pr)
		adopted = append(adopted, pr)
		a.cfg.Logger.Info().Str("task_id", s.TaskID).Uint64("dispatch", s.Dispatch).Int("pid", p.PID()).Bool("live", !p.Exited()).
			Msg("gpuagent: adopted a run of an earlier agent")
	}
	a.countLive()
	return adopted
}

// watch queues the run's end for the reaction.
func (a *Agent) watch(pr *proc) {
	go func() {
		a.exits <- exit{key: pr.key, res: <-pr.p.Wait()}
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}()
}

// mine returns this node's placement of t (ok false if none); rank0 is
// true when this node runs the command.
func (a *Agent) mine(t *domain.Task) (p events.Placement, rank0, ok bool) {
	for i, pl := range t.Placements {
		if pl.Node == a.cfg.Node {
			return pl, i == 0, true
		}
	}
	return events.Placement{}, false, false
}

// placedHere reports whether the log places the run (task, dispatch) on
// this node now and the task is not over.
func (a *Agent) placedHere(task string, dispatch uint64) (*domain.Task, bool) {
	t := a.view.task(task)
	if t == nil || t.DispatchSeq != dispatch || !t.HoldsGPUs() {
		return t, false
	}
	_, rank0, ok := a.mine(t)
	return t, ok && rank0
}

// reconcile compares the folded log with the runs of this node.
func (a *Agent) reconcile(ctx context.Context) {
	// Runs the log no longer places here (requeued after this node was
	// declared lost, moved, ended) are stopped without a report.
	for _, pr := range a.procs {
		if !pr.live() || pr.signalled {
			continue
		}
		t, placed := a.placedHere(pr.task, pr.dispatch)
		if placed && t.State == domain.Cancelled {
			continue // handled below: a cancelled task is reported
		}
		if !placed {
			pr.orphan, pr.signalled, pr.termAt = true, true, a.cfg.Now()
			pr.p.MarkStopped(false)
			a.cfg.Logger.Warn().Str("task_id", pr.task).Uint64("dispatch", pr.dispatch).Msg("gpuagent: the log no longer places this run here; stopping its process")
		}
	}
	if a.fenced.Load() {
		return // no new work while cut off from NATS
	}
	for _, t := range a.view.here {
		pl, rank0, ok := a.mine(t)
		if !ok || !rank0 {
			continue
		}
		key := runKey(t.ID, t.DispatchSeq)
		pr := a.procs[key]
		_, waiting := a.pending[key]
		switch {
		case t.State == domain.Dispatched && pr == nil && !waiting && !a.reported[key]:
			a.start(ctx, t, pl)
		case (t.State == domain.Running || t.State == domain.Preempting || t.State == domain.Cancelled) && pr == nil && !waiting && !a.reported[key]:
			// The log says it started here, yet no run of it is recorded:
			// the process never started (its agent died in between) or
			// its records are gone. A running one goes back to the queue
			// (it never ran), a preempting one is preempted, a cancelled
			// one ends.
			a.reported[key] = true
			if t.State == domain.Preempting {
				a.append(ctx, events.Preempted{TaskID: t.ID, Node: a.cfg.Node, Checkpoint: t.Checkpoint, Forced: true, ExitCode: -1,
					LostGPUSeconds: a.lost(t)}, fmt.Sprintf("preempted:%s:%d", t.ID, t.DispatchSeq))
				continue
			}
			if t.State == domain.Running {
				// Nothing ran: its GPUs go back and it goes back to the
				// queue at its place (the scheduler requeues it, with
				// domain.NotStartedReason). Guarded by the task's last
				// sequence, and only after the runs under the data
				// directory were adopted (adopt, at CaughtUp), so no
				// real run is requeued under it.
				_, err := events.Append(ctx, a.cfg.Log, events.Preempted{TaskID: t.ID, Node: a.cfg.Node, Checkpoint: t.Checkpoint, ExitCode: -1, NotStarted: true},
					events.Meta{Time: a.cfg.Now()}, fmt.Sprintf("preempted:%s:%d", t.ID, t.DispatchSeq), &events.Expect{Filter: events.TaskSubjects(t.ID), LastSeq: t.LastSeq})
				switch {
				case errors.Is(err, events.ErrConflict):
					a.reported[key] = false // the task changed: the next pass looks again
				case err != nil:
					a.reported[key] = false
					if ctx.Err() == nil {
						a.cfg.Logger.Warn().Err(err).Str("task_id", t.ID).Msg("gpuagent: could not give back a task that never started; will retry")
					}
				default:
					a.cfg.Logger.Warn().Str("task_id", t.ID).Uint64("dispatch", t.DispatchSeq).
						Msg("gpuagent: the log has this task started here but no run of it is recorded (the agent stopped in between): nothing ran; giving it back to the queue")
				}
				continue
			}
			a.append(ctx, events.Failed{TaskID: t.ID, Node: a.cfg.Node, ExitCode: -1, Error: "no record of the task's process on its node (the agent stopped before starting it)"},
				fmt.Sprintf("exit:%s:%d", t.ID, t.DispatchSeq))
		case t.State == domain.Preempting && pr != nil && pr.live() && !pr.signalled:
			a.signalPreempt(pr, t, time.Duration(t.GraceS*float64(time.Second)))
			a.cfg.Logger.Info().Str("task_id", t.ID).Str("signal", t.PreemptSignal).Float64("grace_s", t.GraceS).Msg("gpuagent: preempting")
		case t.State == domain.Cancelled && pr != nil && pr.live() && !pr.signalled:
			pr.signalled, pr.cancelled = true, true
			pr.termAt = a.cfg.Now() // SIGTERM at once
		}
	}
}
