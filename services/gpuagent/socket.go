package gpuagent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/services/gpuagent/runner"
	"github.com/gpuq/gpuq/services/gpuagent/tasksock"
)

// The task socket (GPUQ_TASK_SOCKET, package tasksock): the agent opens a
// run's socket before it starts the job and again when it adopts the run,
// tells it of the run's preemption when it sends the signal, and closes it
// when the run ends. Checkpoints a job reports through it are appended as
// checkpointed events by the agent, or kept in the node's spool while NATS
// is out of reach, as `gpuq checkpoint` does.

// socketOwner answers the supervisor of a run whose Proc may not exist yet
// (the socket opens before the job starts).
type socketOwner struct{ p atomic.Pointer[runner.Proc] }

func (o *socketOwner) pid() int {
	if p := o.p.Load(); p != nil {
		return p.SupervisorPID()
	}
	return 0
}

// socketTask is what a run's socket says of its task.
func (a *Agent) socketTask(t *domain.Task, dispatch uint64, gpus []string) tasksock.Task {
	out := tasksock.Task{ID: t.ID, Name: t.Name, Team: t.Team, Attempt: t.Preemptions + 1, Run: dispatch,
		GraceS: t.GraceS, Signal: t.PreemptSignal, GPUs: gpus, Node: a.cfg.Node,
		CheckpointDir: filepath.Join(a.cfg.CheckpointRoot, t.ID)}
	if t.DispatchSeq == dispatch {
		out.ResumeFrom, out.ResumeStep = t.ResumeFrom, t.ResumeStep
	}
	if out.GPUs == nil {
		out.GPUs = []string{}
	}
	return out
}

// openSocket opens the run's socket; bind tells it the run's Proc once
// started. A socket that cannot be opened is logged and the job runs
// without one (GPUQ_TASK_SOCKET empty).
func (a *Agent) openSocket(key string, task tasksock.Task, runDir string) (path string, bind func(*runner.Proc)) {
	owner := &socketOwner{}
	k, err := a.socks.Open(tasksock.Run{Key: key, RunDir: runDir, Task: task, Owner: owner.pid})
	if err != nil {
		a.cfg.Logger.Warn().Err(err).Str("task_id", task.ID).Msg("gpuagent: could not open the task socket; the job runs without one")
		return "", func(*runner.Proc) {}
	}
	return k.Path(), func(p *runner.Proc) { owner.p.Store(p) }
}

// reopenSocket opens an adopted run's socket again.
func (a *Agent) reopenSocket(pr *proc) {
	if !pr.live() {
		return
	}
	task := tasksock.Task{ID: pr.task, Run: pr.dispatch, GPUs: pr.gpus, Node: a.cfg.Node,
		CheckpointDir: filepath.Join(a.cfg.CheckpointRoot, pr.task)}
	if t := a.view.task(pr.task); t != nil {
		task = a.socketTask(t, pr.dispatch, pr.gpus)
	}
	_, bind := a.openSocket(pr.key, task, pr.p.RunDir())
	bind(pr.p)
}

// notePreempt tells the run's socket of its preemption, once the signal
// is sent: the deadline is when SIGTERM comes.
func (a *Agent) notePreempt(pr *proc, t *domain.Task, grace time.Duration) {
	k := a.socks.Get(pr.key)
	if k == nil {
		return
	}
	deadline := pr.termAt.UTC()
	p := tasksock.Preemption{Requested: true, Deadline: &deadline, GraceS: grace.Seconds()}
	switch {
	case pr.fenced || t == nil || t.State != domain.Preempting:
		p.Policy = "fence"
		p.Reason = "the node is cut off from NATS for longer than the node timeout: the scheduler requeues the task elsewhere"
	default:
		p.ByTask, p.Policy = t.PreemptFor, t.PreemptPolicy
		p.Reason = t.Reason // the request's own, naming its preemptor
		by := a.view.task(t.PreemptFor)
		if by != nil {
			p.ByPriority = by.Priority.String()
		}
		switch {
		case p.Reason != "":
		case by != nil:
			p.Reason = fmt.Sprintf("preempted for %s (%s, team %s)", by.ID, by.Priority, by.Team)
		case t.PreemptFor != "":
			p.Reason = "preempted for " + t.PreemptFor
		default:
			p.Reason = "preempted"
		}
	}
	k.SetPreemption(p)
}

// socketBackend records the checkpoints jobs report through their sockets.
type socketBackend struct{ a *Agent }

