package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/services/gpuagent"
	"github.com/gpuq/gpuq/services/scheduler"
	"github.com/gpuq/gpuq/services/submitter"
)

// freeAddr is a loopback address nothing listens on (at the time).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// logsStack is a submitter with HTTP, a scheduler and node-1's agent with
// its logs service.
func logsStack(t *testing.T) (*stack, string) {
	t.Helper()
	s := newStack(t)
	addr := freeAddr(t)
	s.start("submitter", func(ctx context.Context, ready func()) error {
		return submitter.Run(ctx, submitter.Config{NC: s.nc, Log: s.log, HTTPAddr: addr, Logger: quiet,
			Limits: domain.Limits{MaxGPUs: 16, MaxHours: 48}, Ready: ready})
	})
	var sched *scheduler.Scheduler
	s.scheduler(&sched)
	s.agent("node-1", 8)
	s.start("logs node-1", func(ctx context.Context, ready func()) error {
		stop, err := gpuagent.StartLogs(gpuagent.LogsConfig{NC: s.nc, Node: "node-1", DataDir: filepath.Join(s.dir, "node-1"), Logger: quiet})
		if err != nil {
			return err
		}
		ready()
		<-ctx.Done()
		stop()
		return nil
	})
	return s, addr
}

func (s *stack) submitCmd(command string) string {
	s.t.Helper()
	var r api.SubmitReply
	if err := s.client().Call(api.OpSubmit, domain.Request{Name: "logs", Team: "t", Priority: "high", GPUs: 1, Hours: 0.01,
		Hypothesis: "h", Command: command}, &r); err != nil {
		s.t.Fatal(err)
	}
	return r.TaskID
}

