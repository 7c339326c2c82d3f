package runner

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rewrite edits a run's proc.json as a test would find it after a pid
// was reused or the machine rebooted.
func rewrite(t *testing.T, dir string, edit func(*procRecord)) {
	t.Helper()
	var rec procRecord
	if err := readJSON(filepath.Join(dir, procFile), &rec); err != nil {
		t.Fatal(err)
	}
	edit(&rec)
	if err := writeJSON(filepath.Join(dir, procFile), rec); err != nil {
		t.Fatal(err)
	}
}

// TestAdopt: a run started by one agent is taken over by the next, which
// learns the job's real end — or that it is gone — from the run's own
// records, never from a pid alone.
func TestAdopt(t *testing.T) {
	tests := []struct {
		name    string
		command string
		// before runs between the first agent "dying" and Adopt.
		before func(t *testing.T, p *Proc)
		// fake: the test only pretends (a reboot); the job really lives on.
		fake     bool
		want     Result
		wantTail string
	}{
		{
			name:    "live: adopted, its real exit code seen",
			command: "sleep 0.5; echo bye >&2; exit 4",
			want:    Result{ExitCode: 4}, wantTail: "bye",
		},
		{
			name:    "ended while no agent watched: its recorded exit code",
			command: "echo done >&2; exit 3",
			before:  func(t *testing.T, p *Proc) { <-p.Wait() },
			want:    Result{ExitCode: 3}, wantTail: "done",
		},
		{
			name:    "killed by a signal while no agent watched",
			command: "sleep 30",
			before: func(t *testing.T, p *Proc) {
				_ = p.Signal(syscall.SIGKILL)
				<-p.Wait()
			},
			want: Result{ExitCode: 137, Signaled: true, Signal: syscall.SIGKILL},
		},
		{
			name:    "supervisor pid reused by another process: lost, the job is stopped",
			command: "sleep 30",
			before: func(t *testing.T, p *Proc) {
				rewrite(t, p.RunDir(), func(r *procRecord) { r.Supervisor.Start++ })
			},
			want: Result{ExitCode: -1, Lost: true},
		},
		{
			name:    "rebooted since: nothing recorded then is live",
			command: "sleep 30",
			before: func(t *testing.T, p *Proc) {
				rewrite(t, p.RunDir(), func(r *procRecord) { r.Supervisor.Boot, r.Job.Boot = "an-earlier-boot", "an-earlier-boot" })
			},
			fake: true,
			want: Result{ExitCode: -1, Lost: true},
		},
		{
			name:    "supervisor killed: lost, and what is left of the job goes too",
			command: "sleep 30",
			before: func(t *testing.T, p *Proc) {
				rec, _ := p.job()
				_ = syscall.Kill(rec.Supervisor.PID, syscall.SIGKILL)
				<-p.Wait()
			},
			want: Result{ExitCode: -1, Lost: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := start(t, Spec{Command: tc.command, LogPath: filepath.Join(dir, "out.log")})
			rec, _ := p.job()
			job := rec.Job
			if tc.before != nil {
				tc.before(t, p)
			}
			q, err := Adopt(p.RunDir())
			if err != nil {
				t.Fatalf("Adopt: %v", err)
			}
			if q.PID() != p.PID() && !tc.want.Lost {
				t.Errorf("adopted pid %d, started %d", q.PID(), p.PID())
			}
			got := result(t, q)
			got.Err, got.ErrText = nil, ""
			if got != tc.want {
				t.Errorf("Result = %+v, want %+v", got, tc.want)
			}
			if tail := q.StderrTail(); tc.wantTail != "" && tail != tc.wantTail {
				t.Errorf("tail = %q, want %q", tail, tc.wantTail)
			}
			if tc.want.Lost && !tc.fake {
				// Never leave a lost run's job holding its GPUs.
				deadline := time.Now().Add(5 * time.Second)
				for job.Alive() && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				if job.Alive() && job.Boot == BootID() {
					t.Errorf("the job (pid %d) still runs after its run was found lost", job.PID)
				}
			}
		})
	}
}

func TestAdoptNoRun(t *testing.T) {
	if _, err := Adopt(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no run") {
		t.Fatalf("Adopt(empty dir) = %v, want ErrNoRun", err)
	}
}

// TestStartRefusesAUsedRunDir: one directory is one run; a second start
// there would confuse a restarted agent about which process is the task.
func TestStartRefusesAUsedRunDir(t *testing.T) {
	dir := t.TempDir()
	p := start(t, Spec{Command: "true", LogPath: filepath.Join(dir, "out.log")})
	<-p.Wait()
	if _, err := Start(Spec{TaskID: "t1", Command: "true", LogPath: filepath.Join(dir, "out.log")}); err == nil {
		t.Fatal("a second Start in the same run dir succeeded")
	}
}

