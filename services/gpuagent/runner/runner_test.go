package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func start(t *testing.T, s Spec) *Proc {
	t.Helper()
	if s.LogPath == "" {
		s.LogPath = filepath.Join(t.TempDir(), "logs", "task.log")
	}
	if s.TaskID == "" {
		s.TaskID = "t1"
	}
	p, err := Start(s)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if !p.Exited() {
			_ = p.Signal(syscall.SIGKILL)
			<-p.Wait()
		}
	})
	return p
}

func result(t *testing.T, p *Proc) Result {
	t.Helper()
	select {
	case r := <-p.Wait():
		// Compare how it ended; the tail (StderrTail) and the end time are
		// checked where they matter.
		r.StderrTail, r.Ended = "", time.Time{}
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("process did not exit")
		return Result{}
	}
}

// waitFile waits until path contains want (the child is ready).
func waitFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never contained %q", path, want)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRun(t *testing.T) {
	tests := []struct {
		name     string
		command  string
		env      []string
		want     Result
		wantTail string
		wantLog  []string
	}{
		{
			name:    "exit 0",
			command: "echo hello",
			want:    Result{ExitCode: 0},
			wantLog: []string{"hello\n"},
		},
		{
			name:     "exit 3 with stderr tail",
			command:  "echo out; echo 'CUDA error: out of memory' >&2; echo 'Traceback' >&2; exit 3",
			want:     Result{ExitCode: 3},
			wantTail: "CUDA error: out of memory\nTraceback",
			wantLog:  []string{"out\n", "CUDA error: out of memory\n", "Traceback\n"},
		},
		{
			name:     "tail keeps last 20 lines",
			command:  "i=1; while [ $i -le 30 ]; do echo line$i >&2; i=$((i+1)); done; exit 1",
			want:     Result{ExitCode: 1},
			wantTail: tailOf(11, 30),
			wantLog:  []string{"line1\n", "line30\n"},
		},
		{
			name:     "unterminated last line kept",
			command:  "echo a >&2; printf b >&2",
			want:     Result{ExitCode: 0},
			wantTail: "a\nb",
		},
		{
			name:    "env visible to the child",
			command: `echo "$CUDA_VISIBLE_DEVICES|$GPUQ_TASK_ID|$HOME_OVERRIDE"`,
			env:     []string{"CUDA_VISIBLE_DEVICES=GPU-a,GPU-b", "GPUQ_TASK_ID=t42", "HOME_OVERRIDE=x"},
			want:    Result{ExitCode: 0},
			wantLog: []string{"GPU-a,GPU-b|t42|x\n"},
		},
		{
			name:    "Spec.Env wins over inherited",
			command: `echo "path=$PATH"`,
			env:     []string{"PATH=/gpuq/bin:/usr/bin:/bin"},
			want:    Result{ExitCode: 0},
			wantLog: []string{"path=/gpuq/bin:/usr/bin:/bin\n"},
		},
		{
			name:    "killed by a signal",
			command: "kill -9 $$",
			want:    Result{ExitCode: 137, Signaled: true, Signal: syscall.SIGKILL},
		},
		{
			name:    "command not found",
			command: "/nonexistent/gpuq-train",
			want:    Result{ExitCode: 127},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "a", "b", "task.log")
			p := start(t, Spec{Command: tc.command, Env: tc.env, LogPath: log})
			if p.PID() <= 0 {
				t.Errorf("PID() = %d", p.PID())
			}
			got := result(t, p)
			if got != tc.want {
				t.Errorf("Result = %+v, want %+v", got, tc.want)
			}
			if tc.wantTail != "" {
				if tail := p.StderrTail(); tail != tc.wantTail {
					t.Errorf("StderrTail() = %q, want %q", tail, tc.wantTail)
				}
			}
			content := readFile(t, log)
			for _, w := range tc.wantLog {
				if !strings.Contains(content, w) {
					t.Errorf("log %q lacks %q", content, w)
				}
			}
		})
	}
}

func tailOf(from, to int) string {
	var lines []string
	for i := from; i <= to; i++ {
		lines = append(lines, "line"+strconv.Itoa(i))
	}
	return strings.Join(lines, "\n")
}

func TestEnvToFileAndDir(t *testing.T) {
	dir := t.TempDir()
	p := start(t, Spec{
		Command: `echo "$CUDA_VISIBLE_DEVICES" > cvd.txt`,
		Env:     []string{"CUDA_VISIBLE_DEVICES=GPU-1234,GPU-5678"},
		Dir:     dir,
	})
	if r := result(t, p); r != (Result{}) {
		t.Fatalf("Result = %+v", r)
	}
	if got := readFile(t, filepath.Join(dir, "cvd.txt")); got != "GPU-1234,GPU-5678\n" {
		t.Errorf("child saw CUDA_VISIBLE_DEVICES=%q", got)
	}
}

