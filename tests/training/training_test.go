//go:build training

package training

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// python is the interpreter that sees torch: $GPUQ_TRAINING_PYTHON, else
// Debian's /usr/bin/python3 (python3-torch installs there; a python3
// earlier on PATH, a pyenv's or a venv's, may not see it).
func python(t *testing.T) string {
	t.Helper()
	py := os.Getenv("GPUQ_TRAINING_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	out, err := exec.Command(py, "-c", "import torch, torch.distributed as d; print(torch.__version__, d.is_available())").CombinedOutput()
	if err != nil {
		t.Skipf("training tests skipped: %s cannot import torch (Debian: apt-get install python3-torch; or set GPUQ_TRAINING_PYTHON): %v: %s",
			py, err, strings.TrimSpace(lastLine(string(out))))
	}
	t.Logf("%s: torch %s", py, strings.TrimSpace(string(out)))
	return py
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// devStack is one `bin/gpuq dev`: one mock node of 8 GPUs.
type devStack struct {
	base string
	log  string
	done chan struct{}
}

func startDev(t *testing.T, dir string) *devStack {
	t.Helper()
	bin := os.Getenv("GPUQ_TRAINING_BIN")
	if bin == "" {
		bin = filepath.Join(repoRoot(t), "bin", "gpuq")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: run `make test-training` (it builds bin/gpuq), or set GPUQ_TRAINING_BIN", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	d := &devStack{base: "http://" + addr, log: filepath.Join(dir, "dev.log"), done: make(chan struct{})}
	f, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "dev", "--data", filepath.Join(dir, "data"), "--nats-port", strconv.Itoa(freePort(t)),
		"--http", addr, "--gpus", "8", "--heartbeat", "500ms")
	cmd.Stdout, cmd.Stderr = f, f
	// Pdeathsig: a test killed by go test's timeout leaves no gpuq dev behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); f.Close(); close(d.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-d.done
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			t.Fatalf("gpuq dev exited before it was ready; log %s:\n%s", d.log, tail(d.log, 20))
		default:
		}
		if resp, err := http.Get(d.base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("gpuq dev not healthy in 90 s; log %s:\n%s", d.log, tail(d.log, 20))
	return nil
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (d *devStack) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(d.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

func (d *devStack) submit(t *testing.T, body map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(d.base+"/v1/tasks", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var rep struct {
		TaskID string `json:"task_id"`
	}
	if resp.StatusCode/100 != 2 || json.Unmarshal(out, &rep) != nil || rep.TaskID == "" {
		t.Fatalf("submit %v: %d %s", body["name"], resp.StatusCode, out)
	}
	return rep.TaskID
}

func (d *devStack) state(t *testing.T, id string) string {
	t.Helper()
	var v struct {
		State string `json:"state"`
	}
	d.getJSON(t, "/v1/tasks/"+id, &v)
	return v.State
}

// output is the task's whole output.log (every run of it, appended).
func (d *devStack) output(t *testing.T, id string) string {
	t.Helper()
	var sb strings.Builder
	var off int64
	for i := 0; i < 1000; i++ {
		var r struct {
			Next int64  `json:"next"`
			Size int64  `json:"size"`
			Data string `json:"data"`
		}
		resp, err := http.Get(d.base + "/v1/tasks/" + id + "/logs?offset=" + strconv.FormatInt(off, 10))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound && off == 0 {
			return "" // no output yet: the run has not started on its node
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &r) != nil {
			t.Fatalf("GET logs of %s: %d %s", id, resp.StatusCode, b)
		}
		sb.WriteString(r.Data)
		if r.Next >= r.Size || r.Next <= off {
			break
		}
		off = r.Next
	}
	return sb.String()
}

// waitFor polls cond every 100 ms for up to within; fails with what() when it never holds.
func (d *devStack) waitFor(t *testing.T, within time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("after %s: %s; gpuq dev log %s:\n%s", within, what(), d.log, tail(d.log, 20))
}

func (d *devStack) waitState(t *testing.T, id, want string, within time.Duration) {
	t.Helper()
	got := ""
	d.waitFor(t, within, func() bool { got = d.state(t, id); return got == want },
		func() string {
			return fmt.Sprintf("task %s is %q, want %q; its output:\n%s", id, got, want, d.output(t, id))
		})
}

type entry struct {
	Type string          `json:"type"`
	Time time.Time       `json:"time"`
	Data json.RawMessage `json:"data"`
}

func (d *devStack) history(t *testing.T, id string) []entry {
	t.Helper()
	var h []entry
	d.getJSON(t, "/v1/tasks/"+id+"/history", &h)
	return h
}

// reference runs the example outside gpuq (no task: it trains straight
// through) and answers its weights' hash.
func reference(t *testing.T, py, script, out string, args []string) string {
	t.Helper()
	cmd := exec.Command(py, append([]string{script, "--out", out}, args...)...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUQ_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the uninterrupted run: %v:\n%s", err, b)
	}
	return readHash(t, out)
}

func readHash(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "final.sha256"))
	if err != nil {
		t.Fatalf("no final weights: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// TestPreemptResume: the example as a LOW task, preempted by a CRITICAL
// one while it trains, checkpoints through the client (every rank at the
// same step), is requeued, resumes from its checkpoint, and ends with
// weights bit-identical to an uninterrupted run with the same seed. Prints
// the time from the preemption request to the committed checkpoint, both
// as the log recorded them.
func TestPreemptResume(t *testing.T) {
	py := python(t)
	root := repoRoot(t)
	script := filepath.Join(root, "examples", "pytorch", "train.py")
	dir := t.TempDir()
	d := startDev(t, dir)

	cases := []struct {
		name  string
		ranks int
		steps int
	}{
		{name: "one-rank", ranks: 1, steps: 150},
		{name: "two-ranks-gloo", ranks: 2, steps: 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--steps", strconv.Itoa(tc.steps), "--seed", "7", "--nproc", strconv.Itoa(tc.ranks), "--log-every", "5"}
			want := reference(t, py, script, filepath.Join(dir, tc.name, "reference"), args)

			out := filepath.Join(dir, tc.name, "run")
			quoted := []string{py, script, "--out", out, "--step-sleep", "0.02"}
			quoted = append(quoted, args...)
			for i, a := range quoted {
				quoted[i] = "'" + a + "'"
			}
			low := d.submit(t, map[string]any{
				"name": "pytorch-" + tc.name, "team": "alpha", "priority": "low", "gpus": 8, "hours": 0.1,
				"hypothesis": "resumes bit-identically", "grace_s": 30, "command": strings.Join(quoted, " "),
				"env": map[string]string{"PYTHONPATH": filepath.Join(root, "python")},
			})
			d.waitState(t, low, "running", 60*time.Second)
			// Preempt once every rank trains (rank 0 logs step 5 after a step all ranks took).
			d.waitFor(t, 90*time.Second, func() bool { return strings.Contains(d.output(t, low), "step 5/") },
				func() string { return "the example never logged step 5; its output:\n" + d.output(t, low) })
			crit := d.submit(t, map[string]any{
				"name": "crit-" + tc.name, "team": "beta", "priority": "critical", "gpus": 8, "hours": 0.01,
				"hypothesis": "preempts the training", "command": "true",
			})
			d.waitState(t, crit, "completed", 90*time.Second)
			d.waitState(t, low, "completed", 120*time.Second)
			output := d.output(t, low)

			// The log: preempt_requested, then the checkpoint, requeued, dispatched again.
			var reqAt, ckAt time.Time
			var ck struct {
				Ref  string `json:"ref"`
				Step int    `json:"step"`
			}
			var types []string
			dispatched := 0
			hist := d.history(t, low)
			for _, e := range hist {
				t.Logf("  %s %s", e.Time.Sub(hist[0].Time).Round(time.Millisecond), e.Type)
				types = append(types, e.Type)
				switch e.Type {
				case "preempt_requested":
					if reqAt.IsZero() {
						reqAt = e.Time
					}
				case "checkpointed":
					if ckAt.IsZero() {
						ckAt = e.Time
						if err := json.Unmarshal(e.Data, &ck); err != nil {
							t.Fatalf("checkpointed: %v: %s", err, e.Data)
						}
					}
				case "dispatched":
					dispatched++
				}
			}
			if reqAt.IsZero() || ckAt.IsZero() || ckAt.Before(reqAt) {
				t.Fatalf("want preempt_requested then checkpointed in the history: %v\noutput:\n%s", types, output)
			}
			if dispatched != 2 {
				t.Fatalf("dispatched %d times, want 2 (the first run, the resumed one): %v", dispatched, types)
			}
			if ck.Step <= 0 || ck.Step >= tc.steps || filepath.Base(ck.Ref) != "step-"+strconv.Itoa(ck.Step) {
				t.Fatalf("checkpointed %+v: want step-N of a step within (0, %d)", ck, tc.steps)
			}

			// Every rank saved at that step, and every rank resumed from it.
			for r := 0; r < tc.ranks; r++ {
				saved := fmt.Sprintf("rank %d: checkpoint at step %d\n", r, ck.Step)
				resumed := fmt.Sprintf("rank %d: resumed from %s at step %d (attempt 2)\n", r, ck.Ref, ck.Step)
				if !strings.Contains(output, saved) || !strings.Contains(output, resumed) {
					t.Errorf("rank %d: want %q and %q in the output:\n%s", r, saved, resumed, output)
				}
			}
			if n := len(regexp.MustCompile(`(?m)^rank \d+: checkpoint at step`).FindAllString(output, -1)); n != tc.ranks {
				t.Errorf("%d checkpoint lines, want %d (one per rank, at one step):\n%s", n, tc.ranks, output)
			}
			check := fmt.Sprintf(`import sys, torch
for r in range(%d):
    c = torch.load("%s/rank-%%d.pt" %% r)
    assert c["step"] == %d and c["rank"] == r and c["world"] == %d, (r, c["step"], c["rank"], c["world"])
print("ok")`, tc.ranks, ck.Ref, ck.Step, tc.ranks)
			if b, err := exec.Command(py, "-c", check).CombinedOutput(); err != nil {
				t.Errorf("the checkpoint's files at %s: %v: %s", ck.Ref, err, b)
			}

			got := readHash(t, out)
			if got != want {
				t.Errorf("weights after preemption and resumption %s, uninterrupted %s: not bit-identical\noutput:\n%s", got, want, output)
			}
			msg := fmt.Sprintf("%s: preemption request -> checkpoint committed %d ms (log records' times), at step %d of %d; weights sha256 %s… equal to the uninterrupted run's",
				tc.name, ckAt.Sub(reqAt).Milliseconds(), ck.Step, tc.steps, got[:12])
			t.Log(msg)
			fmt.Println("training:", msg)
		})
	}
}
