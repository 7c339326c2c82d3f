package gpuagent

import (
	"sync"
	"syscall"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
)

// signalPreempt starts the preemption protocol on a run: the task's
// signal now, SIGTERM after grace, SIGKILL KillAfter later (escalate).
func (a *Agent) signalPreempt(pr *proc, t *domain.Task, grace time.Duration) {
	sig := syscall.SIGUSR1
	if t != nil {
		if s := domain.Signals[t.PreemptSignal]; s != 0 {
			sig = s
		}
	}
	pr.signalled, pr.preempt, pr.termAt = true, true, a.cfg.Now().Add(grace)
	_ = pr.p.Preempt(sig)
	a.notePreempt(pr, t, grace)
}

// fence stops every run when NATS has not taken a heartbeat for the node
// timeout: the scheduler has declared the node lost and requeued its
// tasks, so they must not hold these GPUs any longer. The ends are kept
// and reported (or dropped, if the log moved the task) on reconnection.
func (a *Agent) fence() {
	since := a.cfg.Now().Sub(time.Unix(0, a.lastOK.Load()))
	if since <= a.cfg.NodeTimeout {
		if a.fenced.Load() {
			a.cfg.Logger.Info().Msg("gpuagent: NATS reachable again; taking work")
			a.fenced.Store(false)
		}
		return
	}
	if a.fenced.Load() {
		return
	}
	a.fenced.Store(true)
	a.cfg.Logger.Warn().Str("offline", since.Round(time.Second).String()).Str("node_timeout", a.cfg.NodeTimeout.String()).
		Msg("gpuagent: cut off from NATS for longer than the node timeout; stopping every task")
	for _, pr := range a.procs {
		if !pr.live() || pr.signalled {
			continue
		}
		pr.fenced = true
		pr.p.MarkStopped(false)
		t := a.view.task(pr.task)
		grace := 10 * time.Second
		if t != nil {
			grace = time.Duration(t.GraceS * float64(time.Second))
		}
		a.signalPreempt(pr, t, grace)
	}
}

// stop is the one way out: with StopOnExit every live run is stopped by
// the preemption protocol (grace and SIGTERM wait capped at 5 s each, a
// shutdown must not hang) and recorded as stopped, so the next agent
// reports it preempted; otherwise the runs keep going under their
// supervisors for the next agent to adopt.
func (a *Agent) stop() {
	live := 0
	for _, pr := range a.procs {
		if pr.live() {
			live++
		}
	}
	if live == 0 {
		return
	}
	if !a.cfg.StopOnExit {
		a.cfg.Logger.Info().Int("tasks", live).Str("node_timeout", a.cfg.NodeTimeout.String()).
			Msg("gpuagent: stopping; the tasks keep running for the next agent to adopt (they stop themselves if none comes back within the node timeout)")
		return
	}
	a.cfg.Logger.Info().Int("tasks", live).Msg("gpuagent: stopping the tasks")
	capped := func(d time.Duration) time.Duration { return min(d, 5*time.Second) }
	var wg sync.WaitGroup
	for _, pr := range a.procs {
		if !pr.live() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := a.view.task(pr.task)
			sig, grace := syscall.SIGUSR1, 5*time.Second
			if t != nil {
				if s := domain.Signals[t.PreemptSignal]; s != 0 {
					sig = s
				}
				grace = capped(time.Duration(t.GraceS * float64(time.Second)))
			}
			pr.p.MarkStopped(false)
			if pr.signalled && !pr.preempt {
				sig, grace = syscall.SIGTERM, 0 // cancelled or orphaned: no checkpoint wanted
			}
			wait := func(d time.Duration) bool {
				select {
				case <-pr.p.Wait():
					return true
				case <-time.After(d):
					return false
				}
			}
			_ = pr.p.Preempt(sig)
			if wait(grace) {
				return
			}
			pr.p.MarkStopped(true)
			_ = pr.p.Signal(syscall.SIGTERM)
			if wait(capped(a.cfg.KillAfter)) {
				return
			}
			_ = pr.p.Signal(syscall.SIGKILL)
			<-pr.p.Wait()
		}()
	}
	wg.Wait()
}

// escalate sends SIGTERM after the grace period and SIGKILL after that.
func (a *Agent) escalate() {
	now := a.cfg.Now()
	for _, pr := range a.procs {
		if !pr.live() {
			continue
		}
		switch {
		case pr.signalled && pr.killAt.IsZero() && !pr.termAt.IsZero() && !now.Before(pr.termAt):
			pr.forced = pr.preempt
			if pr.forced {
				pr.p.MarkStopped(true)
			}
			pr.killAt = now.Add(a.cfg.KillAfter)
			_ = pr.p.Signal(syscall.SIGTERM)
		case !pr.killAt.IsZero() && !now.Before(pr.killAt):
			_ = pr.p.Signal(syscall.SIGKILL)
			pr.killAt = now.Add(time.Hour)
		}
	}
}