func TestLogAppends(t *testing.T) {
	log := filepath.Join(t.TempDir(), "task.log")
	for i, cmd := range []string{"echo first", "echo second >&2"} {
		p := start(t, Spec{Command: cmd, LogPath: log, RunDir: filepath.Join(filepath.Dir(log), fmt.Sprint("run-", i))})
		if r := result(t, p); r.ExitCode != 0 {
			t.Fatalf("run %d: %+v", i, r)
		}
	}
	if got := readFile(t, log); got != "first\nsecond\n" {
		t.Errorf("log = %q, want both runs appended", got)
	}
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"empty command", Spec{TaskID: "t", Command: "  ", LogPath: filepath.Join(dir, "l")}, "empty command"},
		{"no log path", Spec{TaskID: "t", Command: "true"}, "no log path"},
		{"log dir is a file", Spec{TaskID: "t", Command: "true", LogPath: filepath.Join(file, "x.log")}, "log dir"},
		{"missing work dir", Spec{TaskID: "t", Command: "true", LogPath: filepath.Join(dir, "l"), Dir: filepath.Join(dir, "nope")}, "start"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Start(tc.spec)
			if err == nil {
				<-p.Wait()
				t.Fatal("Start succeeded, want error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestSignal(t *testing.T) {
	tests := []struct {
		name    string
		command string
		sig     syscall.Signal
		want    Result
		wantLog string
	}{
		{
			name:    "USR1 reaches the trap",
			command: `trap 'echo got; exit 0' USR1; echo ready; while :; do sleep 0.05; done`,
			sig:     syscall.SIGUSR1,
			want:    Result{ExitCode: 0},
			wantLog: "got\n",
		},
		{
			name:    "TERM without a trap kills",
			command: `echo ready; while :; do sleep 0.05; done`,
			sig:     syscall.SIGTERM,
			want:    Result{ExitCode: 128 + 15, Signaled: true, Signal: syscall.SIGTERM},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "task.log")
			p := start(t, Spec{Command: tc.command, LogPath: log})
			waitFile(t, log, "ready")
			if err := p.Signal(tc.sig); err != nil {
				t.Fatalf("Signal: %v", err)
			}
			if got := result(t, p); got != tc.want {
				t.Errorf("Result = %+v, want %+v", got, tc.want)
			}
			if !strings.Contains(readFile(t, log), tc.wantLog) {
				t.Errorf("log lacks %q", tc.wantLog)
			}
			if err := p.Signal(tc.sig); !errors.Is(err, os.ErrProcessDone) {
				t.Errorf("Signal after exit = %v, want os.ErrProcessDone", err)
			}
		})
	}
}

func TestStop(t *testing.T) {
	const loop = `echo ready; while :; do sleep 0.05; done`
	tests := []struct {
		name       string
		command    string
		first      syscall.Signal
		grace      time.Duration // 0: 300 ms (the cases that must be forced)
		wantForced bool
		want       Result
		wantLog    string
	}{
		{
			name:    "exits on the first signal",
			command: `trap 'echo checkpointed; exit 0' USR1; ` + loop,
			first:   syscall.SIGUSR1, grace: 30 * time.Second, want: Result{ExitCode: 0}, wantLog: "checkpointed",
		},
		{
			name:    "ignores USR1, dies on TERM",
			command: `trap '' USR1; ` + loop,
			first:   syscall.SIGUSR1, wantForced: true,
			want: Result{ExitCode: 143, Signaled: true, Signal: syscall.SIGTERM},
		},
		{
			name:    "ignores USR1 and TERM, gets KILL",
			command: `trap '' USR1 TERM; ` + loop,
			first:   syscall.SIGUSR1, wantForced: true,
			want: Result{ExitCode: 137, Signaled: true, Signal: syscall.SIGKILL},
		},
		{
			name:    "TERM first, trapped",
			command: `trap 'exit 7' TERM; ` + loop,
			first:   syscall.SIGTERM, grace: 30 * time.Second, want: Result{ExitCode: 7},
		},
	}
	// A job that exits on its signal has a grace far beyond what it
	// needs (it exits at once: the test stays fast), so that a loaded
	// machine (-race, CI) does not force it; only the cases that must be
	// forced have a short one. No case fails on how long Stop took: a
	// Stop that hangs is the test binary's timeout.
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			grace := tc.grace
			if grace == 0 {
				grace = 300 * time.Millisecond
			}
			log := filepath.Join(t.TempDir(), "task.log")
			p := start(t, Spec{Command: tc.command, LogPath: log})
			p.TermTimeout = 300 * time.Millisecond
			waitFile(t, log, "ready")
			forced := p.Stop(grace, tc.first)
			if forced != tc.wantForced {
				t.Errorf("Stop forced = %v, want %v", forced, tc.wantForced)
			}
			if !p.Exited() {
				t.Fatal("Stop returned before the process exited")
			}
			if got := result(t, p); got != tc.want {
				t.Errorf("Result = %+v, want %+v", got, tc.want)
			}
			if !strings.Contains(readFile(t, log), tc.wantLog) {
				t.Errorf("log lacks %q", tc.wantLog)
			}
		})
	}

	t.Run("already exited", func(t *testing.T) {
		p := start(t, Spec{Command: "exit 0"})
		result(t, p)
		if p.Stop(time.Millisecond, syscall.SIGUSR1) {
			t.Error("Stop of an exited process reported forced")
		}
	})
}

