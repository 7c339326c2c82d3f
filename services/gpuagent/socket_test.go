package gpuagent

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// sockClient is an HTTP client over a task's Unix socket.
func sockClient(path string) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}}}
}

func call(t *testing.T, c *http.Client, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://task"+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: not JSON: %q", method, path, b)
	}
	return resp.StatusCode, out
}

// probe is a job that writes its socket's path, then asks the socket at
// $TARGET (its own when unset) for its task from inside the job and
// writes the status it got, then sleeps.
const probe = `echo -n "$GPUQ_TASK_SOCKET" > "$OUT/tmp.$GPUQ_TASK_ID" && mv "$OUT/tmp.$GPUQ_TASK_ID" "$OUT/sock.$GPUQ_TASK_ID"
while [ -n "$TARGET_FILE" ] && [ ! -s "$TARGET_FILE" ]; do sleep 0.05; done
target=$GPUQ_TASK_SOCKET; [ -n "$TARGET_FILE" ] && target=$(cat "$TARGET_FILE")
python3 - "$target" > "$OUT/status.$GPUQ_TASK_ID" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"GET /v1/task HTTP/1.1\r\nHost: task\r\nConnection: close\r\n\r\n")
print(s.recv(100).split()[1].decode())
PY
sleep 30`

// TestTaskSocket: a job's socket answers its task, records a committed
// checkpoint with its step in the log, answers a long-poll when the
// preemption comes with its deadline and preemptor, refuses a process of
// another task, and is opened again by a restarted agent.
func TestTaskSocket(t *testing.T) {
	n := newNode(t)
	out := t.TempDir()
	n.start(false)
	job := func(target string) string {
		cmd := strings.ReplaceAll(probe, "$OUT", out)
		if target != "" {
			cmd = "TARGET_FILE=" + filepath.Join(out, "sock."+target) + "\n" + cmd
		}
		return cmd
	}
	n.run("t1", job(""), 0)
	n.run("t2", job("t1"), 1)
	n.waitState("t1", domain.Running, 10*time.Second)
	path := waitFile(t, filepath.Join(out, "sock.t1"), 10*time.Second)
	if st, err := os.Stat(path); err != nil || st.Mode().Type() != os.ModeSocket {
		t.Fatalf("GPUQ_TASK_SOCKET %q is not a socket (%v)", path, err)
	}
	// 1. Isolation: t1's job reaches its own socket, t2's job is refused.
	for id, want := range map[string]string{"t1": "200", "t2": "403"} {
		deadline := time.Now().Add(10 * time.Second)
		got := ""
		for ; time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if b, _ := os.ReadFile(filepath.Join(out, "status."+id)); len(b) > 0 {
				got = strings.TrimSpace(string(b))
				break
			}
		}
		if got != want {
			t.Errorf("task %s's job asking t1's socket got %q, want %s", id, got, want)
		}
	}
	// 2. The task, as the node knows it.
	c := sockClient(path)
	if s, got := call(t, c, "GET", "/v1/task", ""); s != 200 || got["id"] != "t1" || got["attempt"] != 1.0 || len(got["gpus"].([]any)) != 1 {
		t.Errorf("GET /v1/task = %d %v", s, got)
	}
	// 3. A committed checkpoint reaches the log with its step.
	if s, got := call(t, c, "POST", "/v1/checkpoint", `{"ref": "/ckpt/t1/step-7", "step": 7}`); s != 201 || got["seq"] == nil {
		t.Errorf("POST /v1/checkpoint = %d %v", s, got)
	}
	if task := n.fold().Tasks["t1"]; task.Checkpoint != "/ckpt/t1/step-7" || task.CheckpointStep != 7 {
		t.Errorf("checkpoint in the log = %q step %d", task.Checkpoint, task.CheckpointStep)
	}
	// 4. Restart: the next agent opens the socket again.
	n.stop()
	n.start(false)
	if s, got := call(t, sockClient(path), "GET", "/v1/preemption", ""); s != 200 || got["requested"] != false {
		t.Errorf("after a restart, GET /v1/preemption = %d %v", s, got)
	}
	// 5. The preemption answers a long-poll with its deadline and preemptor.
	type answer struct {
		status int
		body   map[string]any
	}
	long := make(chan answer, 1)
	go func() {
		s, b := call(t, sockClient(path), "GET", "/v1/preemption?wait=20s", "")
		long <- answer{s, b}
	}()
	time.Sleep(200 * time.Millisecond)
	n.append(events.Submitted{TaskID: "crit", Name: "crit", Team: "vision", Priority: "critical", GPUs: 1, Hours: 1, Hypothesis: "h", Command: "true",
		SubmittedAt: time.Now()})
	requested := time.Now()
	n.append(events.PreemptRequested{TaskID: "t1", For: "crit", Policy: "priority", Reason: "crit waits", GraceS: 120, BasedOnSeq: n.fold().Seq})
	var a answer
	select {
	case a = <-long:
	case <-time.After(15 * time.Second):
		t.Fatal("the long-poll did not answer the preemption")
	}
	if a.status != 200 || a.body["requested"] != true || a.body["by_task"] != "crit" || a.body["by_priority"] != "critical" || a.body["policy"] != "priority" || a.body["reason"] != "crit waits" {
		t.Errorf("long-poll = %d %v", a.status, a.body)
	}
	deadline, err := time.Parse(time.RFC3339, a.body["deadline"].(string))
	grace := time.Duration(dtGrace * float64(time.Second))
	if err != nil || deadline.Before(requested.Add(grace-time.Second)) || deadline.After(time.Now().Add(grace+time.Second)) {
		t.Errorf("deadline %v (%v), want about %v after the request", a.body["deadline"], err, grace)
	}
	// The job does not trap USR1: it ends, and its socket with it.
	n.waitState("t1", domain.Preempting, 15*time.Second)
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); os.IsNotExist(err) {
			break
		}
		if time.Now().After(end) {
			t.Errorf("socket %s left after its run ended", path)
			break
		}
	}
}