// TestFence: with no live agent for Fence.After, the supervisor stops the
// job with the preemption protocol and records it as stopped; a live
// agent keeps it running.
func TestFence(t *testing.T) {
	tests := []struct {
		name       string
		command    string
		agent      Identity
		wantStop   bool
		wantForced bool
		wantCode   int
	}{
		{name: "agent alive: runs on", command: "sleep 2; exit 5", agent: Self(), wantCode: 5},
		{name: "agent gone: checkpoints on the signal and exits", agent: Identity{PID: 1, Start: 1, Boot: "gone"},
			command: `exec python3 -c 'import os, signal, sys, time
def ckpt(*_):
    open(os.environ["OUT"], "w").write("ckpt")
    sys.exit(0)
signal.signal(signal.SIGUSR1, ckpt)
open(os.environ["OUT"] + ".ready", "w").close()
time.sleep(30)'`, wantStop: true},
		{name: "agent gone, the job ignores the signal: forced", agent: Identity{PID: 1, Start: 1, Boot: "gone"},
			command: `trap '' USR1; touch "$OUT.ready"; sleep 30 & wait`, wantStop: true, wantForced: true, wantCode: 143},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			// A live agent until the job is ready (a busy machine starts
			// python slowly), then the case's.
			agentFile := filepath.Join(dir, "agent.json")
			write := func(id Identity) {
				b, _ := json.Marshal(id)
				if err := os.WriteFile(agentFile, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write(Self())
			out := filepath.Join(dir, "ckpt")
			p := start(t, Spec{Command: tc.command, LogPath: filepath.Join(dir, "out.log"), Env: []string{"OUT=" + out},
				Fence: &Fence{AgentFile: agentFile, After: 500 * time.Millisecond, Signal: int(syscall.SIGUSR1), Grace: 2 * time.Second, KillAfter: time.Second}})
			if tc.wantStop {
				for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					if _, err := os.Stat(out + ".ready"); err == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the job did not get ready in 20 s")
					}
				}
			}
			write(tc.agent)
			r := <-p.Wait()
			if r.Stopped != tc.wantStop || r.Forced != tc.wantForced || r.ExitCode != tc.wantCode {
				t.Errorf("Result = %+v, want stopped %v forced %v exit %d", r, tc.wantStop, tc.wantForced, tc.wantCode)
			}
			if tc.wantStop && !tc.wantForced {
				if _, err := os.Stat(out); err != nil {
					t.Errorf("the job did not get the preemption signal: %v", err)
				}
			}
		})
	}
}

// TestStartQuickJobs: a job that ends at once is never taken for a start
// that failed (its exit record can appear before its start is seen);
// many at once, so that the supervisors race the watchers.
func TestStartQuickJobs(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan string, 400)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				p, err := Start(Spec{TaskID: "t", Command: "exit 7", LogPath: filepath.Join(dir, "out.log"), RunDir: filepath.Join(dir, fmt.Sprint(w, "-", i))})
				if err != nil {
					errs <- err.Error()
					continue
				}
				if r := <-p.Wait(); r.ExitCode != 7 || r.Err != nil {
					errs <- fmt.Sprintf("run %d-%d: %+v", w, i, r)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestStartRecordRace: the first look at proc.json misses it (the job ran
// and ended between the reads of proc.json and exit.json): the run's real
// end is still reported, not a failed start.
func TestStartRecordRace(t *testing.T) {
	var mu sync.Mutex
	missed := false
	awaitRead = func(path string, v any) error {
		mu.Lock()
		miss := !missed && filepath.Base(path) == procFile
		if miss {
			missed = true
		}
		mu.Unlock()
		if miss {
			// Let the job end meanwhile.
			for _, err := os.Stat(filepath.Join(filepath.Dir(path), exitFile)); err != nil; _, err = os.Stat(filepath.Join(filepath.Dir(path), exitFile)) {
				time.Sleep(time.Millisecond)
			}
			return os.ErrNotExist
		}
		return readJSON(path, v)
	}
	t.Cleanup(func() { awaitRead = readJSON })
	p := start(t, Spec{Command: "exit 7", LogPath: filepath.Join(t.TempDir(), "out.log")})
	if r := result(t, p); r.ExitCode != 7 || r.Err != nil {
		t.Fatalf("Result = %+v, want exit 7", r)
	}
}

// TestAdoptWhileStarting: an agent that adopts a run whose supervisor has
// not yet recorded the job (the previous agent died right after starting
// it) waits for the record instead of taking the run for one that never
// started.
func TestAdoptWhileStarting(t *testing.T) {
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A supervisor holding the lock, its record not written yet.
	lock, err := os.OpenFile(filepath.Join(runDir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(filepath.Join(runDir, specFile), Spec{TaskID: "t1", Command: "true", LogPath: filepath.Join(dir, "out.log"), RunDir: runDir}); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = writeJSON(filepath.Join(runDir, procFile), procRecord{Supervisor: Self(), Job: Self()})
		_ = writeJSON(filepath.Join(runDir, exitFile), Result{ExitCode: 5})
		lock.Close()
	}()
	p, err := Adopt(runDir)
	if err != nil {
		t.Fatalf("Adopt while the supervisor starts the job: %v", err)
	}
	if r := <-p.Wait(); r.ExitCode != 5 {
		t.Errorf("Result = %+v, want the recorded exit 5", r)
	}
	// Without a supervisor and without records, it is no run.
	empty := filepath.Join(dir, "empty")
	_ = os.MkdirAll(empty, 0o755)
	_ = writeJSON(filepath.Join(empty, specFile), Spec{TaskID: "t2"})
	if _, err := Adopt(empty); err == nil {
		t.Error("Adopt of a run that never started succeeded")
	}
}
