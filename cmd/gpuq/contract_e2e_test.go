package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/embedded"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/services/scheduler"
	"github.com/gpuq/gpuq/services/submitter"
)

// TestRefusedExitsTwo: every request the server or the CLI refuses exits
// 2 — a team's credentials asking for an admin's operation (the submitter
// answers 403 without a field), reading the log (the CLI refuses them),
// or an operation the NATS server does not let them publish — on a
// server with credentials, as `gpuq dev --auth` runs it.
func TestRefusedExitsTwo(t *testing.T) {
	dir := t.TempDir()
	authDir := filepath.Join(dir, "auth")
	if _, err := auth.Init(authDir, []string{"vision", "nlp"}, []string{"node-1"}); err != nil {
		t.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(dir, "js"), Port: -1, AuthConfig: filepath.Join(authDir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	conns := &devConns{srv: srv, dir: authDir, cfg: jetstream.StreamConfig{}}
	t.Cleanup(conns.close)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	if _, _, err := conns.open(ctx, "admin"); err != nil {
		t.Fatal(err)
	}
	nc, l, err := conns.open(ctx, "submitter")
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = submitter.Run(ctx, submitter.Config{NC: nc, Log: l, Logger: quiet, Limits: domain.DefaultLimits, Ready: func() { close(ready) }})
	}()
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatal("submitter not ready in 20 s")
	}
	var rep api.SubmitReply
	if err := team(t, srv, authDir, "vision").Call(api.OpSubmit, domain.Request{Name: "n", Team: "vision", Priority: "low", GPUs: 1, Hours: 1,
		Hypothesis: "h", Command: "true"}, &rep); err != nil {
		t.Fatal(err)
	}
	nlp, auditor, admin := auth.CredsPath(authDir, "ci-nlp"), auth.CredsPath(authDir, "auditor"), auth.CredsPath(authDir, "admin")
	for name, tc := range map[string]struct {
		args []string
		want int
		says string
	}{
		"a team drains a node":          {[]string{"node", "drain", "node-1", "--creds", nlp}, exitInvalid, "for the admin"},
		"a team undrains a node":        {[]string{"node", "undrain", "node-1", "--creds", nlp}, exitInvalid, "for the admin"},
		"a team replays the log":        {[]string{"replay", "--seq", "1", "--creds", nlp}, exitInvalid, "may not read the log"},
		"a team explains a wait":        {[]string{"explain", rep.TaskID, "--creds", nlp}, exitInvalid, "may not read the log"},
		"a team exports the audit log":  {[]string{"audit", "export", "--creds", nlp}, exitInvalid, "may not read the log"},
		"another team's task":           {[]string{"cancel", rep.TaskID, "--creds", nlp}, exitInvalid, "belongs to team vision"},
		"the auditor drains a node":     {[]string{"node", "drain", "node-1", "--creds", auditor}, exitInvalid, "refused"},
		"the admin drains no such node": {[]string{"node", "drain", "node-9", "--creds", admin}, exitInvalid, "node node-9 not found"},
		"the admin replays (allowed)":   {[]string{"replay", "--seq", "1", "--creds", admin}, 0, ""},
		"the auditor replays (allowed)": {[]string{"replay", "--seq", "1", "--creds", auditor}, 0, ""},
		"an agent drains a node":        {[]string{"node", "drain", "node-1", "--creds", auth.CredsPath(authDir, "agent-node-1")}, exitInvalid, "refused"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			got := run(append(tc.args, "--nats", srv.URL()), &stdout, &stderr)
			if got != tc.want || !strings.Contains(stderr.String(), tc.says) {
				t.Errorf("gpuq %s: exit %d, %q; want exit %d saying %q", strings.Join(tc.args[:len(tc.args)-2], " "), got, stderr.String(), tc.want, tc.says)
			}
		})
	}
}

// TestWaitStarted: `wait` on a task that started answers at once with its
// real start: --json the advice object of a started task (its first start
// as p50_start and p90_start, as the advisor gives it), the text where
// and when.
func TestWaitStarted(t *testing.T) {
	s := newStack(t)
	s.submitter()
	var sched *scheduler.Scheduler
	s.scheduler(&sched)
	s.agent("node-1", 2)
	running, done := s.submitCmd("sleep 60"), s.submitCmd("true")
	views := map[string]api.TaskView{"running": s.waitState(running, "running", 30*time.Second), "completed": s.waitState(done, "completed", 30*time.Second)}
	for name, v := range views {
		t.Run(name, func(t *testing.T) {
			code, out := runCLI(t, "wait", v.TaskID, "--json", "--nats", s.srv.URL())
			var a estimate.Advice
			if err := json.Unmarshal([]byte(out), &a); err != nil || code != 0 {
				t.Fatalf("wait --json: exit %d, %v: %q", code, err, out)
			}
			want := estimate.Advice{TaskID: v.TaskID, State: name, P50Start: *v.StartedAt, P90Start: *v.StartedAt,
				Blockers: []string{}, Suggestions: []estimate.Suggestion{}, BasedOnSeq: a.BasedOnSeq, At: a.At}
			if diff := cmp.Diff(want, a); diff != "" || a.BasedOnSeq == 0 || a.At.IsZero() {
				t.Errorf("wait --json (-want +got):\n%s based_on_seq %d, at %s", diff, a.BasedOnSeq, a.At)
			}
			code, out = runCLI(t, "wait", v.TaskID, "--nats", s.srv.URL())
			wantLine := "started on node-1 at " + (timeFmt{}).at(*v.StartedAt) + "\n"
			if code != 0 || !strings.HasSuffix(out, "\n"+wantLine) {
				t.Errorf("wait: exit %d, %q; want it to end with %q", code, out, wantLine)
			}
		})
	}
}