// TestLogs: `gpuq logs` reads a task's output through its node's agent,
// the HTTP API answers the same, and -f follows a task until it ends.
func TestLogs(t *testing.T) {
	s, addr := logsStack(t)
	url := s.srv.URL()
	done := s.submitCmd(`echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three`) // stderr is its own pipe: spaced out, so the order is known
	s.waitState(done, "completed", 30*time.Second)
	for name, tc := range map[string]struct {
		args []string
		code int
		want string
	}{
		"all of it":    {[]string{"logs", done}, 0, "one\ntwo\nthree\n"},
		"the last two": {[]string{"logs", done, "--tail", "2"}, 0, "two\nthree\n"},
		"follow ended": {[]string{"logs", "-f", done}, 0, "one\ntwo\nthree\n"},
		"unknown task": {[]string{"logs", "01a2295c-0000-7000-8000-000000000000"}, exitNotFound, ""},
		"bad tail":     {[]string{"logs", done, "--tail", "-1"}, exitInvalid, ""},
	} {
		t.Run(name, func(t *testing.T) {
			code, out := runCLI(t, append(tc.args, "--nats", url)...)
			if code != tc.code || out != tc.want {
				t.Errorf("gpuq %v: exit %d, %q; want %d, %q", tc.args, code, out, tc.code, tc.want)
			}
		})
	}

	// Following a task from before it starts until it ends.
	slow := s.submitCmd(`for i in 1 2 3; do echo "step $i"; sleep 0.3; done`)
	if code, out := runCLI(t, "logs", "-f", slow, "--nats", url); code != 0 || out != "step 1\nstep 2\nstep 3\n" {
		t.Errorf("logs -f: exit %d, %q", code, out)
	}

	// show says where the output is, when it ran, and how it ended.
	var v api.TaskView
	if err := s.client().Call(api.OpShow, api.IDRequest{TaskID: done}, &v); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(s.dir, "node-1", "tasks", done, "output.log"); v.LogNode != "node-1" || v.LogPath != want {
		t.Errorf("show: log %s:%s, want node-1:%s", v.LogNode, v.LogPath, want)
	}

	// The HTTP API.
	for name, tc := range map[string]struct {
		path   string
		status int
		data   string
		field  string
	}{
		"all":          {"/v1/tasks/" + done + "/logs", 200, "one\ntwo\nthree\n", ""},
		"tail":         {"/v1/tasks/" + done + "/logs?tail=1", 200, "three\n", ""},
		"offset":       {"/v1/tasks/" + done + "/logs?offset=4", 200, "two\nthree\n", ""},
		"bad tail":     {"/v1/tasks/" + done + "/logs?tail=x", 400, "", "tail"},
		"unknown task": {"/v1/tasks/01a2295c-0000-7000-8000-000000000000/logs", 404, "", ""},
	} {
		t.Run("http "+name, func(t *testing.T) {
			resp, err := http.Get("http://" + addr + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var got struct {
				api.LogsReply
				Field string `json:"field"`
			}
			_ = json.Unmarshal(b, &got)
			if resp.StatusCode != tc.status || got.Data != tc.data || got.Field != tc.field {
				t.Errorf("GET %s: %d %s; want %d data %q field %q", tc.path, resp.StatusCode, b, tc.status, tc.data, tc.field)
			}
		})
	}
}

// TestLogsFollowRidesStall: `logs -f` asks again across a NATS stall — a
// timeout, no responder while the submitter or the agent restarts, the
// submitter not ready — as watch's follower rides one out, with a note
// when the stall begins and one when it ends; a refusal or a connection
// closed for good still ends it, and without -f nothing is asked twice.
func TestLogsFollowRidesStall(t *testing.T) {
	noAgent := fmt.Errorf("no gpuq agent is answering for node node-1: %w", nats.ErrNoResponders)
	for name, tc := range map[string]struct {
		follow             bool
		showErrs, logsErrs []error // the first calls' answers in turn (nil: answered)
		want               string
		code               int
		stall              bool // a note that it asks again, and one that it went on
	}{
		"the submitter stalls":           {follow: true, showErrs: []error{nats.ErrTimeout, nats.ErrTimeout}, want: "one\ntwo\n", stall: true},
		"the submitter restarts":         {follow: true, showErrs: []error{nil, fmt.Errorf("no gpuq submitter is answering: %w", nats.ErrNoResponders)}, want: "one\ntwo\n", stall: true},
		"the submitter is not ready":     {follow: true, showErrs: []error{&api.Error{Msg: "request timed out", Status: 503}}, want: "one\ntwo\n", stall: true},
		"the agent restarts":             {follow: true, logsErrs: []error{noAgent, noAgent, noAgent}, want: "one\ntwo\n", stall: true},
		"NATS reconnecting":              {follow: true, logsErrs: []error{nats.ErrConnectionReconnecting}, want: "one\ntwo\n", stall: true},
		"a refusal ends it":              {follow: true, showErrs: []error{&api.Error{Msg: "for the admin", Status: 403}}, code: exitInvalid},
		"a task not found ends it":       {follow: true, showErrs: []error{&api.Error{Msg: "task t1 not found", NotFound: true, Status: 404}}, code: exitNotFound},
		"a closed connection ends it":    {follow: true, showErrs: []error{nats.ErrConnectionClosed}, code: exitErr},
		"without -f a timeout ends it":   {showErrs: []error{nats.ErrTimeout}, code: exitErr},
		"without -f, nothing goes amiss": {want: "one\ntwo\n"},
	} {
		t.Run(name, func(t *testing.T) {
			shows, logs := 0, 0
			src := logSource{
				show: func(id string) (api.TaskView, error) {
					i := shows
					shows++
					if i < len(tc.showErrs) && tc.showErrs[i] != nil {
						return api.TaskView{}, tc.showErrs[i]
					}
					st := "running" // answered once running, then completed
					if i > len(tc.showErrs) {
						st = "completed"
					}
					return api.TaskView{TaskID: id, State: st, LogNode: "node-1"}, nil
				},
				logs: func(node string, req api.LogsRequest) (api.LogsReply, error) {
					i := logs
					logs++
					if i < len(tc.logsErrs) && tc.logsErrs[i] != nil {
						return api.LogsReply{}, tc.logsErrs[i]
					}
					const all = "one\ntwo\n"
					return api.LogsReply{TaskID: req.TaskID, Node: node, Offset: req.Offset, Next: int64(len(all)), Size: int64(len(all)), Data: all[req.Offset:]}, nil
				},
				poll: time.Millisecond,
			}
			var out, stderr bytes.Buffer
			err := streamLogs(context.Background(), src, "t1", tc.follow, 0, false, &out, &stderr)
			if got := code(err); got != tc.code || out.String() != tc.want {
				t.Fatalf("exit %d (%v), printed %q; want exit %d, %q", got, err, out.String(), tc.code, tc.want)
			}
			asked, went := strings.Count(stderr.String(), "asking again"), strings.Count(stderr.String(), "answers again")
			if tc.stall && (asked != 1 || went != 1) || !tc.stall && asked+went > 0 {
				t.Errorf("stderr %q: want one note of the stall and one of its end: %v", stderr.String(), tc.stall)
			}
		})
	}
}

// TestLogsFollowAcrossRestart: `logs -f` of a running task goes on, and
// prints all of its output, while the submitter or the node's log service
// is away for two seconds (no responder: a restart), as watch would.
func TestLogsFollowAcrossRestart(t *testing.T) {
	s, _ := logsStack(t)
	restart := map[string]func(){
		"the submitter": s.submitter,
		"logs node-1": func() {
			s.start("logs node-1", func(ctx context.Context, ready func()) error {
				stop, err := gpuagent.StartLogs(gpuagent.LogsConfig{NC: s.nc, Node: "node-1", DataDir: filepath.Join(s.dir, "node-1"), Logger: quiet})
				if err != nil {
					return err
				}
				ready()
				<-ctx.Done()
				stop()
				return nil
			})
		},
	}
	for _, away := range []string{"the submitter", "logs node-1"} {
		t.Run(away+" restarts", func(t *testing.T) {
			id := s.submitCmd(`for i in 1 2 3 4 5 6 7 8; do echo "step $i"; sleep 0.4; done`)
			s.waitState(id, "running", 30*time.Second)
			type result struct {
				code int
				out  string
			}
			got := make(chan result, 1)
			go func() {
				c, o := runCLI(t, "logs", "-f", id, "--nats", s.srv.URL())
				got <- result{c, o}
			}()
			time.Sleep(600 * time.Millisecond)
			name := away
			if away == "the submitter" {
				name = "submitter"
			}
			s.kill(name)
			time.Sleep(2 * time.Second)
			restart[away]()
			select {
			case r := <-got:
				if want := "step 1\nstep 2\nstep 3\nstep 4\nstep 5\nstep 6\nstep 7\nstep 8\n"; r.code != 0 || r.out != want {
					t.Errorf("logs -f across %s away: exit %d, %q; want 0, %q", away, r.code, r.out, want)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("logs -f did not end with the task")
			}
		})
	}
}
