package runner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec describes one task's command.
type Spec struct {
	// TaskID names the task in errors.
	TaskID string
	// Command is run as `sh -c Command`.
	Command string
	// Env holds extra KEY=VALUE entries added after the agent's own
	// environment; they win over inherited variables of the same name.
	Env []string
	// LogPath is the file stdout and stderr are appended to; missing parent
	// directories are created.
	LogPath string
	// Dir is the working directory; empty means the agent's.
	Dir string
}

// Result is how the process ended.
type Result struct {
	// ExitCode is the exit status, or 128+signal number when Signaled, as
	// a shell reports it.
	ExitCode int
	// Signaled is true when the process was killed by a signal.
	Signaled bool
	// Signal is the signal that killed it (when Signaled).
	Signal syscall.Signal
	// Err is set when the process could not be waited for.
	Err error
}

// TailLines is how many lines of stderr StderrTail keeps.
const TailLines = 20

// DefaultTermTimeout is how long Stop waits after SIGTERM before SIGKILL.
const DefaultTermTimeout = 10 * time.Second

// Proc is a started task process (the leader of its own process group).
type Proc struct {
	// TermTimeout is how long Stop waits after SIGTERM before sending
	// SIGKILL; zero means DefaultTermTimeout. Set it before calling Stop.
	TermTimeout time.Duration

	cmd  *exec.Cmd
	pgid int
	tail *tailBuffer
	done chan struct{}
	res  Result
}

// Start starts s.Command. Errors mean nothing was started.
func Start(s Spec) (*Proc, error) {
	if strings.TrimSpace(s.Command) == "" {
		return nil, fmt.Errorf("runner: task %s: empty command", s.TaskID)
	}
	if s.LogPath == "" {
		return nil, fmt.Errorf("runner: task %s: no log path", s.TaskID)
	}
	if err := os.MkdirAll(filepath.Dir(s.LogPath), 0o755); err != nil {
		return nil, fmt.Errorf("runner: task %s: log dir: %w", s.TaskID, err)
	}
	logf, err := os.OpenFile(s.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("runner: task %s: log: %w", s.TaskID, err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("runner: task %s: stderr pipe: %w", s.TaskID, err)
	}

	cmd := exec.Command("/bin/sh", "-c", s.Command)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), s.Env...)
	// Both are *os.File, so exec starts no copying goroutines and Wait
	// returns when the leader exits, whatever its children hold open.
	cmd.Stdout = logf
	cmd.Stderr = pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("runner: task %s: start: %w", s.TaskID, err)
	}
	pw.Close()

	p := &Proc{
		cmd:  cmd,
		pgid: cmd.Process.Pid,
		tail: newTailBuffer(TailLines),
		done: make(chan struct{}),
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(io.MultiWriter(logf, p.tail), pr)
	}()
	go p.wait(logf, pr, copied)
	return p, nil
}

func (p *Proc) wait(logf, pr *os.File, copied <-chan struct{}) {
	err := p.cmd.Wait()
	// The task is over when its leader exits: whatever is left in its
	// group would hold GPUs the next task gets, so it goes too.
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
		// Something outside the group still holds stderr open.
		pr.Close()
		<-copied
	}
	pr.Close()
	logf.Close()

	var res Result
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
	default:
		res.Err = err
	}
	if ps := p.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signaled = true
			res.Signal = ws.Signal()
			res.ExitCode = 128 + int(ws.Signal())
		} else {
			res.ExitCode = ps.ExitCode()
		}
	}
	p.res = res
	close(p.done)
}

// PID is the process ID of the `sh` leader, which is also the process group
// ID.
func (p *Proc) PID() int { return p.pgid }

// Wait returns a channel that receives the Result once the process has
// exited (and the log is complete), then is closed. Every call gets its own
// channel.
func (p *Proc) Wait() <-chan Result {
	ch := make(chan Result, 1)
	go func() {
		<-p.done
		ch <- p.res
		close(ch)
	}()
	return ch
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to every process in the task's process group. It returns
// os.ErrProcessDone once the task has exited.
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return os.ErrProcessDone
	}
	if err := syscall.Kill(-p.pgid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return fmt.Errorf("runner: signal %v to group %d: %w", sig, p.pgid, err)
	}
	return nil
}

