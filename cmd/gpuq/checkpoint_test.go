package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/services/gpuagent/tasksock"
)

// runCLI runs one gpuq command in this process; it answers the exit code
// and what the command printed on stdout.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	out := make(chan string)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, r)
		out <- b.String()
	}()
	root := newRoot()
	root.SetArgs(args)
	err = root.Execute()
	os.Stdout = stdout
	w.Close()
	printed := <-out
	r.Close()
	if err != nil {
		t.Logf("gpuq %v: %v", args, err)
		return code(err), printed
	}
	return 0, printed
}

// TestCheckpointCLI: `gpuq checkpoint` goes through the submitter, which
// accepts it only while the task runs or is preempting; the exit codes are
// the CLI's: 2 for a bad argument or a refused state, 3 for an unknown task.
func TestCheckpointCLI(t *testing.T) {
	s := newStack(t)
	s.submitter()
	cl := s.client()
	n := 0
	// task submits a task and moves it as the scheduler and an agent would.
	task := func(to ...events.Event) string {
		t.Helper()
		var r api.SubmitReply
		if err := cl.Call(api.OpSubmit, domain.Request{Name: "ck", Team: "t", GPUs: 1, Hours: 1, Hypothesis: "h", Command: "c"}, &r); err != nil {
			t.Fatal(err)
		}
		n++
		node, gpu := "node-"+string(rune('a'+n)), "GPU-"+r.TaskID
		for _, e := range append([]events.Event{
			events.Available{Node: node, GPUs: []events.GPU{{UUID: gpu, Model: "A100", MemoryMiB: 40960, Healthy: true}}, FreeGPUs: 1},
			events.Dispatched{TaskID: r.TaskID, Placements: []events.Placement{{Node: node, GPUs: []string{gpu}}}},
		}, to...) {
			switch v := e.(type) { // reported by the node the task runs on
			case events.Started:
				v.Node = node
				e = v
			case events.Completed:
				v.Node = node
				e = v
			}
			if _, err := events.Append(s.ctx, s.log, withID(e, r.TaskID), events.Meta{Time: time.Now()}, "", nil); err != nil {
				t.Fatal(err)
			}
		}
		return r.TaskID
	}
	started := events.Started{Node: "n", PID: 1}
	queued := func() string {
		t.Helper()
		var r api.SubmitReply
		if err := cl.Call(api.OpSubmit, domain.Request{Name: "q", Team: "t", GPUs: 1, Hours: 1, Hypothesis: "h", Command: "c"}, &r); err != nil {
			t.Fatal(err)
		}
		return r.TaskID
	}
	url := s.srv.URL()
	cases := map[string]struct {
		task     func() string // "" for none
		env      bool          // the id comes from GPUQ_TASK_ID
		args     []string      // after the task
		repeat   bool          // run it twice (a retry)
		wantCode int
		wantRef  string // the task's checkpoint afterwards; "" for none
		wantJSON map[string]any
	}{
		"running ok":    {task: func() string { return task(started) }, args: []string{"--ref", "/ck/1"}, wantRef: "/ck/1"},
		"preempting ok": {task: func() string { return task(started, events.PreemptRequested{For: "x"}) }, args: []string{"--ref", "/ck/2"}, wantRef: "/ck/2"},
		"json": {task: func() string { return task(started) }, args: []string{"--ref", "/ck/3", "--json"}, wantRef: "/ck/3",
			wantJSON: map[string]any{"ref": "/ck/3", "state": "running"}},
		"task from GPUQ_TASK_ID": {task: func() string { return task(started) }, env: true, args: []string{"--ref", "/ck/4"}, wantRef: "/ck/4"},
		"duplicate retry":        {task: func() string { return task(started) }, args: []string{"--ref", "/ck/5"}, repeat: true, wantRef: "/ck/5"},
		"queued rejected":        {task: queued, args: []string{"--ref", "/ck/6"}, wantCode: exitInvalid},
		"dispatched rejected":    {task: func() string { return task() }, args: []string{"--ref", "/ck/7"}, wantCode: exitInvalid},
		"completed rejected":     {task: func() string { return task(started, events.Completed{}) }, args: []string{"--ref", "/ck/8"}, wantCode: exitInvalid},
		"unknown task":           {task: func() string { return "00000000-0000-7000-8000-000000000000" }, args: []string{"--ref", "/ck/9"}, wantCode: exitNotFound},
		"task id not a UUID":     {task: func() string { return "no-such-task" }, args: []string{"--ref", "/ck/9"}, wantCode: exitInvalid},
		"empty ref":              {task: func() string { return task(started) }, args: []string{"--ref", " "}, wantCode: exitInvalid},
		"no ref":                 {task: func() string { return task(started) }, wantCode: exitInvalid},
		"ref with a newline":     {task: func() string { return task(started) }, args: []string{"--ref", "/ck\n10"}, wantCode: exitInvalid},
		"no task":                {env: true, task: func() string { return "" }, args: []string{"--ref", "/ck/11"}, wantCode: exitInvalid},
		"task id with a dot":     {task: func() string { return "a.b" }, args: []string{"--ref", "/ck/12"}, wantCode: exitInvalid},
		"an argument":            {task: func() string { return task(started) }, args: []string{"extra", "--ref", "/ck/13"}, wantCode: exitInvalid},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			id := tc.task()
			args := []string{"checkpoint", "--nats", url}
			if tc.env {
				t.Setenv("GPUQ_TASK_ID", id)
			} else {
				t.Setenv("GPUQ_TASK_ID", "")
				args = append(args, "--task", id)
			}
			args = append(args, tc.args...)
			times := 1
			if tc.repeat {
				times = 2
			}
			var (
				got int
				out string
			)
			for range times {
				got, out = runCLI(t, args...)
			}
			if got != tc.wantCode {
				t.Errorf("exit code %d, want %d", got, tc.wantCode)
			}
			if tc.wantJSON != nil {
				var m map[string]any
				if err := json.Unmarshal([]byte(out), &m); err != nil {
					t.Fatalf("output %q: %v", out, err)
				}
				if seq, ok := m["seq"].(float64); !ok || seq == 0 {
					t.Errorf("seq %v, want the event's sequence", m["seq"])
				}
				delete(m, "seq")
				tc.wantJSON["task_id"] = id
				if diff := cmp.Diff(tc.wantJSON, m); diff != "" {
					t.Errorf("json (-want +got):\n%s", diff)
				}
			} else if out != "" {
				t.Errorf("printed %q, want nothing", out)
			}
			if !api.IsTaskID(id) {
				return
			}
			var v api.TaskView
			if err := cl.Call(api.OpShow, api.IDRequest{TaskID: id}, &v); err != nil && !api.IsNotFound(err) {
				t.Fatal(err)
			}
			if v.Checkpoint != tc.wantRef {
				t.Errorf("checkpoint %q, want %q", v.Checkpoint, tc.wantRef)
			}
		})
	}
}