// Checkpoint appends the checkpointed event while the log places the run
// here; cut off from NATS, it keeps the checkpoint in the task's spool
// (<checkpoint dir>/.gpuq-pending-ref, as `gpuq checkpoint` does), which
// the agent reports once NATS is back.
func (b socketBackend) Checkpoint(ctx context.Context, task tasksock.Task, c tasksock.Checkpoint) (tasksock.Committed, error) {
	a := b.a
	out := tasksock.Committed{TaskID: task.ID, Ref: c.Ref, Step: c.Step}
	var refuse error
	if f := a.fold.Load(); f != nil {
		f.Read(func(st *domain.State) {
			t := st.Tasks[task.ID]
			switch {
			case t == nil:
				refuse = tasksock.Refuse(http.StatusConflict, "task_id", "the node's log has no task "+task.ID+" yet")
			case t.DispatchSeq != task.Run || !t.HoldsGPUs():
				refuse = tasksock.Refuse(http.StatusConflict, "task_id", fmt.Sprintf("task %s is %s and this run (%d) is over: a checkpoint is accepted only while its run lasts", t.ID, t.State, task.Run))
			}
		})
	}
	if refuse != nil {
		return out, refuse
	}
	fenced := a.fenced.Load()
	err := errors.New("the node is cut off from NATS")
	if !fenced {
		// Cut off for less than the node timeout, the append waits at most
		// 5 s before the checkpoint goes to the spool.
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var ack events.Ack
		ack, err = events.Append(actx, a.cfg.Log, events.Checkpointed{TaskID: task.ID, Ref: c.Ref, Step: c.Step}, events.Meta{Time: a.cfg.Now()}, "", nil)
		if err == nil {
			out.Seq = ack.Seq
			return out, nil
		}
	}
	if serr := spoolCheckpoint(filepath.Join(a.cfg.CheckpointRoot, task.ID), c.Ref, c.Step); serr != nil {
		return out, fmt.Errorf("the log refused it (%v) and the spool too: %w", err, serr)
	}
	out.Spooled = true
	out.Note = "NATS is out of reach (" + err.Error() + "); the node keeps the checkpoint and reports it when NATS is back"
	a.cfg.Logger.Warn().Err(err).Str("task_id", task.ID).Str("ref", c.Ref).Msg("gpuagent: a checkpoint kept in the spool while NATS is out of reach")
	return out, nil
}

// spoolCheckpoint writes a checkpoint into a task's spool: the ref on the
// first line, "step N" on the second when there is one (gpuq checkpoint
// writes the ref alone).
func spoolCheckpoint(dir, ref string, step int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	body := ref
	if step > 0 {
		body += "\nstep " + strconv.FormatInt(step, 10)
	}
	path := filepath.Join(dir, pendingRefFile)
	if err := os.WriteFile(path+".tmp", []byte(body+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// readSpool reads a task's spool: its ref and step (0: none given).
func readSpool(b []byte) (ref string, step int64) {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	ref = strings.TrimSpace(lines[0])
	for _, l := range lines[1:] {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "step "); ok {
			step, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return ref, step
}

// progressMark is a run's progress last recorded: when its job reported it,
// and when it was appended.
type progressMark struct{ reported, appended time.Time }

// recordProgress appends the progress jobs reported through their sockets:
// for each live run whose progress moved since it was last recorded, at
// most once per ProgressEvery. Cut off from NATS, nothing is appended (the
// latest stays in memory and is recorded once NATS is back).
func (a *Agent) recordProgress(ctx context.Context) {
	if a.cfg.ProgressEvery < 0 || a.fenced.Load() {
		return
	}
	now := a.cfg.Now()
	for _, pr := range a.procs {
		if !pr.live() || now.Sub(pr.progress.appended) < a.cfg.ProgressEvery {
			continue
		}
		k := a.socks.Get(pr.key)
		if k == nil {
			continue
		}
		p, ok := k.Progress()
		if !ok || !p.At.After(pr.progress.reported) {
			continue
		}
		if t, placed := a.placedHere(pr.task, pr.dispatch); !placed || (t.State != domain.Running && t.State != domain.Preempting) {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := events.Append(actx, a.cfg.Log, events.ProgressReported{TaskID: pr.task, Node: a.cfg.Node, Step: p.Step, Total: p.Total, Fraction: p.Fraction},
			events.Meta{Time: now}, "", nil)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				a.cfg.Logger.Warn().Err(err).Str("task_id", pr.task).Msg("gpuagent: could not record the job's progress; will retry")
			}
			return
		}
		pr.progress = progressMark{reported: p.At, appended: now}
	}
}
