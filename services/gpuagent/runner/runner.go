package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec describes one task's command.
type Spec struct {
	// TaskID names the task in errors.
	TaskID string `json:"task_id"`
	// Command is run as `sh -c Command`.
	Command string `json:"command"`
	// Env holds extra KEY=VALUE entries added after the agent's own
	// environment; they win over inherited variables of the same name.
	Env []string `json:"env,omitempty"`
	// LogPath is the file stdout and stderr are appended to; missing parent
	// directories are created.
	LogPath string `json:"log_path"`
	// Dir is the working directory; empty means the agent's.
	Dir string `json:"dir,omitempty"`
	// RunDir holds this run's records (spec.json, proc.json, exit.json);
	// one directory per run, never reused. Empty: <dir of LogPath>/run.
	RunDir string `json:"run_dir"`
	// Fence, when set, makes the supervisor stop the job itself once no
	// agent has been alive for Fence.After (see Fence).
	Fence *Fence `json:"fence,omitempty"`
	// GPUs the run holds (the agent's bookkeeping; kept for adoption).
	GPUs []string `json:"gpus,omitempty"`
	// Dispatch is the dispatch sequence the run belongs to (the agent's
	// bookkeeping; kept for adoption).
	Dispatch uint64 `json:"dispatch,omitempty"`
	// Log is the identity of the event log the run was started under
	// (events.Identifier): an agent adopts only the runs of its own log.
	// Empty in runs of an agent older than the field.
	Log string `json:"log,omitempty"`
}

// Fence is how a supervisor stops its job when the agent is gone: after
// After without a live process at AgentFile (an Identity in JSON), it
// sends Signal to the job, waits Grace, sends SIGTERM, waits KillAfter,
// sends SIGKILL — the preemption protocol — and records Stopped. By then
// the scheduler has declared the node lost and requeued the task, so the
// job must not hold its GPUs any longer.
type Fence struct {
	AgentFile string        `json:"agent_file"`
	After     time.Duration `json:"after"`
	Signal    int           `json:"signal"`
	Grace     time.Duration `json:"grace"`
	KillAfter time.Duration `json:"kill_after"`
}

// Result is how the process ended.
type Result struct {
	// ExitCode is the exit status, or 128+signal number when Signaled, as
	// a shell reports it; -1 when unknown (Lost).
	ExitCode int `json:"exit_code"`
	// Signaled is true when the process was killed by a signal.
	Signaled bool `json:"signaled,omitempty"`
	// Signal is the signal that killed it (when Signaled).
	Signal syscall.Signal `json:"signal,omitempty"`
	// Stopped is true when the job was stopped on purpose (Proc.MarkStopped
	// or the supervisor's fence) rather than ending by itself; Forced
	// when that stop needed SIGTERM or SIGKILL after the grace.
	Stopped bool `json:"stopped,omitempty"`
	Forced  bool `json:"forced,omitempty"`
	// Lost is true when the process is gone without an exit record (its
	// supervisor was killed, or the machine rebooted while it ran).
	Lost bool `json:"lost,omitempty"`
	// StderrTail is the last TailLines lines of the job's stderr.
	StderrTail string `json:"stderr_tail,omitempty"`
	// Ended is when the supervisor saw the job end.
	Ended time.Time `json:"ended,omitzero"`
	// Err is set when the process could not be started or waited for.
	Err error `json:"-"`
	// ErrText carries Err across the exit record.
	ErrText string `json:"error,omitempty"`
}

// TailLines is how many lines of stderr StderrTail keeps.
const TailLines = 20

// DefaultTermTimeout is how long Stop waits after SIGTERM before SIGKILL.
const DefaultTermTimeout = 10 * time.Second

// The records of a run directory.
const (
	specFile    = "spec.json"
	procFile    = "proc.json"
	exitFile    = "exit.json"
	stoppedFile = "stopped"
	// procsFile lists the task's processes as its supervisor last saw
	// them (identities), for an agent to sweep when the supervisor died.
	procsFile = "procs.json"
	// preemptedFile holds when the preemption signal was sent (RFC 3339).
	preemptedFile = "preempted"
	forcedFile    = "stopped.forced"
	lockFile      = "supervisor.lock"
	superLog      = "supervisor.log"
)

// ErrNoRun is returned by Adopt for a directory that holds no started run.
var ErrNoRun = errors.New("runner: no run recorded")

// procRecord is proc.json: who supervises and which process group is the
// job.
type procRecord struct {
	Supervisor Identity `json:"supervisor"`
	Job        Identity `json:"job"`
}