// withID sets the task id of a task event built without one.
func withID(e events.Event, id string) events.Event {
	switch e := e.(type) {
	case events.Dispatched:
		e.TaskID = id
		return e
	case events.Started:
		e.TaskID = id
		return e
	case events.PreemptRequested:
		e.TaskID = id
		return e
	case events.Completed:
		e.TaskID = id
		return e
	}
	return e
}

// TestCheckpointSpooled: inside a job whose node cannot reach NATS, the
// ref is kept for the agent (exit 0); outside a job, or for another task,
// an unreachable NATS is an error as before.
func TestCheckpointSpooled(t *testing.T) {
	dead := "nats://127.0.0.1:1" // nothing listens there
	cases := map[string]struct {
		envTask, task string
		wantCode      int
		wantSpool     bool
	}{
		"inside the job: kept for the agent": {envTask: "t1", task: "t1", wantSpool: true},
		"another task's checkpoint":          {envTask: "t1", task: "t2", wantCode: exitErr},
		"outside a job":                      {task: "t1", wantCode: exitErr},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("GPUQ_TASK_ID", tc.envTask)
			t.Setenv("GPUQ_CHECKPOINT_DIR", dir)
			got, _ := runCLI(t, "checkpoint", "--nats", dead, "--task", tc.task, "--ref", "/ck/step-7")
			if got != tc.wantCode {
				t.Errorf("exit code %d, want %d", got, tc.wantCode)
			}
			b, err := os.ReadFile(filepath.Join(dir, PendingRefFile))
			if tc.wantSpool && string(b) != "/ck/step-7" {
				t.Errorf("spooled %q (%v), want the ref", b, err)
			}
			if !tc.wantSpool && err == nil {
				t.Errorf("spooled %q for a checkpoint that is not this job's", b)
			}
		})
	}
}

