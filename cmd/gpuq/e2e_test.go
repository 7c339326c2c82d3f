package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/api"
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

// stack is the four services on an embedded server, each startable alone.
type stack struct {
	t    *testing.T
	srv  *embedded.Server
	nc   *nats.Conn
	log  *jetstream.Log
	dir  string
	ctx  context.Context
	stop map[string]context.CancelFunc
	done map[string]chan struct{}
}

func newStack(t *testing.T) *stack {
	t.Helper()
	dir := t.TempDir()
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(dir, "js"), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect("e2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithCancel(context.Background())
	s := &stack{t: t, srv: srv, nc: nc, dir: dir, ctx: ctx, stop: map[string]context.CancelFunc{}, done: map[string]chan struct{}{}}
	t.Cleanup(func() {
		cancel()
		for _, d := range s.done {
			<-d
		}
	})
	s.log, err = jetstream.Open(ctx, nc, jetstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// start runs a service until stopped; it waits for its Ready.
func (s *stack) start(name string, run func(ctx context.Context, ready func()) error) {
	s.t.Helper()
	ctx, cancel := context.WithCancel(s.ctx)
	ready := make(chan struct{})
	done := make(chan struct{})
	s.stop[name], s.done[name] = cancel, done
	var once bool
	go func() {
		defer close(done)
		if err := run(ctx, func() {
			if !once {
				once = true
				close(ready)
			}
		}); err != nil && ctx.Err() == nil {
			s.t.Errorf("%s: %v", name, err)
		}
	}()
	select {
	case <-ready:
	case <-done:
		s.t.Fatalf("%s exited before ready", name)
	case <-time.After(30 * time.Second):
		s.t.Fatalf("%s not ready in 30 s", name)
	}
}

func (s *stack) kill(name string) {
	s.stop[name]()
	<-s.done[name]
	delete(s.done, name)
}

var quiet = zerolog.Nop()

func (s *stack) submitter() {
	s.start("submitter", func(ctx context.Context, ready func()) error {
		return submitter.Run(ctx, submitter.Config{NC: s.nc, Log: s.log, Logger: quiet, Limits: domain.Limits{MaxGPUs: 16, MaxHours: 48}, Ready: ready})
	})
}

func (s *stack) scheduler(sched **scheduler.Scheduler) {
	s.start("scheduler", func(ctx context.Context, ready func()) error {
		*sched = scheduler.New(scheduler.Config{Log: s.log, JS: s.log.JetStream(), Policy: policy.New(policy.Options{}), Logger: quiet,
			LeaseTTL: 2 * time.Second, Tick: 100 * time.Millisecond, Ready: ready})
		return (*sched).Run(ctx)
	})
}

func (s *stack) agent(node string, gpus int) {
	s.start("agent "+node, func(ctx context.Context, ready func()) error {
		return gpuagent.Run(ctx, gpuagent.Config{Log: s.log, JS: s.log.JetStream(), Node: node, NATSURL: s.srv.URL(),
			DataDir: filepath.Join(s.dir, node), CheckpointRoot: filepath.Join(s.dir, "ckpt"),
			Inventory: inventory.Options{Mock: true, MockGPUs: gpus}, StopOnExit: true, Logger: quiet, Ready: ready})
	})
}

func (s *stack) advisor() {
	s.start("advisor", func(ctx context.Context, ready func()) error {
		return advisor.Run(ctx, advisor.Config{Log: s.log, JS: s.log.JetStream(), Logger: quiet, Ready: ready})
	})
}

func (s *stack) client() *api.Client { return &api.Client{NC: s.nc, Timeout: 10 * time.Second} }

func (s *stack) waitState(id, want string, within time.Duration) api.TaskView {
	s.t.Helper()
	deadline := time.Now().Add(within)
	var v api.TaskView
	for time.Now().Before(deadline) {
		if err := s.client().Call(api.OpShow, api.IDRequest{TaskID: id}, &v); err == nil && v.State == want {
			return v
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("task %s is %q after %s, want %q (%+v)", id, v.State, within, want, v)
	return v
}

func (s *stack) fold() *domain.State {
	st := domain.NewState()
	if _, err := events.ReadAll(context.Background(), s.log, 1, "", func(r events.Record) error { st.Apply(r); return nil }); err != nil {
		s.t.Fatal(err)
	}
	return st
}

func (s *stack) count(typ events.Type) int {
	n := 0
	_, err := events.ReadAll(context.Background(), s.log, 1, "gpuq.task.*."+string(typ), func(events.Record) error { n++; return nil })
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

func TestEndToEnd(t *testing.T) {
	s := newStack(t)
	var sched *scheduler.Scheduler
	s.submitter()
	s.scheduler(&sched)
	s.advisor()
	s.agent("node-1", 8)
	out := t.TempDir()
	cl := s.client()

	// 1. Three tasks with real commands complete, each seeing its GPUs and
	// the environment exported with it (which the agent reads from the
	// task's submitted event: the fold does not keep it).
	var ids []string
	for i, p := range []string{"high", "medium", "low"} {
		var r api.SubmitReply
		f := filepath.Join(out, p)
		req := domain.Request{Name: "t-" + p, Team: "alpha", Priority: p, GPUs: 2 + i, Hours: 0.01, Hypothesis: "e2e",
			Command: `echo "$CUDA_VISIBLE_DEVICES" > ` + f + `; echo "$GPUQ_TASK_ID" >> ` + f + `; echo "$E2E_EXPORTED" >> ` + f,
			Env:     map[string]string{"E2E_EXPORTED": "exported " + p}}
		if err := cl.Call(api.OpSubmit, req, &r); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.TaskID)
	}
	seen := map[string]bool{}
	for i, id := range ids {
		v := s.waitState(id, "completed", 30*time.Second)
		b, err := os.ReadFile(filepath.Join(out, []string{"high", "medium", "low"}[i]))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		gpus := strings.Split(lines[0], ",")
		if len(lines) != 3 {
			t.Fatalf("task %d wrote %q, want three lines", i, b)
		}
		if len(gpus) != 2+i || lines[1] != id {
			t.Errorf("task %d saw CUDA_VISIBLE_DEVICES=%q GPUQ_TASK_ID=%q; want %d GPUs and %s", i, lines[0], lines[1], 2+i, id)
		}
		if want := "exported " + []string{"high", "medium", "low"}[i]; lines[2] != want {
			t.Errorf("task %d saw E2E_EXPORTED=%q, want %q", i, lines[2], want)
		}
		for _, g := range gpus {
			if !strings.HasPrefix(g, "GPU-") {
				t.Errorf("GPU %q is not an NVML UUID", g)
			}
			seen[g] = true
		}
		if v.Node != "node-1" {
			t.Errorf("task %d node %q", i, v.Node)
		}
	}

	// 2. The live scheduler's state equals a fresh fold of the log.
	wait(t, func() bool { st := sched.Snapshot(); return st != nil && st.Seq == s.fold().Seq })
	if diff := cmp.Diff(s.fold(), sched.Snapshot(), cmpopts.EquateEmpty(), cmpopts.IgnoreUnexported(domain.State{}, domain.Task{}, domain.Node{})); diff != "" {
		t.Errorf("live scheduler state differs from a fresh fold (-fold +live):\n%s", diff)
	}

	// 3. Scheduler killed and restarted re-dispatches nothing.
	dispatched := s.count(events.TypeDispatched)
	s.kill("scheduler")
	s.scheduler(&sched)
	time.Sleep(500 * time.Millisecond)
	if got := s.count(events.TypeDispatched); got != dispatched {
		t.Errorf("restarted scheduler appended %d dispatched events, want 0", got-dispatched)
	}

	// 4. The same idempotency key twice gives one task.
	req := domain.Request{Name: "ci", Team: "alpha", Priority: "low", GPUs: 1, Hours: 0.01, Hypothesis: "dedupe", Command: "true", IdempotencyKey: "run-42"}
	var a, b api.SubmitReply
	if err := cl.Call(api.OpSubmit, req, &a); err != nil {
		t.Fatal(err)
	}
	if err := cl.Call(api.OpSubmit, req, &b); err != nil {
		t.Fatal(err)
	}
	if a.TaskID != b.TaskID || !b.Duplicate {
		t.Errorf("same key gave %s and %s (duplicate=%v)", a.TaskID, b.TaskID, b.Duplicate)
	}
	s.waitState(a.TaskID, "completed", 30*time.Second)

	// 5. Bad input is refused with the field named, and nothing is appended.
	before, _ := s.log.LastSeq(context.Background())
	for field, bad := range map[string]domain.Request{
		"gpus":       {Name: "x", Team: "a", Priority: "low", GPUs: 0, Hours: 1, Hypothesis: "h", Command: "true"},
		"priority":   {Name: "x", Team: "a", Priority: "urgent", GPUs: 1, Hours: 1, Hypothesis: "h", Command: "true"},
		"hypothesis": {Name: "x", Team: "a", Priority: "low", GPUs: 1, Hours: 1, Command: "true"},
		"hours":      {Name: "x", Team: "a", Priority: "low", GPUs: 1, Hours: 100, Hypothesis: "h", Command: "true"},
	} {
		err := cl.Call(api.OpSubmit, bad, nil)
		var e *api.Error
		if !api.IsInvalid(err) || !errors.As(err, &e) || e.Field != field {
			t.Errorf("bad %s: err = %v, want a field error on %s", field, err, field)
		}
	}
	time.Sleep(200 * time.Millisecond)
	after, _ := s.log.LastSeq(context.Background())
	if st := s.fold(); after != before && len(st.Tasks) != 4 {
		t.Errorf("bad input appended tasks: %d tasks", len(st.Tasks))
	}

	// 6. A running task is stopped by cancel.
	var r api.SubmitReply
	if err := cl.Call(api.OpSubmit, domain.Request{Name: "long", Team: "alpha", Priority: "medium", GPUs: 8, Hours: 1, Hypothesis: "cancel", Command: "sleep 300"}, &r); err != nil {
		t.Fatal(err)
	}
	s.waitState(r.TaskID, "running", 30*time.Second)
	if err := cl.Call(api.OpCancel, api.IDRequest{TaskID: r.TaskID}, nil); err != nil {
		t.Fatal(err)
	}
	wait(t, func() bool { return len(s.fold().Owner) == 0 })
	if st := s.fold(); st.Tasks[r.TaskID].State != domain.Cancelled {
		t.Errorf("cancelled task is %s", st.Tasks[r.TaskID].State)
	}
	s.verified()
}

func wait(t *testing.T, ok func() bool) {
	t.Helper()
	for i := 0; i < 300; i++ {
		if ok() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("condition not reached in 15 s")
}