// Stop ends the task: it sends first to the group and waits up to grace for
// the leader to exit; then sends SIGTERM and waits up to TermTimeout; then
// sends SIGKILL. It returns when the process has exited, and reports whether
// it had to escalate (the process did not exit within grace after first).
func (p *Proc) Stop(grace time.Duration, first syscall.Signal) (forced bool) {
	if p.waitFor(first, grace) {
		return false
	}
	term := p.TermTimeout
	if term <= 0 {
		term = DefaultTermTimeout
	}
	if !p.waitFor(syscall.SIGTERM, term) {
		_ = p.Signal(syscall.SIGKILL)
		<-p.done
	}
	return true
}

// waitFor sends sig and reports whether the process exited within d.
func (p *Proc) waitFor(sig syscall.Signal, d time.Duration) bool {
	if p.Signal(sig) == os.ErrProcessDone {
		<-p.done
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// StderrTail returns the last TailLines lines the process wrote to stderr.
func (p *Proc) StderrTail() string { return p.tail.String() }

// maxLine bounds the bytes kept per stderr line.
const maxLine = 4096

// tailBuffer keeps the last n lines written to it.
type tailBuffer struct {
	mu      sync.Mutex
	n       int
	lines   []string // ring of complete lines
	next    int      // ring write position once full
	partial []byte   // current unterminated line
}

func newTailBuffer(n int) *tailBuffer { return &tailBuffer{n: n} }

func (b *tailBuffer) Write(data []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rest := data
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			b.addPartial(rest)
			break
		}
		b.addPartial(rest[:i])
		b.push(string(b.partial))
		b.partial = b.partial[:0]
		rest = rest[i+1:]
	}
	return len(data), nil
}

func (b *tailBuffer) addPartial(p []byte) {
	if room := maxLine - len(b.partial); room < len(p) {
		p = p[:max(room, 0)]
	}
	b.partial = append(b.partial, p...)
}

func (b *tailBuffer) push(line string) {
	if len(b.lines) < b.n {
		b.lines = append(b.lines, line)
		return
	}
	b.lines[b.next] = line
	b.next = (b.next + 1) % b.n
}

// String is the kept lines in order, newline-separated, including an
// unterminated last line.
func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.lines)+1)
	out = append(out, b.lines[b.next:]...)
	out = append(out, b.lines[:b.next]...)
	if len(b.partial) > 0 {
		out = append(out, string(b.partial))
		if len(out) > b.n {
			out = out[1:]
		}
	}
	return strings.Join(out, "\n")
}

// SignalJob delivers a signal meant for the job itself (the preemption
// signal) without killing the shell that wraps it: when the group leader
// is still the wrapping /bin/sh, every other process of the group gets the
// signal; when the shell exec'd the job (or is gone), the whole group does.
// A shell that dies of SIGUSR1 would otherwise take the checkpointing job
// with it (the runner stops the group when its leader exits).
func (p *Proc) SignalJob(sig syscall.Signal) error {
	pgid := p.PID()
	if !isShell(pgid) {
		return p.Signal(sig)
	}
	members := groupMembers(pgid)
	if len(members) == 0 {
		return p.Signal(sig)
	}
	var first error
	for _, pid := range members {
		if err := syscall.Kill(pid, sig); err != nil && err != syscall.ESRCH && first == nil {
			first = err
		}
	}
	return first
}

// isShell reports whether pid runs the same binary as /bin/sh.
func isShell(pid int) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false
	}
	sh, err := filepath.EvalSymlinks("/bin/sh")
	return err == nil && exe == sh
}

// groupMembers lists the processes of process group pgid except its leader
// (Linux /proc; empty elsewhere).
func groupMembers(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces; skip past ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 2 {
			if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
				out = append(out, pid)
			}
		}
	}
	return out
}