// Proc is a started task: a supervisor process (this binary, re-executed;
// see supervise.go) that is the parent of the job — `sh -c Command`, the
// leader of its own process group — waits for it and writes its exit
// record. The job therefore outlives the agent, and a restarted agent
// adopts it (Adopt) and still learns its real exit code.
type Proc struct {
	// TermTimeout is how long Stop waits after SIGTERM before sending
	// SIGKILL; zero means DefaultTermTimeout. Set it before calling Stop.
	TermTimeout time.Duration

	spec   Spec
	rec    procRecord
	pgid   int
	reaped chan struct{} // closed when our child supervisor is reaped (nil if adopted)
	ready  chan struct{} // closed once rec and pgid are known
	done   chan struct{}
	res    Result
	mu     sync.Mutex
}

// Start starts s.Command under a new supervisor. Errors mean nothing was
// started.
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
	if s.Dir != "" {
		if st, err := os.Stat(s.Dir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("runner: task %s: start: working directory %s is not a directory", s.TaskID, s.Dir)
		}
	}
	if s.RunDir == "" {
		s.RunDir = filepath.Join(filepath.Dir(s.LogPath), "run")
	}
	if err := os.MkdirAll(s.RunDir, 0o755); err != nil {
		return nil, fmt.Errorf("runner: task %s: run dir: %w", s.TaskID, err)
	}
	for _, f := range []string{procFile, exitFile} {
		if _, err := os.Stat(filepath.Join(s.RunDir, f)); err == nil {
			return nil, fmt.Errorf("runner: task %s: %s already holds a run", s.TaskID, s.RunDir)
		}
	}
	if err := writeJSON(filepath.Join(s.RunDir, specFile), s); err != nil {
		return nil, fmt.Errorf("runner: task %s: %w", s.TaskID, err)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("runner: task %s: find the supervisor binary: %w", s.TaskID, err)
	}
	slog, err := os.OpenFile(filepath.Join(s.RunDir, superLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("runner: task %s: %w", s.TaskID, err)
	}
	defer slog.Close()
	cmd := exec.Command(exe)
	cmd.Args = []string{"gpuq-supervise", s.RunDir}
	cmd.Env = append(os.Environ(), superviseEnv+"="+s.RunDir)
	cmd.Stdout, cmd.Stderr = slog, slog
	// Its own session: no signal meant for the agent's group or terminal
	// reaches it, and it survives the agent.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("runner: task %s: start the supervisor: %w", s.TaskID, err)
	}
	reaped := make(chan struct{})
	go func() { _ = cmd.Wait(); close(reaped) }()
	// The supervisor records the job (or why it could not start it) in a
	// few milliseconds; the caller does not wait for it: Signal and PID
	// do, and a start that fails ends as a Result with Err.
	p := &Proc{spec: s, reaped: reaped, done: make(chan struct{}), ready: make(chan struct{})}
	go p.await()
	return p, nil
}

// awaitRead reads a run record for await (a seam: tests make a read
// miss, as a busy machine's scheduling can).
var awaitRead = readJSON

// await waits for the supervisor's record of the job, then watches it.
func (p *Proc) await() {
	s := p.spec
	deadline := time.Now().Add(30 * time.Second)
	for {
		var rec procRecord
		if awaitRead(filepath.Join(s.RunDir, procFile), &rec) == nil && rec.Job.PID > 0 {
			p.setRecord(rec)
			p.watch()
			return
		}
		var res Result
		if awaitRead(filepath.Join(s.RunDir, exitFile), &res) == nil {
			// The job may have run and ended between the two reads: the
			// supervisor writes proc.json before exit.json.
			if awaitRead(filepath.Join(s.RunDir, procFile), &rec) == nil && rec.Job.PID > 0 {
				p.setRecord(rec)
				p.watch()
				return
			}
			p.setRecord(procRecord{})
			res.ExitCode = -1
			res.ErrText = "start: " + res.ErrText
			p.finish(res)
			return
		}
		select {
		case <-p.reaped:
			if awaitRead(filepath.Join(s.RunDir, procFile), &rec) == nil && rec.Job.PID > 0 {
				p.setRecord(rec)
				p.watch()
				return
			}
			if awaitRead(filepath.Join(s.RunDir, exitFile), &res) == nil {
				p.setRecord(procRecord{})
				res.ExitCode = -1
				res.ErrText = "start: " + res.ErrText
				p.finish(res)
				return
			}
			b, _ := os.ReadFile(filepath.Join(s.RunDir, superLog))
			p.setRecord(procRecord{})
			p.finish(Result{ExitCode: -1, ErrText: "start: the supervisor exited before starting the job: " + strings.TrimSpace(string(b))})
			return
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.setRecord(procRecord{})
			p.finish(Result{ExitCode: -1, ErrText: "start: the supervisor did not start the job within 30s"})
			return
		}
	}
}

