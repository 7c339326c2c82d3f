package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/embedded"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/services/advisor"
	"github.com/gpuq/gpuq/services/gpuagent"
	"github.com/gpuq/gpuq/services/gpuagent/inventory"
	"github.com/gpuq/gpuq/services/scheduler"
	"github.com/gpuq/gpuq/services/submitter"
)

// TestAuthAllowedPaths runs every service as its own role, as `gpuq dev
// --auth` does (devConns), on a server that enforces the roles of `gpuq
// auth init`: a team submits through its scoped API, the task is
// scheduled, run and completed, the scheduler steps down (lease delete,
// snapshot) and a new one takes over from the snapshot — and the server
// refuses nothing along the way.
func TestAuthAllowedPaths(t *testing.T) {
	dir := t.TempDir()
	authDir := filepath.Join(dir, "auth")
	if _, err := auth.Init(authDir, []string{"vision", "nlp"}, []string{"node-1"}); err != nil {
		t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		violations []string
	)
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(dir, "js"), Port: -1,
		AuthConfig: filepath.Join(authDir, auth.ConfigFile),
		Warn: func(msg string) {
			if strings.Contains(msg, "Violation") {
				mu.Lock()
				violations = append(violations, msg)
				mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	conns := &devConns{srv: srv, dir: authDir, cfg: jetstream.StreamConfig{}}
	t.Cleanup(conns.close)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	start := func(name string, ctx context.Context, run func(ready func()) error) {
		t.Helper()
		ready := make(chan struct{})
		var once sync.Once
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(func() { once.Do(func() { close(ready) }) }); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
		select {
		case <-ready:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s not ready in 20s", name)
		}
	}
	open := func(role string) (*jetstream.Log, func() *api.Client) {
		t.Helper()
		nc, l, err := conns.open(ctx, role)
		if err != nil {
			t.Fatalf("%s: %v", role, err)
		}
		return l, func() *api.Client { return &api.Client{NC: nc, Timeout: 10 * time.Second} }
	}
	if _, _, err := conns.open(ctx, "admin"); err != nil {
		t.Fatal(err)
	}
	subLog, _ := open("submitter")
	subNC := conns.opened[len(conns.opened)-1]
	start("submitter", ctx, func(ready func()) error {
		return submitter.Run(ctx, submitter.Config{NC: subNC, Log: subLog, Logger: quiet, Limits: domain.DefaultLimits, Ready: ready})
	})
	schedule := func() context.CancelFunc {
		l, _ := open("scheduler")
		sctx, stop := context.WithCancel(ctx)
		start("scheduler", sctx, func(ready func()) error {
			return scheduler.Run(sctx, scheduler.Config{Log: l, JS: l.JetStream(), Policy: policy.New(policy.Options{}), Logger: quiet,
				LeaseTTL: 2 * time.Second, Tick: 100 * time.Millisecond, SnapshotEvery: 1, Ready: ready})
		})
		return stop
	}
	stopScheduler := schedule()
	advLog, _ := open("advisor")
	advNC := conns.opened[len(conns.opened)-1]
	start("advisor", ctx, func(ready func()) error {
		return advisor.Run(ctx, advisor.Config{Log: advLog, JS: advLog.JetStream(), NC: advNC, Policy: policy.New(policy.Options{}), Logger: quiet, Ready: ready})
	})
	agentLog, _ := open("agent-node-1")
	agentNC := conns.opened[len(conns.opened)-1]
	start("agent logs", ctx, func(ready func()) error {
		ready()
		return gpuagent.ServeLogs(ctx, gpuagent.LogsConfig{NC: agentNC, Node: "node-1", DataDir: filepath.Join(dir, "node-1"), Logger: quiet})
	})
	signer, err := auth.LoadJobSigner(auth.JobSignerPath(authDir, "node-1"))
	if err != nil {
		t.Fatal(err)
	}
	start("agent", ctx, func(ready func()) error {
		return gpuagent.Run(ctx, gpuagent.Config{Log: agentLog, JS: agentLog.JetStream(), Node: "node-1", NATSURL: srv.URL(), JobSigner: signer,
			DataDir: filepath.Join(dir, "node-1"), CheckpointRoot: filepath.Join(dir, "ckpt"), Heartbeat: 200 * time.Millisecond,
			Inventory: inventory.Options{Mock: true, MockGPUs: 2}, StopOnExit: true, Logger: quiet, Ready: ready})
	})

	vision := team(t, srv, authDir, "vision")
	nlp := team(t, srv, authDir, "nlp")
	var rep api.SubmitReply
	req := domain.Request{Name: "auth-e2e", Team: "vision", Priority: "high", GPUs: 1, Hours: 0.1,
		Hypothesis: "roles suffice", Command: "echo ok", Env: map[string]string{"PATH": "/usr/bin:/bin"}}
	if err := vision.Call(api.OpSubmit, req, &rep); err != nil {
		t.Fatal(err)
	}
	waitFor := func(c *api.Client, id, want string) {
		t.Helper()
		var v api.TaskView
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if err := c.Call(api.OpShow, api.IDRequest{TaskID: id}, &v); err == nil && v.State == want {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("task %s is %q, want %q", id, v.State, want)
	}
	waitFor(vision, rep.TaskID, "completed")
	if err := vision.Call(api.OpEstimate, api.EstimateRequest{TaskID: rep.TaskID}, nil); err != nil {
		t.Errorf("estimate as ci-vision: %v", err)
	}
	var v api.TaskView
	if err := nlp.Call(api.OpShow, api.IDRequest{TaskID: rep.TaskID}, &v); err == nil || !strings.Contains(err.Error(), "team vision") {
		t.Errorf("ci-nlp shows a vision task: %v", err)
	}

	// The scheduler steps down (deletes its lease, writes its snapshot);
	// the next one loads the snapshot and schedules the next task.
	stopScheduler()
	time.Sleep(200 * time.Millisecond)
	schedule()
	req.Name = "after-takeover"
	if err := vision.Call(api.OpSubmit, req, &rep); err != nil {
		t.Fatal(err)
	}
	waitFor(vision, rep.TaskID, "completed")

	// A job gets a credential of its own (not the agent's, which is in the
	// agent's environment), mode 0600, and reports its checkpoint and reads
	// its history with it through its run's job API — a real `gpuq
	// checkpoint` in a real task; the queue and another task are refused;
	// it keeps a copy, as a leaked credential would be kept.
	t.Setenv("GPUQ_NATS_CREDS", auth.CredsPath(authDir, "agent-node-1")) // the agent's own environment
	cli := "GPUQ_AS_CLI=1 " + shellQuote(testBinary(t))
	req.Name, req.Command = "job-checkpoint", `set -e
grep -q '^# role: job$' "$GPUQ_NATS_CREDS"
test "$(stat -c %a "$GPUQ_NATS_CREDS")" = 600
`+cli+` checkpoint --ref step-7
`+cli+` history "$GPUQ_TASK_ID" --json > "$GPUQ_CHECKPOINT_DIR/history.json"
if `+cli+` queue; then exit 9; fi
if `+cli+` checkpoint --ref x --task 01a22962-7813-7583-8cf9-b646a9f5e718; then exit 10; fi
cp "$GPUQ_NATS_CREDS" "$GPUQ_CHECKPOINT_DIR/kept.creds"`
	if err := vision.Call(api.OpSubmit, req, &rep); err != nil {
		t.Fatal(err)
	}
	waitFor(vision, rep.TaskID, "completed")
	_ = vision.Call(api.OpShow, api.IDRequest{TaskID: rep.TaskID}, &v)
	if v.Checkpoint != "step-7" {
		t.Fatalf("the job's checkpoint did not land: %+v", v)
	}
	ckptDir := filepath.Join(dir, "ckpt", rep.TaskID)
	var hist []api.HistoryEntry
	if b, err := os.ReadFile(filepath.Join(ckptDir, "history.json")); err != nil || json.Unmarshal(b, &hist) != nil ||
		!slices.ContainsFunc(hist, func(e api.HistoryEntry) bool { return e.Type == string(events.TypeCheckpointed) }) {
		t.Fatalf("the job's history of its own task: %v, %d entries", err, len(hist))
	}
	var stdout, stderr strings.Builder
	kept := filepath.Join(ckptDir, "kept.creds")
	t.Setenv("GPUQ_NATS_CREDS", "")
	t.Setenv("GPUQ_TASK_ID", "")
	// Once the run ended, the submitter refuses what the (unexpired)
	// credential asks; it never could read the log.
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"checkpoint after the end": {[]string{"checkpoint", "--ref", "late", "--nats", srv.URL(), "--creds", kept}, "is completed"},
		"history after the end":    {[]string{"history", rep.TaskID, "--nats", srv.URL(), "--creds", kept}, "only while its run lasts"},
	} {
		stderr.Reset()
		if code := run(c.args, &stdout, &stderr); code != exitInvalid || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%s: exit %d: %s", name, code, stderr.String())
		}
	}
	stderr.Reset()
	if code := run([]string{"audit", "export", "--nats", srv.URL(), "--creds", kept}, &stdout, &stderr); code == 0 {
		t.Errorf("a job's credential read the log")
	}
	// The auditor, whose role may create no consumer, reads the log by
	// direct gets: history, audit verify and export work; a team reads its
	// own task's output over NATS (the submitter asks the agent for it).
	for _, args := range [][]string{{"history", rep.TaskID}, {"audit", "verify"}, {"audit", "export"}} {
		stderr.Reset()
		if code := run(append(args, "--nats", srv.URL(), "--creds", auth.CredsPath(authDir, "auditor")), &stdout, &stderr); code != 0 {
			t.Errorf("gpuq %s as the auditor: exit %d: %s", strings.Join(args, " "), code, stderr.String())
		}
	}
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"logs", rep.TaskID, "--nats", srv.URL(), "--creds", auth.CredsPath(authDir, "ci-vision")}, &stdout, &stderr); code != 0 {
		t.Errorf("gpuq logs of its own task as ci-vision: exit %d: %s", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"logs", rep.TaskID, "--nats", srv.URL(), "--creds", auth.CredsPath(authDir, "ci-nlp")}, &stdout, &stderr); code != exitInvalid {
		t.Errorf("gpuq logs of a vision task as ci-nlp: exit %d, want %d: %s", code, exitInvalid, stderr.String())
	}
	// The agent removes the run directory once its report is in the log,
	// so the log may say completed a moment before: wait for it a while.
	runs := filepath.Join(dir, "node-1", "tasks", rep.TaskID, "runs")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ents, _ := os.ReadDir(runs)
		if len(ents) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the run directory (and its credential) outlived the run by 10 s: %v", ents)
			break
		}
	}

	// examples/train.py reports its checkpoints with the same credential
	// (its `gpuq checkpoint` finds GPUQ_NATS_CREDS in the environment).
	if _, err := exec.LookPath("python3"); err == nil {
		train, _ := filepath.Abs("../../examples/train.py")
		py := req
		py.Name, py.Command = "train-py", "GPUQ_AS_CLI=1 GPUQ_BIN="+shellQuote(testBinary(t))+" python3 "+shellQuote(train)+" --steps 3 --step-seconds 0 --checkpoint-every 1"
		var pyRep api.SubmitReply
		if err := vision.Call(api.OpSubmit, py, &pyRep); err != nil {
			t.Fatal(err)
		}
		waitFor(vision, pyRep.TaskID, "completed")
		var pv api.TaskView
		_ = vision.Call(api.OpShow, api.IDRequest{TaskID: pyRep.TaskID}, &pv)
		if want := filepath.Join(dir, "ckpt", pyRep.TaskID, "step-3.json"); pv.Checkpoint != want {
			t.Errorf("train.py's checkpoint %q, want %q", pv.Checkpoint, want)
		}
	}

	// A team's watch follows its task through the API (it may not read the
	// log) and ends with the task.
	stdout.Reset()
	stderr.Reset()
	visionCreds := auth.CredsPath(authDir, "ci-vision")
	if code := run([]string{"watch", rep.TaskID, "--json", "--nats", srv.URL(), "--creds", visionCreds}, &stdout, &stderr); code != 0 {
		t.Fatalf("watch as ci-vision: exit %d: %s", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"history", rep.TaskID, "--nats", srv.URL(), "--creds", auth.CredsPath(authDir, "ci-nlp")}, &stdout, &stderr); code != exitInvalid {
		t.Fatalf("history of a vision task as ci-nlp: exit %d: %s", code, stderr.String())
	}

	// A role the server does not let publish an operation learns it at once,
	// by name (exit 2), rather than after the request's timeout.
	begin := time.Now()
	stderr.Reset()
	code := run([]string{"cancel", rep.TaskID, "--nats", srv.URL(), "--creds", auth.CredsPath(authDir, "auditor")}, &stdout, &stderr)
	if code != exitInvalid || !strings.Contains(stderr.String(), "refused cancel") || time.Since(begin) > 5*time.Second {
		t.Fatalf("auditor cancels: exit %d after %s: %s", code, time.Since(begin), stderr.String())
	}

	// The scheduler's snapshot went through its role's permissions.
	adminLog := conns.shared
	obj, err := adminLog.JetStream().ObjectStore(ctx, events.SnapshotBucket)
	if err != nil {
		t.Fatalf("snapshot store: %v", err)
	}
	if _, err := obj.GetInfo(ctx, "scheduler"); err != nil {
		t.Fatalf("no scheduler snapshot: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	violations = slices.DeleteFunc(violations, func(v string) bool {
		return strings.Contains(v, `"gpuq.api.v1.cancel"`) || // the auditor's, meant
			strings.Contains(v, `"gpuq.api.v1.job.node-1.`) && strings.HasSuffix(strings.TrimSpace(v), `.queue"`) // the job's, meant
	})
	if len(violations) > 0 {
		t.Fatalf("the server refused %d actions of the services' own roles:\n%s", len(violations), strings.Join(violations, "\n"))
	}
}

// team is a client with ci-<name>'s credentials on its scoped subjects.
func team(t *testing.T, srv *embedded.Server, dir, name string) *api.Client {
	t.Helper()
	cr, err := auth.LoadCreds(auth.CredsPath(dir, "ci-"+name))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := srv.ConnectAs("ci-"+name, cr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &api.Client{NC: nc, Timeout: 10 * time.Second, Team: cr.Team}
}
