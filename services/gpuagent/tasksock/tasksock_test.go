package tasksock

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeBackend records checkpoints; spool makes it answer as a node cut off
// from NATS, refuse as a node whose task no longer runs here.
type fakeBackend struct {
	mu     sync.Mutex
	got    []Checkpoint
	spool  bool
	refuse error
}

func (b *fakeBackend) Checkpoint(_ context.Context, t Task, c Checkpoint) (Committed, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.refuse != nil {
		return Committed{}, b.refuse
	}
	b.got = append(b.got, c)
	if b.spool {
		return Committed{TaskID: t.ID, Ref: c.Ref, Step: c.Step, Spooled: true}, nil
	}
	return Committed{TaskID: t.ID, Ref: c.Ref, Step: c.Step, Seq: 42}, nil
}

var task = Task{ID: "00000000-0000-4000-8000-00000000000a", Name: "train", Team: "vision", Attempt: 2, Run: 17,
	ResumeFrom: "/ckpt/a/step-120", ResumeStep: 120, GraceS: 30, Signal: "SIGUSR1", GPUs: []string{"GPU-0"}, Node: "n1"}

// open serves one socket in a fresh run directory and returns an HTTP
// client that dials it.
func open(t *testing.T, srv *Server, key string) (*Socket, *http.Client) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ts")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	k, err := srv.Open(Run{Key: key, RunDir: filepath.Join(dir, "runs", "17"), Task: task})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(key) })
	return k, client(k.Path())
}

func client(path string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}}}
}

// do sends a request and returns the status and the decoded JSON body.
func do(t *testing.T, c *http.Client, method, path, ctype, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, "http://task"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: not JSON: %q", method, path, b)
	}
	return resp.StatusCode, out
}