// setRecord publishes the job's identity (once).
func (p *Proc) setRecord(rec procRecord) {
	p.mu.Lock()
	p.rec, p.pgid = rec, rec.Job.PID
	p.mu.Unlock()
	close(p.ready)
}

// job waits (briefly) until the job's identity is known and returns it.
func (p *Proc) job() (procRecord, int) {
	select {
	case <-p.ready:
	case <-time.After(10 * time.Second):
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rec, p.pgid
}

// Adopt takes over the run recorded in runDir by an earlier agent: a
// live job is watched as if this process had started it; a job that
// ended meanwhile yields its recorded result at once; one that is gone
// without a record (its supervisor killed, or the machine rebooted)
// yields a Lost result. ErrNoRun: the directory holds no started run.
func Adopt(runDir string) (*Proc, error) {
	var s Spec
	if err := readJSON(filepath.Join(runDir, specFile), &s); err != nil {
		return nil, fmt.Errorf("%w in %s: %v", ErrNoRun, runDir, err)
	}
	s.RunDir = runDir
	var rec procRecord
	err := readJSON(filepath.Join(runDir, procFile), &rec)
	for deadline := time.Now().Add(10 * time.Second); err != nil && supervised(runDir) && time.Now().Before(deadline); {
		// Its supervisor is starting it: the record comes in a moment.
		time.Sleep(5 * time.Millisecond)
		err = readJSON(filepath.Join(runDir, procFile), &rec)
	}
	if err != nil {
		var res Result
		if readJSON(filepath.Join(runDir, exitFile), &res) == nil {
			return finished(s, res), nil // it never started
		}
		return nil, fmt.Errorf("%w in %s: %v", ErrNoRun, runDir, err)
	}
	return watch(s, rec, nil), nil
}

// supervised reports whether a supervisor holds the run's lock now.
func supervised(runDir string) bool {
	f, err := os.Open(filepath.Join(runDir, lockFile))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// Spec is what the run was started with.
func (p *Proc) Spec() Spec { return p.spec }

func finished(s Spec, res Result) *Proc {
	p := &Proc{spec: s, done: make(chan struct{}), ready: make(chan struct{}), res: res}
	close(p.ready)
	if res.ErrText != "" {
		p.res.Err = errors.New(res.ErrText)
	}
	close(p.done)
	return p
}

// watch follows a recorded run until its exit record appears or its
// supervisor is gone.
func watch(s Spec, rec procRecord, reaped chan struct{}) *Proc {
	p := &Proc{spec: s, rec: rec, pgid: rec.Job.PID, reaped: reaped, done: make(chan struct{}), ready: make(chan struct{})}
	close(p.ready)
	go p.watch()
	return p
}

func (p *Proc) watch() {
	exitPath := filepath.Join(p.spec.RunDir, exitFile)
	gone := func() bool {
		if p.reaped != nil {
			select {
			case <-p.reaped:
				return true
			default:
				return false
			}
		}
		return !p.rec.Supervisor.Alive()
	}
	for {
		var res Result
		if readJSON(exitPath, &res) == nil {
			p.finish(res)
			return
		}
		if p.reaped != nil {
			// Our own child: its exit is the moment to look (the record
			// is written just before); poll slowly otherwise.
			select {
			case <-p.reaped:
			case <-time.After(500 * time.Millisecond):
			}
		}
		if gone() {
			if readJSON(exitPath, &res) == nil {
				p.finish(res)
				return
			}
			// No supervisor, no record: whatever is left of the job must
			// not keep its GPUs.
			if p.rec.Job.Alive() {
				_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
			}
			killRecorded(p.spec.RunDir)
			why := "its supervisor is gone without an exit record"
			if p.rec.Supervisor.Boot != BootID() {
				why = "the machine rebooted while it ran"
			}
			p.finish(Result{ExitCode: -1, Lost: true, ErrText: why})
			return
		}
		if p.reaped == nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func (p *Proc) finish(res Result) {
	if res.ErrText != "" {
		res.Err = errors.New(res.ErrText)
	}
	if _, err := os.Stat(filepath.Join(p.spec.RunDir, stoppedFile)); err == nil {
		res.Stopped = true
	}
	if _, err := os.Stat(filepath.Join(p.spec.RunDir, forcedFile)); err == nil {
		res.Forced = true
	}
	p.mu.Lock()
	p.res = res
	p.mu.Unlock()
	close(p.done)
}

// MarkStopped records that the job is being stopped on purpose (the
// agent's fence or shutdown), so that whoever reads its result, this
// agent or a restarted one, knows it did not end by itself; forced, that
// the stop went past the grace (SIGTERM or SIGKILL).
func (p *Proc) MarkStopped(forced bool) {
	_ = os.WriteFile(filepath.Join(p.spec.RunDir, stoppedFile), nil, 0o644)
	if forced {
		_ = os.WriteFile(filepath.Join(p.spec.RunDir, forcedFile), nil, 0o644)
	}
}

// PID is the process ID of the job's `sh` leader, which is also the
// process group ID (0 for a run that never started).
func (p *Proc) PID() int {
	_, pgid := p.job()
	return pgid
}

// SupervisorPID is the pid of the run's supervisor, every process of the
// task descending from it; 0 while it is not known yet, or when it is no
// longer alive. It never waits.
func (p *Proc) SupervisorPID() int {
	select {
	case <-p.ready:
	default:
		return 0
	}
	p.mu.Lock()
	sup := p.rec.Supervisor
	p.mu.Unlock()
	if p.Exited() || !sup.Alive() {
		return 0
	}
	return sup.PID
}

// RunDir is the run's directory.
func (p *Proc) RunDir() string { return p.spec.RunDir }

// Wait returns a channel that receives the Result once the process has
// exited (and the log is complete), then is closed. Every call gets its own
// channel.
func (p *Proc) Wait() <-chan Result {
	ch := make(chan Result, 1)
	go func() {
		<-p.done
		p.mu.Lock()
		ch <- p.res
		p.mu.Unlock()
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

// Signal sends sig to every process of the task: its process group and
// the descendants of its supervisor that left the group (see signalTask).
// It returns os.ErrProcessDone once the task has exited.
func (p *Proc) Signal(sig syscall.Signal) error {
	rec, pgid := p.job()
	if p.Exited() || pgid <= 0 {
		return os.ErrProcessDone
	}
	if err := signalTask(rec.Supervisor, rec.Job, sig); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			return os.ErrProcessDone
		}
		return fmt.Errorf("runner: signal %v to task %s: %w", sig, p.spec.TaskID, err)
	}
	return nil
}

// Stop ends the task: it sends first to every process of the task and
// waits up to grace for the task to end (its last process); then sends SIGTERM and waits up to TermTimeout; then
// sends SIGKILL. It returns when the process has exited, and reports whether
// it had to escalate (the process did not exit within grace after first).
func (p *Proc) Stop(grace time.Duration, first syscall.Signal) (forced bool) {
	if !p.Exited() {
		markPreempted(p.spec.RunDir, time.Now())
	}
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

// StderrTail returns the last TailLines lines the process wrote to
// stderr, once it has exited.
func (p *Proc) StderrTail() string {
	if !p.Exited() {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res.StderrTail
}

// writeJSON writes v to path atomically (temp file, fsync, rename).
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

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

// Preempt delivers the preemption signal to every process of the task
// (its process group and the descendants of its supervisor that left it),
// the wrapping shell included: the rest of a shell chain must never run
// after a preemption request, and a shell that does not trap the signal
// dies of it, while a job that traps it checkpoints and exits. It first
// records the request in the run directory (a restarted agent sees it,
// and the supervisor then waits for the job's last process instead of
// ending the job with its shell).
func (p *Proc) Preempt(sig syscall.Signal) error {
	rec, pgid := p.job()
	if p.Exited() || pgid <= 0 {
		return os.ErrProcessDone
	}
	markPreempted(p.spec.RunDir, time.Now())
	return signalTask(rec.Supervisor, rec.Job, sig)
}

// PreemptedAt is when the preemption signal was sent to the run (by this
// agent, an earlier one, or the supervisor's fence); ok is false when it
// was not.
func (p *Proc) PreemptedAt() (at time.Time, ok bool) {
	b, err := os.ReadFile(filepath.Join(p.spec.RunDir, preemptedFile))
	if err != nil {
		return time.Time{}, false
	}
	at, err = time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
	return at, err == nil
}

// markPreempted records the preemption request's time in the run
// directory (kept from the first request).
func markPreempted(dir string, at time.Time) {
	path := filepath.Join(dir, preemptedFile)
	if _, err := os.Stat(path); err == nil {
		return
	}
	_ = os.WriteFile(path, []byte(at.UTC().Format(time.RFC3339Nano)+"\n"), 0o644)
}

// stopping reports whether the job is being stopped on purpose: the
// preemption signal was sent, or the run was marked stopped.
func stopping(dir string) bool {
	for _, f := range []string{preemptedFile, stoppedFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return true
		}
	}
	return false
}