// alive reports whether pid exists and is not a zombie (a container's init
// may be slow to reap reparented children).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestProcessGroupReachesGrandchildren(t *testing.T) {
	// The grandchild ignores nothing but is a separate process: it must be
	// reached through the group, not through sh.
	tests := []struct {
		name string
		cmd  string // must write the grandchild's PID to pid.txt, then "ready"
		end  func(t *testing.T, p *Proc)
	}{
		{
			name: "Signal KILL",
			cmd:  `sleep 1000 & echo $! > pid.txt; echo ready; wait`,
			end: func(t *testing.T, p *Proc) {
				if err := p.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "Stop escalation",
			cmd:  `trap '' USR1 TERM; sh -c 'trap "" USR1 TERM; sleep 1000' & echo $! > pid.txt; echo ready; wait`,
			end: func(t *testing.T, p *Proc) {
				p.TermTimeout = 100 * time.Millisecond
				if !p.Stop(100*time.Millisecond, syscall.SIGUSR1) {
					t.Error("Stop not forced")
				}
			},
		},
		{
			name: "leader exits, stray child is cleaned up",
			cmd:  `sleep 1000 & echo $! > pid.txt; echo ready; sleep 0.3; exit 0`,
			end:  func(t *testing.T, p *Proc) {},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "task.log")
			p := start(t, Spec{Command: tc.cmd, LogPath: log, Dir: dir})
			waitFile(t, log, "ready")
			pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(dir, "pid.txt"))))
			if err != nil {
				t.Fatal(err)
			}
			if pgid, err := syscall.Getpgid(pid); err != nil || pgid != p.PID() {
				t.Fatalf("grandchild pgid = %d, %v; want %d", pgid, err, p.PID())
			}
			tc.end(t, p)
			result(t, p)
			deadline := time.Now().Add(5 * time.Second)
			for alive(pid) {
				if time.Now().After(deadline) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("grandchild %d survived", pid)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func TestTailBuffer(t *testing.T) {
	long := strings.Repeat("x", maxLine+100)
	tests := []struct {
		name   string
		n      int
		writes []string
		want   string
	}{
		{"empty", 3, nil, ""},
		{"split writes", 3, []string{"ab", "c\nd", "e\n"}, "abc\nde"},
		{"wraps", 2, []string{"1\n2\n3\n4\n"}, "3\n4"},
		{"partial counts as a line", 2, []string{"1\n2\n3"}, "2\n3"},
		{"long line truncated", 2, []string{long + "\nok\n"}, long[:maxLine] + "\nok"},
		{"empty lines kept", 3, []string{"a\n\nb\n"}, "a\n\nb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newTailBuffer(tc.n)
			for _, w := range tc.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := b.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

// The preemption signal reaches every process of the task, the wrapping
// shell included: the rest of a shell chain never runs after it, a job
// that traps it checkpoints and exits (its status is the job's, not the
// dead shell's), and a process that left the group gets it too.
func TestPreemptReachesTheWholeJob(t *testing.T) {
	tests := map[string]struct {
		// command writes "ready" to the log once it is in place; "after" to
		// the marker file name in $M when something ran after the signal.
		command  string
		want     Result
		wantMark string // content of $M/ckpt, "" for no file
		noAfter  bool   // $M/after must never appear
	}{
		"the rest of a shell chain never runs": {
			command: `echo ready; sleep 3; echo ran > "$M/after"`,
			want:    Result{ExitCode: 128 + 10, Signaled: true, Signal: syscall.SIGUSR1},
			noAfter: true,
		},
		"a nested shell chain (sh job.sh; sleep) stops too": {
			command: `sh -c 'echo ready; sleep 3; echo ran > "$M/after"'; sleep 3; echo ran > "$M/after"`,
			want:    Result{ExitCode: 128 + 10, Signaled: true, Signal: syscall.SIGUSR1},
			noAfter: true,
		},
		"a job that traps it checkpoints and exits 0 though its shell died": {
			command:  `sh -c 'trap "sleep 0.3; echo saved > $M/ckpt; exit 0" USR1; echo ready; while :; do sleep 0.05; done'; echo ran > "$M/after"`,
			want:     Result{ExitCode: 0},
			wantMark: "saved\n",
			noAfter:  true,
		},
		"a process that left the group gets it": {
			command:  `setsid sh -c 'trap "echo saved > $M/ckpt; exit 0" USR1; echo ready; while :; do sleep 0.05; done' & wait`,
			want:     Result{ExitCode: 0},
			wantMark: "saved\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "out.log")
			p := start(t, Spec{Command: tc.command, LogPath: log, Env: []string{"M=" + dir}})
			waitFile(t, log, "ready")
			time.Sleep(100 * time.Millisecond) // the trap is set before "ready"; let the loop begin
			if err := p.Preempt(syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			if got := result(t, p); got != tc.want {
				t.Errorf("Result = %+v, want %+v", got, tc.want)
			}
			if tc.noAfter {
				time.Sleep(3500 * time.Millisecond) // past the chain's sleep
				if _, err := os.Stat(filepath.Join(dir, "after")); err == nil {
					t.Error("the rest of the shell chain ran after the preemption request")
				}
			}
			b, _ := os.ReadFile(filepath.Join(dir, "ckpt"))
			if string(b) != tc.wantMark {
				t.Errorf("checkpoint mark = %q, want %q", b, tc.wantMark)
			}
			if at, ok := p.PreemptedAt(); !ok || time.Since(at) > time.Minute {
				t.Errorf("PreemptedAt = %v, %v", at, ok)
			}
		})
	}
}

// Nothing of a task outlives its end: processes that left the process
// group (setsid, a daemon's double fork) are swept when the command ends
// by itself, and reached by the escalation when they ignore the signals.
func TestNothingOutlivesTheJob(t *testing.T) {
	tests := map[string]struct {
		cmd string // writes the stray's PID to pid.txt, then "ready"
		end func(t *testing.T, p *Proc)
	}{
		"a setsid child, the command ends": {
			cmd: `setsid sh -c 'echo $$ > pid.txt; exec sleep 1000' & while [ ! -s pid.txt ]; do sleep 0.01; done; echo ready; sleep 0.3; exit 0`,
			end: func(t *testing.T, p *Proc) {},
		},
		"a double-forked daemon, the command ends": {
			cmd: `(setsid sh -c 'echo $$ > pid.txt; exec sleep 1000' &); while [ ! -s pid.txt ]; do sleep 0.01; done; echo ready; sleep 0.3`,
			end: func(t *testing.T, p *Proc) {},
		},
		"a setsid child ignoring USR1 and TERM, Stop escalates": {
			cmd: `setsid sh -c 'trap "" USR1 TERM; echo $$ > pid.txt; while :; do sleep 0.05; done' & while [ ! -s pid.txt ]; do sleep 0.01; done; echo ready; wait`,
			end: func(t *testing.T, p *Proc) {
				p.TermTimeout = 200 * time.Millisecond
				if !p.Stop(200*time.Millisecond, syscall.SIGUSR1) {
					t.Error("Stop not forced")
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "task.log")
			p := start(t, Spec{Command: tc.cmd, LogPath: log, Dir: dir})
			waitFile(t, log, "ready")
			pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(dir, "pid.txt"))))
			if err != nil {
				t.Fatal(err)
			}
			if pgid, _ := syscall.Getpgid(pid); pgid == p.PID() {
				t.Fatalf("the stray %d is in the job's group; the case tests one that left it", pid)
			}
			tc.end(t, p)
			result(t, p)
			if alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("process %d outlived the job", pid)
			}
		})
	}
}

// A supervisor killed outright leaves its task's processes to init, out
// of its tree: the agent sweeps them from the supervisor's last record,
// those that left the job's process group included.
func TestSupervisorKilledStrayIsSwept(t *testing.T) {
	old := recordEvery
	recordEvery = 50 * time.Millisecond
	t.Cleanup(func() { recordEvery = old })
	dir := t.TempDir()
	log := filepath.Join(dir, "task.log")
	p := start(t, Spec{Dir: dir, LogPath: log,
		Command: `setsid sh -c 'echo $$ > pid.txt; exec sleep 1000' & while [ ! -s pid.txt ]; do sleep 0.01; done; echo ready; sleep 1000`})
	waitFile(t, log, "ready")
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(dir, "pid.txt"))))
	if err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(p.RunDir(), procsFile), fmt.Sprintf(`"pid":%d,`, pid))
	sup := p.SupervisorPID()
	if sup <= 0 {
		t.Fatal("no supervisor pid")
	}
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if r := result(t, p); !r.Lost {
		t.Errorf("Result = %+v, want Lost", r)
	}
	for deadline := time.Now().Add(5 * time.Second); alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d that left the group outlived its killed supervisor", pid)
		}
	}
}