func TestAPI(t *testing.T) {
	const js = "application/json"
	tests := map[string]struct {
		method, path, ctype, body string
		spool                     bool
		refuse                    error
		wantStatus                int
		wantField                 string         // for a refusal
		want                      map[string]any // keys of the answer to compare
		wantCkpt                  []Checkpoint
	}{
		"task": {method: "GET", path: "/v1/task", wantStatus: 200,
			want: map[string]any{"id": task.ID, "attempt": 2.0, "resume_from": "/ckpt/a/step-120", "resume_step": 120.0, "grace_s": 30.0, "gpus": []any{"GPU-0"}}},
		"task with a query parameter": {method: "GET", path: "/v1/task?x=1", wantStatus: 400, wantField: "x"},
		"task by POST":                {method: "POST", path: "/v1/task", ctype: js, body: "{}", wantStatus: 405, wantField: "method"},
		"unknown path":                {method: "GET", path: "/v2/task", wantStatus: 404, wantField: "path"},
		"preemption before any request": {method: "GET", path: "/v1/preemption", wantStatus: 200,
			want: map[string]any{"requested": false, "deadline": nil, "grace_s": 30.0, "by_task": ""}},
		"preemption, a short wait ends without a request": {method: "GET", path: "/v1/preemption?wait=50ms", wantStatus: 200,
			want: map[string]any{"requested": false}},
		"preemption, wait in seconds":     {method: "GET", path: "/v1/preemption?wait=0.05", wantStatus: 200, want: map[string]any{"requested": false}},
		"preemption, wait not a duration": {method: "GET", path: "/v1/preemption?wait=soon", wantStatus: 400, wantField: "wait"},
		"preemption, wait negative":       {method: "GET", path: "/v1/preemption?wait=-1s", wantStatus: 400, wantField: "wait"},
		"preemption, wait too long":       {method: "GET", path: "/v1/preemption?wait=1h", wantStatus: 400, wantField: "wait"},
		"preemption, wait twice":          {method: "GET", path: "/v1/preemption?wait=1s&wait=2s", wantStatus: 400, wantField: "wait"},
		"preemption, unknown parameter":   {method: "GET", path: "/v1/preemption?timeout=1s", wantStatus: 400, wantField: "timeout"},
		"checkpoint with a step": {method: "POST", path: "/v1/checkpoint", ctype: js, body: `{"ref": "/ckpt/a/step-140", "step": 140}`, wantStatus: 201,
			want: map[string]any{"ref": "/ckpt/a/step-140", "step": 140.0, "seq": 42.0}, wantCkpt: []Checkpoint{{Ref: "/ckpt/a/step-140", Step: 140}}},
		"checkpoint without a content type": {method: "POST", path: "/v1/checkpoint", body: `{"ref": "s3://b/k"}`, wantStatus: 201,
			want: map[string]any{"ref": "s3://b/k"}, wantCkpt: []Checkpoint{{Ref: "s3://b/k"}}},
		"checkpoint spooled while NATS is out of reach": {method: "POST", path: "/v1/checkpoint", ctype: js, body: `{"ref": "/c/1", "step": 1}`, spool: true,
			wantStatus: 202, want: map[string]any{"spooled": true}, wantCkpt: []Checkpoint{{Ref: "/c/1", Step: 1}}},
		"checkpoint refused by the node": {method: "POST", path: "/v1/checkpoint", ctype: js, body: `{"ref": "/c/1"}`,
			refuse: Refuse(409, "task_id", "the task no longer runs here"), wantStatus: 409, wantField: "task_id"},
		"checkpoint without ref":      {method: "POST", path: "/v1/checkpoint", ctype: js, body: `{"step": 3}`, wantStatus: 400, wantField: "ref"},
		"checkpoint with a blank ref": {method: "POST", path: "/v1/checkpoint", ctype: js, body: `{"ref": "  "}`, wantStatus: 400, wantField: "ref"},
		"checkpoint ref with a control character": {method: "POST", path: "/v1/checkpoint", ctype: js, body: `{"ref": "a\u0000b"}`,
			wantStatus: 400, wantField: "ref"},
		"checkpoint ref too long": {method: "POST", path: "/v1/checkpoint", ctype: js, body: `{"ref": "` + strings.Repeat("x", MaxRef+1) + `"}`,
			wantStatus: 400, wantField: "ref"},
		"checkpoint ref not a string": {method: "POST", path: "/v1/checkpoint", ctype: js, body: `{"ref": 7}`, wantStatus: 400, wantField: "ref"},
		"checkpoint negative step":    {method: "POST", path: "/v1/checkpoint", ctype: js, body: `{"ref": "/c", "step": -1}`, wantStatus: 400, wantField: "step"},
		"checkpoint fractional step":  {method: "POST", path: "/v1/checkpoint", ctype: js, body: `{"ref": "/c", "step": 1.5}`, wantStatus: 400, wantField: "step"},
		"checkpoint unknown field":    {method: "POST", path: "/v1/checkpoint", ctype: js, body: `{"ref": "/c", "path": "/c"}`, wantStatus: 400, wantField: "path"},
		"checkpoint empty body":       {method: "POST", path: "/v1/checkpoint", ctype: js, body: ``, wantStatus: 400, wantField: "body"},
		"checkpoint not JSON":         {method: "POST", path: "/v1/checkpoint", ctype: js, body: `ref=/c`, wantStatus: 400, wantField: "body"},
		"checkpoint an array":         {method: "POST", path: "/v1/checkpoint", ctype: js, body: `["/c"]`, wantStatus: 400, wantField: "body"},
		"checkpoint two objects":      {method: "POST", path: "/v1/checkpoint", ctype: js, body: `{"ref": "/c"} {"ref": "/d"}`, wantStatus: 400, wantField: "body"},
		"checkpoint stray brace":      {method: "POST", path: "/v1/checkpoint", ctype: js, body: `{"ref": "/c"}}`, wantStatus: 400, wantField: "body"},
		"checkpoint as a form":        {method: "POST", path: "/v1/checkpoint", ctype: "application/x-www-form-urlencoded", body: `ref=/c`, wantStatus: 415, wantField: "Content-Type"},
		"checkpoint body over 64 KiB": {method: "POST", path: "/v1/checkpoint", ctype: js, body: `{"ref": "/c", "pad": "` + strings.Repeat("x", MaxBody) + `"}`,
			wantStatus: 413, wantField: "body"},
		"checkpoint by GET": {method: "GET", path: "/v1/checkpoint", wantStatus: 405, wantField: "method"},
		"progress as step and total": {method: "POST", path: "/v1/progress", ctype: js, body: `{"step": 30, "total": 120}`, wantStatus: 200,
			want: map[string]any{"step": 30.0, "total": 120.0, "fraction": 0.25}},
		"progress as a fraction": {method: "POST", path: "/v1/progress", ctype: js, body: `{"fraction": 0.5}`, wantStatus: 200,
			want: map[string]any{"fraction": 0.5}},
		"progress both ways":          {method: "POST", path: "/v1/progress", ctype: js, body: `{"fraction": 0.5, "step": 1}`, wantStatus: 400, wantField: "fraction"},
		"progress fraction above 1":   {method: "POST", path: "/v1/progress", ctype: js, body: `{"fraction": 1.5}`, wantStatus: 400, wantField: "fraction"},
		"progress step without total": {method: "POST", path: "/v1/progress", ctype: js, body: `{"step": 3}`, wantStatus: 400, wantField: "total"},
		"progress total without step": {method: "POST", path: "/v1/progress", ctype: js, body: `{"total": 3}`, wantStatus: 400, wantField: "step"},
		"progress step over total":    {method: "POST", path: "/v1/progress", ctype: js, body: `{"step": 4, "total": 3}`, wantStatus: 400, wantField: "step"},
		"progress total zero":         {method: "POST", path: "/v1/progress", ctype: js, body: `{"step": 0, "total": 0}`, wantStatus: 400, wantField: "total"},
		"progress nothing":            {method: "POST", path: "/v1/progress", ctype: js, body: `{}`, wantStatus: 400, wantField: "step"},
		"progress fraction a string":  {method: "POST", path: "/v1/progress", ctype: js, body: `{"fraction": "half"}`, wantStatus: 400, wantField: "fraction"},
		"progress read before any":    {method: "GET", path: "/v1/progress", wantStatus: 200, want: map[string]any{"reported": false}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := &fakeBackend{spool: tc.spool, refuse: tc.refuse}
			_, c := open(t, NewServer(b), "r")
			status, got := do(t, c, tc.method, tc.path, tc.ctype, tc.body)
			if status != tc.wantStatus {
				t.Fatalf("status = %d, want %d (%v)", status, tc.wantStatus, got)
			}
			if tc.wantField != "" {
				if got["field"] != tc.wantField || got["error"] == "" {
					t.Errorf("refusal = %v, want field %q and an error", got, tc.wantField)
				}
			}
			for key, want := range tc.want {
				if diff := cmp.Diff(want, got[key]); diff != "" {
					t.Errorf("%s (-want +got):\n%s", key, diff)
				}
			}
			if diff := cmp.Diff(tc.wantCkpt, b.got); diff != "" {
				t.Errorf("checkpoints recorded (-want +got):\n%s", diff)
			}
		})
	}
}