// dtGrace is the grace domaintest's tasks get.
const dtGrace = 120.0

// TestPythonClient: a job using the Python client (python/gpuq) against a
// real agent learns of its preemption through the socket, with its
// deadline and preemptor, reports its checkpoint with its step and exits 0:
// the task is preempted and resumes from that checkpoint.
func TestPythonClient(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no python3")
	}
	root, err := filepath.Abs("../../python")
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t)
	out := t.TempDir()
	n.start(false)
	script := `import gpuq, json, sys, time
task = gpuq.current()
open("` + out + `/ready", "w").close()
while not task.should_checkpoint():
    time.sleep(0.01)  # one training step
p = task.preemption
path = task.checkpoint_dir + "/step-5"
open(path, "w").write("weights")
r = task.checkpoint_committed(path, step=5)
json.dump({"reason": p.reason, "by_task": p.by_task, "left": p.seconds_left(), "seq": r.get("seq")}, open("` + out + `/seen", "w"))
sys.exit(0)`
	n.run("t1", "cd /tmp && PYTHONPATH="+root+" python3 -c '"+script+"'", 0)
	n.waitState("t1", domain.Running, 10*time.Second)
	waitFile(t, filepath.Join(out, "ready"), 10*time.Second)
	n.append(events.Submitted{TaskID: "crit", Name: "crit", Team: "vision", Priority: "critical", GPUs: 1, Hours: 1, Hypothesis: "h", Command: "true",
		SubmittedAt: time.Now()})
	n.append(events.PreemptRequested{TaskID: "t1", For: "crit", Policy: "priority", Reason: "crit waits", GraceS: 120, BasedOnSeq: n.fold().Seq})
	for deadline := time.Now().Add(20 * time.Second); n.count("t1", events.TypePreempted) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not preempted: %s", n.types("t1"))
		}
	}
	task := n.fold().Tasks["t1"]
	b := waitFile(t, filepath.Join(out, "seen"), 5*time.Second)
	var got map[string]any
	if err := json.Unmarshal([]byte(b), &got); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	if got["reason"] != "crit waits" || got["by_task"] != "crit" || got["seq"] == nil {
		t.Errorf("the job saw %v", got)
	}
	if left, _ := got["left"].(float64); left < 100 || left > 120 {
		t.Errorf("seconds left %v, want about 120", got["left"])
	}
	if task.Checkpoint != filepath.Join(n.dir, "ckpt", "t1", "step-5") || task.CheckpointStep != 5 {
		t.Errorf("checkpoint %q step %d", task.Checkpoint, task.CheckpointStep)
	}
	if n.count("t1", events.TypePreempted) != 1 {
		t.Errorf("history: %s", n.types("t1"))
	}
	// The shell (cd …&& python3) died of the signal; the job's status is
	// its last process's, the client's exit 0.
	_, _ = events.ReadAll(context.Background(), n.log, 1, events.TaskSubjects("t1"), func(r events.Record) error {
		if p, ok := r.Event.(events.Preempted); ok && (p.ExitCode != 0 || p.Forced) {
			t.Errorf("preempted %+v, want exit 0, not forced", p)
		}
		return nil
	})
}