// socketBackend is a node's agent as a task socket's test sees it.
type socketBackend struct {
	got    []tasksock.Checkpoint
	refuse error
}

func (b *socketBackend) Checkpoint(_ context.Context, task tasksock.Task, c tasksock.Checkpoint) (tasksock.Committed, error) {
	if b.refuse != nil {
		return tasksock.Committed{}, b.refuse
	}
	b.got = append(b.got, c)
	return tasksock.Committed{TaskID: task.ID, Ref: c.Ref, Step: c.Step, Seq: 9}, nil
}

// TestCheckpointThroughTaskSocket: inside a job with GPUQ_TASK_SOCKET,
// gpuq checkpoint of its own task goes through the socket (no NATS
// needed); a refusal there is exit 2; an unreachable socket falls back to
// NATS (here unreachable too: the spool).
func TestCheckpointThroughTaskSocket(t *testing.T) {
	dead := "nats://127.0.0.1:1"
	cases := map[string]struct {
		task       string
		socket     string // "live", "gone"
		refuse     error
		wantCode   int
		wantSocket []tasksock.Checkpoint
		wantSpool  string
	}{
		"its own task: through the socket, with its step": {task: "t1", socket: "live", wantSocket: []tasksock.Checkpoint{{Ref: "/ck/step-7", Step: 7}}},
		"refused by the node: exit 2": {task: "t1", socket: "live", refuse: tasksock.Refuse(409, "task_id", "task_id: the run is over"),
			wantCode: exitInvalid},
		"the socket unreachable: over NATS, then the spool": {task: "t1", socket: "gone", wantSpool: "/ck/step-7"},
		"another task's: not through this socket":           {task: "t2", socket: "live", wantCode: exitErr},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "ck")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			b := &socketBackend{refuse: tc.refuse}
			srv := tasksock.NewServer(b)
			k, err := srv.Open(tasksock.Run{Key: "r", RunDir: filepath.Join(dir, "run"), Task: tasksock.Task{ID: "t1"}})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.CloseAll()
			path := k.Path()
			if tc.socket == "gone" {
				path = filepath.Join(dir, "nothing.sock")
			}
			t.Setenv("GPUQ_TASK_ID", "t1")
			t.Setenv("GPUQ_TASK_SOCKET", path)
			t.Setenv("GPUQ_CHECKPOINT_DIR", dir)
			got, _ := runCLI(t, "checkpoint", "--nats", dead, "--task", tc.task, "--ref", "/ck/step-7", "--step", "7")
			if got != tc.wantCode {
				t.Errorf("exit code %d, want %d", got, tc.wantCode)
			}
			if diff := cmp.Diff(tc.wantSocket, b.got); diff != "" {
				t.Errorf("through the socket (-want +got):\n%s", diff)
			}
			spool, _ := os.ReadFile(filepath.Join(dir, PendingRefFile))
			if string(spool) != tc.wantSpool {
				t.Errorf("spooled %q, want %q", spool, tc.wantSpool)
			}
		})
	}
}