// A long-poll answers as soon as the preemption is requested, with its
// deadline and reason; later requests answer at once.
func TestPreemptionLongPoll(t *testing.T) {
	k, c := open(t, NewServer(nil), "r")
	deadline := time.Date(2026, 12, 3, 16, 0, 30, 0, time.UTC)
	type answer struct {
		status int
		body   map[string]any
		took   time.Duration
	}
	got := make(chan answer, 1)
	go func() {
		begin := time.Now()
		s, b := do(t, c, "GET", "/v1/preemption?wait=20s", "", "")
		got <- answer{s, b, time.Since(begin)}
	}()
	time.Sleep(200 * time.Millisecond)
	k.SetPreemption(Preemption{Requested: true, Reason: "a critical task waits", Deadline: &deadline, ByTask: "c1", ByPriority: "critical", Policy: "priority"})
	var a answer
	select {
	case a = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the long-poll did not answer the request")
	}
	want := map[string]any{"requested": true, "reason": "a critical task waits", "deadline": "2026-12-03T16:00:30Z", "grace_s": 30.0,
		"by_task": "c1", "by_priority": "critical", "policy": "priority"}
	if diff := cmp.Diff(want, a.body); a.status != 200 || diff != "" {
		t.Errorf("status %d; answer (-want +got):\n%s", a.status, diff)
	}
	if a.took > 5*time.Second {
		t.Errorf("the long-poll took %v", a.took)
	}
	begin := time.Now()
	if _, b := do(t, c, "GET", "/v1/preemption?wait=20s", "", ""); b["requested"] != true || time.Since(begin) > 5*time.Second {
		t.Errorf("after the request, a long-poll = %v after %v; want at once", b, time.Since(begin))
	}
}

