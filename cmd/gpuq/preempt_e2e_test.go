package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/services/scheduler"
)

// buildCLI builds this very command for jobs that call `gpuq checkpoint`.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gpuq")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// The default policy end to end with real processes and the example job:
// a LOW task on all GPUs; HIGH waits (critical-only); CRITICAL preempts the
// LOW task, which checkpoints and is requeued; CRITICAL runs, then HIGH,
// then LOW resumes from its checkpoint and completes.
func TestPreemptCheckpointResume(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	bin := buildCLI(t)
	train, err := filepath.Abs("../../examples/train.py")
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t)
	var sched *scheduler.Scheduler
	s.submitter()
	s.scheduler(&sched)
	s.agent("node-1", 8)
	cl := s.client()
	sub := func(name, prio, cmd string) string {
		var r api.SubmitReply
		req := domain.Request{Name: name, Team: "alpha", Priority: prio, GPUs: 8, Hours: 0.01, Hypothesis: "protocol",
			Command: cmd, Env: map[string]string{"CLI_BIN": bin}}
		if err := cl.Call(api.OpSubmit, req, &r); err != nil {
			t.Fatal(err)
		}
		return r.TaskID
	}
	low := sub("low-train", "low", `GPUQ_BIN="$CLI_BIN" python3 `+train+` --steps 80 --step-seconds 0.05`)
	s.waitState(low, "running", 30*time.Second)
	// Until the job has installed its signal handler, a preemption kills it
	// (and it restarts from scratch): wait for its first line.
	lowLog := filepath.Join(s.dir, "node-1", "tasks", low, "output.log")
	wait(t, func() bool { b, _ := os.ReadFile(lowLog); return strings.Contains(string(b), "GPUs:") })
	high := sub("high-eval", "high", "sleep 0.3")
	time.Sleep(1500 * time.Millisecond)
	if v := s.waitState(high, "queued", time.Second); v.State != "queued" {
		t.Fatalf("HIGH is %s under critical-only", v.State)
	}
	crit := sub("crit", "critical", "sleep 0.3")
	s.waitState(low, "completed", 60*time.Second)
	s.waitState(high, "completed", 10*time.Second)
	s.waitState(crit, "completed", 10*time.Second)

	st := s.fold()
	lt, ht, ct := st.Tasks[low], st.Tasks[high], st.Tasks[crit]
	if lt.Preemptions != 1 || lt.ResumeFrom == "" || lt.ResumeFrom != lt.Checkpoint {
		t.Errorf("LOW preemptions=%d resume_from=%q checkpoint=%q", lt.Preemptions, lt.ResumeFrom, lt.Checkpoint)
	}
	var types []string
	var starts []time.Time
	_, err = events.ReadAll(context.Background(), s.log, 1, events.TaskSubjects(low), func(r events.Record) error {
		if r.Envelope.Type != events.TypeProgressReported { // train.py reports progress every 10 steps
			types = append(types, string(r.Envelope.Type))
		}
		if r.Envelope.Type == events.TypeStarted {
			starts = append(starts, r.Envelope.Time)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "submitted dispatched started preempt_requested checkpointed preempted requeued dispatched started completed"
	if got := strings.Join(types, " "); got != want {
		t.Errorf("LOW history\n got: %s\nwant: %s", got, want)
	}
	if !(ct.FirstStarted.Before(ht.FirstStarted) && len(starts) == 2 && !starts[1].Before(ht.FirstStarted)) {
		t.Errorf("order: critical %v, high %v, low resumed %v", ct.FirstStarted, ht.FirstStarted, starts)
	}
	out, err := os.ReadFile(filepath.Join(s.dir, "node-1", "tasks", low, "output.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "resuming from "+lt.ResumeFrom) || !strings.Contains(string(out), "done: 80 steps") {
		t.Errorf("LOW output does not show a resume to completion:\n%s", out)
	}
	s.verified()
}
