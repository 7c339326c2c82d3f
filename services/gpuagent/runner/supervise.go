package runner

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// superviseEnv, set to a run directory, makes any binary that links this
// package a task supervisor instead of itself (see init). The supervisor
// clears it before starting the job, so the job never inherits it.
const superviseEnv = "GPUQ_RUNNER_SUPERVISE"

// init turns the process into a supervisor when the agent re-executed
// its own binary for one (Start): the agent binary, `gpuq dev` and every
// test binary that links the runner are all supervisors this way, and no
// second executable has to be installed beside them (Nomad re-executes
// itself as its task executor for the same reason). It runs before main
// and before the testing framework, so nothing else of the binary starts.
func init() {
	if dir := os.Getenv(superviseEnv); dir != "" {
		os.Exit(supervise(dir))
	}
}

// supervise runs the job recorded in dir/spec.json as its parent: it
// records the job's identity (proc.json), keeps the last lines of its
// stderr, waits for it, stops what is left of its process group, and
// writes the exit record (exit.json). It outlives the agent; with a
// Fence it stops the job once no agent has been alive for Fence.After.
func supervise(dir string) int {
	_ = os.Unsetenv(superviseEnv)
	// The agent's signals are for the job (its own group); a stray one
	// (the session's hangup, a terminal's interrupt) must not kill the
	// supervisor and lose the exit record. Caught, not ignored: ignored
	// dispositions would be inherited by the job.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE)
	go func() {
		for range sigs {
		}
	}()
	// The lock says "a supervisor runs here" from its first moment until
	// it exits (the kernel drops it with the process): an agent adopting
	// the run before proc.json exists waits for it instead of taking the
	// run for one that never started.
	lock, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil || syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return 1 // another supervisor has this run
	}
	defer lock.Close()
	var s Spec
	if err := readJSON(filepath.Join(dir, specFile), &s); err != nil {
		failStart(dir, "read the run's spec: "+err.Error())
		return 1
	}
	logf, err := os.OpenFile(s.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		failStart(dir, "log: "+err.Error())
		return 1
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		failStart(dir, "stderr pipe: "+err.Error())
		return 1
	}
	// Orphans of the job come to the supervisor, not to init: the task is
	// exactly its descendants (tree_linux.go), and it reaps them.
	subreaper := becomeSubreaper() == nil
	cmd := exec.Command("/bin/sh", "-c", s.Command)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), s.Env...)
	// Both are *os.File, so exec starts no copying goroutines.
	cmd.Stdout = logf
	cmd.Stderr = pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		failStart(dir, err.Error())
		return 1
	}
	pw.Close()
	pgid := cmd.Process.Pid
	self := Self()
	job := Identity{PID: pgid, Start: startTicks(pgid), Boot: BootID()}
	rec := procRecord{Supervisor: self, Job: job}
	if err := writeJSON(filepath.Join(dir, procFile), rec); err != nil {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = cmd.Wait()
		failStart(dir, "record the job: "+err.Error())
		return 1
	}
	tail := newTailBuffer(TailLines)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(io.MultiWriter(logf, tail), pr)
	}()
	done := make(chan struct{})
	if s.Fence != nil && s.Fence.AgentFile != "" && s.Fence.After > 0 {
		go fence(dir, self, job, *s.Fence, done)
	}
	if subreaper {
		go recordProcs(dir, self, done)
	}
	var leaderWS, lastWS syscall.WaitStatus
	var werr error
	if subreaper {
		leaderWS, lastWS, werr = reapAll(dir, self, job)
	} else {
		// Without a subreaper (not Linux) only the leader is ours to wait
		// for; whatever is left of its group goes with it.
		werr = cmd.Wait()
		if ps := cmd.ProcessState; ps != nil {
			leaderWS, _ = ps.Sys().(syscall.WaitStatus)
		}
		lastWS = leaderWS
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	close(done)
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
		// Something outside the task still holds stderr open.
		pr.Close()
		<-copied
	}
	pr.Close()
	logf.Close()

	res := Result{Ended: time.Now().UTC(), StderrTail: tail.String()}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		res.ErrText = werr.Error()
	}
	// The job's status is its leader's, except when the leader was killed
	// by a signal while the job was being stopped (the preemption signal
	// kills a shell that does not trap it): then it is the status of the
	// last of its processes to end, the one that checkpointed and exited.
	ws := leaderWS
	if ws.Signaled() && stopping(dir) {
		ws = lastWS
	}
	if ws.Signaled() {
		res.Signaled, res.Signal, res.ExitCode = true, ws.Signal(), 128+int(ws.Signal())
	} else {
		res.ExitCode = ws.ExitStatus()
	}
	if err := writeJSON(filepath.Join(dir, exitFile), res); err != nil {
		return 1
	}
	return 0
}

// failStart records that the job could not be started.
func failStart(dir, why string) {
	_ = writeJSON(filepath.Join(dir, exitFile), Result{ExitCode: -1, ErrText: why, Ended: time.Now().UTC()})
}

// fence stops the job with the preemption protocol once no agent has
// been alive for f.After; it returns when the job is done.
func fence(dir string, self, job Identity, f Fence, done <-chan struct{}) {
	last := time.Now()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		var agent Identity
		if readJSON(f.AgentFile, &agent) == nil && agent.Alive() {
			last = time.Now()
			continue
		}
		if time.Since(last) < f.After {
			continue
		}
		break
	}
	_ = os.WriteFile(filepath.Join(dir, stoppedFile), []byte("no agent for "+f.After.String()+"\n"), 0o644)
	sig := syscall.Signal(f.Signal)
	if sig == 0 {
		sig = syscall.SIGUSR1
	}
	wait := func(d time.Duration) bool {
		select {
		case <-done:
			return true
		case <-time.After(d):
			return false
		}
	}
	markPreempted(dir, time.Now())
	_ = signalTask(self, job, sig)
	if wait(f.Grace) {
		return
	}
	_ = os.WriteFile(filepath.Join(dir, forcedFile), nil, 0o644)
	_ = signalTask(self, job, syscall.SIGTERM)
	if wait(max(f.KillAfter, time.Second)) {
		return
	}
	_ = signalTask(self, job, syscall.SIGKILL)
}

// reapAll waits for every process of the task — the leader, and the
// orphans re-parented to the supervisor — and returns the leader's status
// and the last one reaped. When the leader ends by itself (no stop
// requested), what is left of the task is killed: a job ends with its
// command, and a stray background process must not hold the GPUs the next
// task gets. While the job is being stopped (the preemption signal was
// sent: the shell may die of it while the job checkpoints), the job ends
// when its last process ends; the agent's escalation (SIGTERM, SIGKILL at
// the grace's end) bounds that.
func reapAll(dir string, self, job Identity) (leader, last syscall.WaitStatus, err error) {
	leaderDone := false
	for {
		var ws syscall.WaitStatus
		pid, werr := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(werr, syscall.EINTR) {
			continue
		}
		if werr != nil {
			if !leaderDone && !errors.Is(werr, syscall.ECHILD) {
				err = werr
			}
			return leader, last, err
		}
		if !ws.Exited() && !ws.Signaled() {
			continue // stopped or continued: not an end
		}
		last = ws
		if pid == job.PID {
			leader, leaderDone = ws, true
		}
		if leaderDone && !stopping(dir) {
			_ = signalTask(self, job, syscall.SIGKILL)
		}
	}
}