// Long-polls waiting at once on one socket are bounded; closing the
// socket answers them.
func TestLongPollsBounded(t *testing.T) {
	srv := NewServer(nil)
	_, c := open(t, srv, "r")
	var wg sync.WaitGroup
	for range MaxWaiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := client(srv.Get("r").Path())
			req, _ := http.NewRequest("GET", "http://task/v1/preemption?wait=30s", nil)
			if resp, err := cl.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		k := srv.Get("r")
		k.mu.Lock()
		n := k.waiting
		k.mu.Unlock()
		if n == MaxWaiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d long-polls waiting, want %d", n, MaxWaiting)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s, b := do(t, c, "GET", "/v1/preemption?wait=30s", "", ""); s != 429 || b["field"] != "wait" {
		t.Errorf("one more long-poll = %d %v, want 429 naming wait", s, b)
	}
	if s, b := do(t, c, "GET", "/v1/preemption", "", ""); s != 200 || b["requested"] != false {
		t.Errorf("a poll without wait = %d %v, want 200", s, b)
	}
	begin := time.Now()
	srv.Close("r")
	wg.Wait()
	if el := time.Since(begin); el > 5*time.Second {
		t.Errorf("closing the socket took %v to end its long-polls", el)
	}
}

// The socket is the run's: 0700 directory, 0600 socket, removed on
// Close, re-created over a stale one, and refused to processes of another
// task of the node.
func TestSocketFileAndIsolation(t *testing.T) {
	srv := NewServer(nil)
	// Peers: pid 100 descends from run a's supervisor (10), pid 200 from
	// run b's (20), pid 300 from neither.
	srv.ancestors = func(pid int) []int {
		return map[int][]int{100: {100, 10, 1}, 200: {200, 20, 1}, 300: {300, 1}}[pid]
	}
	dir, _ := os.MkdirTemp("", "ts")
	defer os.RemoveAll(dir)
	runA := filepath.Join(dir, "a")
	// A stale socket file (a crashed agent's) does not stop the new one.
	_ = os.MkdirAll(filepath.Join(runA, "sock"), 0o755)
	_ = os.WriteFile(filepath.Join(runA, "sock", "task.sock"), nil, 0o644)
	a, err := srv.Open(Run{Key: "a", RunDir: runA, Task: task, Owner: func() int { return 10 }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Open(Run{Key: "b", RunDir: filepath.Join(dir, "b"), Task: task, Owner: func() int { return 20 }}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(a.Path())
	if err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Errorf("socket %s: %v %v, want a socket of mode 0600", a.Path(), st.Mode(), err)
	}
	if d, _ := os.Stat(filepath.Dir(a.Path())); d.Mode().Perm() != 0o700 {
		t.Errorf("socket directory mode %v, want 0700", d.Mode().Perm())
	}
	tests := map[string]struct {
		pid  int
		want error
	}{
		"its own task's process":     {pid: 100},
		"another task's process":     {pid: 200, want: errOtherTask},
		"a process outside any task": {pid: 300},
		"an unknown peer":            {pid: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := a.admit(tc.pid); got != tc.want {
				t.Errorf("admit(%d) = %v, want %v", tc.pid, got, tc.want)
			}
		})
	}
	// Over the socket, this test (outside any task) is admitted.
	if s, _ := do(t, client(a.Path()), "GET", "/v1/task", "", ""); s != 200 {
		t.Errorf("GET /v1/task from outside any task = %d", s)
	}
	srv.CloseAll()
	if _, err := os.Stat(a.Path()); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}
}

func TestPath(t *testing.T) {
	short := "/data/tasks/x/runs/7"
	if got := Path(short); got != short+"/sock/task.sock" {
		t.Errorf("Path(%q) = %q", short, got)
	}
	long := "/" + strings.Repeat("d", 120) + "/runs/7"
	got := Path(long)
	if len(got) > maxPath || !strings.HasPrefix(got, filepath.Join(os.TempDir(), fmt.Sprintf("gpuq-%d", os.Getuid()))) {
		t.Errorf("Path(long) = %q (%d bytes), want one under the temporary directory within %d bytes", got, len(got), maxPath)
	}
	if Path(long) != got || Path(long+"8") == got {
		t.Error("Path of a long run directory is not one per run directory")
	}
}