// TestSocketWhileCutOff: cut off from NATS, the node still answers the
// job's socket, with the preemption its fence sent, and keeps a checkpoint
// in the spool (with its step) for the log.
func TestSocketWhileCutOff(t *testing.T) {
	n := newNode(t)
	n.timeout = 1500 * time.Millisecond
	out := t.TempDir()
	n.start(false)
	n.run("t1", `echo -n "$GPUQ_TASK_SOCKET" > `+out+`/tmp && mv `+out+`/tmp `+out+`/sock; trap 'touch `+out+`/sig' USR1; while [ ! -f `+out+`/done ]; do sleep 0.05; done`, 0)
	n.waitState("t1", domain.Running, 10*time.Second)
	path := waitFile(t, filepath.Join(out, "sock"), 10*time.Second)
	n.srv.Shutdown() // heartbeats fail from now on
	n.natsOff = true
	waitFile(t, filepath.Join(out, "sig"), 15*time.Second)
	defer os.WriteFile(filepath.Join(out, "done"), nil, 0o644)
	c := sockClient(path)
	if s, got := call(t, c, "GET", "/v1/preemption", ""); s != 200 || got["requested"] != true || got["policy"] != "fence" || got["deadline"] == nil {
		t.Errorf("GET /v1/preemption while cut off = %d %v", s, got)
	}
	if s, got := call(t, c, "POST", "/v1/checkpoint", `{"ref": "/c/9", "step": 9}`); s != 202 || got["spooled"] != true {
		t.Errorf("POST /v1/checkpoint while cut off = %d %v", s, got)
	}
	if b, err := os.ReadFile(filepath.Join(n.dir, "ckpt", "t1", pendingRefFile)); string(b) != "/c/9\nstep 9\n" {
		t.Errorf("spool = %q (%v)", b, err)
	}
}

// TestProgressRecorded: a job's progress through its socket reaches the
// log when it moved, at most once per ProgressEvery.
func TestProgressRecorded(t *testing.T) {
	n := newNode(t)
	out := t.TempDir()
	n.start(false)
	n.run("t1", `echo -n "$GPUQ_TASK_SOCKET" > `+out+`/tmp && mv `+out+`/tmp `+out+`/sock; sleep 30`, 0)
	n.waitState("t1", domain.Running, 10*time.Second)
	c := sockClient(waitFile(t, filepath.Join(out, "sock"), 10*time.Second))
	if s, got := call(t, c, "POST", "/v1/progress", `{"step": 300, "total": 1200}`); s != 200 {
		t.Fatalf("POST /v1/progress = %d %v", s, got)
	}
	for deadline := time.Now().Add(10 * time.Second); n.fold().Tasks["t1"].ProgressFraction != 0.25; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("progress not recorded: %s", n.types("t1"))
		}
	}
	// Within the interval (10 s), a new report stays in memory only.
	call(t, c, "POST", "/v1/progress", `{"fraction": 0.5}`)
	time.Sleep(time.Second)
	if got := n.count("t1", events.TypeProgressReported); got != 1 {
		t.Errorf("%d progress_reported within the interval, want 1", got)
	}
	if s, got := call(t, c, "GET", "/v1/progress", ""); s != 200 || got["fraction"] != 0.5 {
		t.Errorf("GET /v1/progress = %d %v", s, got)
	}
}
