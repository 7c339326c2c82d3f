package notifier

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/embedded/embeddedtest"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
)

const secret = "s3cret"

// hit is one POST a receiver got.
type hit struct {
	id, sig string
	body    []byte
	n       Notice
	sigOK   bool
}

// receiver is an httptest webhook receiver that checks signatures and
// answers with status(n) to its n-th POST (200 when status is nil).
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	hits   []hit
	status func(n int) int
	header http.Header // sent with every answer
	got    chan struct{}
}

func newReceiver(t *testing.T, status func(n int) int) *receiver {
	r := &receiver{status: status, got: make(chan struct{}, 1000)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		h := hit{id: req.Header.Get(HeaderID), sig: req.Header.Get(HeaderSignature), body: body}
		h.sigOK = verify(h.sig, body)
		_ = json.Unmarshal(body, &h.n)
		r.mu.Lock()
		r.hits = append(r.hits, h)
		n := len(r.hits)
		r.mu.Unlock()
		code := http.StatusOK
		for k, v := range r.header {
			w.Header()[k] = v
		}
		if r.status != nil {
			code = r.status(n)
		}
		w.WriteHeader(code)
		r.got <- struct{}{}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// verify checks an X-Gpuq-Signature as a receiver would.
func verify(sig string, body []byte) bool {
	parts := map[string]string{}
	for _, p := range strings.Split(sig, ",") {
		if k, v, ok := strings.Cut(p, "="); ok {
			parts[k] = v
		}
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(parts["t"] + "." + string(body)))
	return parts["t"] != "" && hmac.Equal([]byte(parts["v1"]), []byte(hex.EncodeToString(m.Sum(nil))))
}

func (r *receiver) all() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hit(nil), r.hits...)
}

// waitFor waits until cond holds of the hits so far.
func (r *receiver) waitFor(t *testing.T, what string, cond func([]hit) bool) []hit {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		if hs := r.all(); cond(hs) {
			return hs
		}
		select {
		case <-r.got:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%s: not within 20 s; got %s", what, types(r.all()))
		}
	}
}

func types(hs []hit) string {
	var out []string
	for _, h := range hs {
		out = append(out, h.n.Type+":"+h.id[:6])
	}
	return strings.Join(out, " ")
}

// world is a log in memory and a notifier on it that can be stopped and
// started again on the same store.
type world struct {
	t     *testing.T
	ctx   context.Context
	log   *memlog.Log
	store Store
	js    jetstream.JetStream
	cfg   Config
	stop  func()
}

func newWorld(t *testing.T, store Store, dests ...Destination) *world {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &world{t: t, ctx: ctx, log: memlog.New(), store: store}
	w.cfg = Config{Log: w.log, Store: store, Destinations: dests, Tick: 20 * time.Millisecond,
		Backoff: []time.Duration{20 * time.Millisecond, 40 * time.Millisecond}, Horizon: time.Hour, Timeout: 5 * time.Second,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
	w.append(dt.Node("n1").GPUs(8).Available())
	return w
}

// start runs the notifier until stop (or the test's end) and waits until
// it is ready.
func (w *world) start() {
	w.t.Helper()
	ctx, cancel := context.WithCancel(w.ctx)
	ready := make(chan struct{})
	done := make(chan error, 1)
	cfg := w.cfg
	cfg.JS = w.js
	cfg.Ready = func() { close(ready) }
	go func() { done <- Run(ctx, cfg) }()
	w.stop = func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			w.t.Errorf("Run: %v", err)
		}
	}
	w.t.Cleanup(func() { cancel() })
	select {
	case <-ready:
	case err := <-done:
		w.t.Fatalf("Run returned before ready: %v", err)
	case <-time.After(20 * time.Second):
		w.t.Fatal("notifier not ready in 20 s")
	}
}

func (w *world) append(e events.Event) {
	w.t.Helper()
	if _, err := events.Append(w.ctx, w.log, e, events.Meta{Time: time.Now()}, "", nil); err != nil {
		w.t.Fatalf("append %s: %v", e.EventType(), err)
	}
}

// run appends a task's whole life: submitted, dispatched, started,
// completed.
func (w *world) run(id string) {
	w.append(dt.Task().ID(id).Name("train").Team("vision").GPUs(1).Submitted())
	w.append(dt.Dispatch(id, dt.On("n1", 0)))
	w.append(events.Started{TaskID: id, Node: "n1", PID: 1})
	w.append(events.Completed{TaskID: id, Node: "n1"})
}

func dest(r *receiver) Destination {
	return NewDestination("", r.srv.URL+"/hook", []byte(secret), nil)
}

func count(hs []hit, typ string) int {
	n := 0
	for _, h := range hs {
		if h.n.Type == typ {
			n++
		}
	}
	return n
}

// Every POST is signed over its body, names its notice in the header,
// and carries the fields of the wire format.
func TestDeliverySigned(t *testing.T) {
	r := newReceiver(t, nil)
	w := newWorld(t, NewMem(), dest(r))
	w.start()
	w.run(taskA)
	hs := r.waitFor(t, "started and completed", func(hs []hit) bool { return len(hs) >= 2 })
	for _, h := range hs {
		if !h.sigOK {
			t.Errorf("%s: signature %q does not verify", h.n.Type, h.sig)
		}
		if h.id == "" || h.id != h.n.ID {
			t.Errorf("%s: header id %q, body id %q", h.n.Type, h.id, h.n.ID)
		}
		var m map[string]any
		_ = json.Unmarshal(h.body, &m)
		for _, k := range []string{"id", "type", "task_id", "task_name", "team", "seq", "time", "text"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: body %s lacks %q", h.n.Type, h.body, k)
			}
		}
	}
	if got := types(hs); !strings.HasPrefix(got, "started:") || !strings.Contains(got, " completed:") {
		t.Errorf("got %s, want started then completed", got)
	}
}

// A receiver that answers 500 gets the same notice again, with the same
// id, until it answers 2xx; one that never does puts it on the dead
// letters after the last retry.
func TestDeliveryRetries(t *testing.T) {
	target := newReceiver(t, nil) // where the redirect points
	cases := map[string]struct {
		status   func(n int) int
		header   http.Header
		wantHits int
		wantDead int
	}{
		"500 twice, then 200": {status: func(n int) int {
			if n <= 2 {
				return 500
			}
			return 200
		}, wantHits: 3},
		"500 always: dead after the retries": {status: func(int) int { return 500 }, wantHits: 3, wantDead: 1},
		"a redirect is not followed": {status: func(int) int { return http.StatusTemporaryRedirect },
			header: http.Header{"Location": {target.srv.URL}}, wantHits: 3, wantDead: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := newReceiver(t, tc.status)
			r.header = tc.header
			store := NewMem()
			w := newWorld(t, store, NewDestination("", r.srv.URL, []byte(secret), []string{Started}))
			w.start()
			w.run(taskA)
			hs := r.waitFor(t, "the attempts", func(hs []hit) bool { return len(hs) >= tc.wantHits })
			time.Sleep(200 * time.Millisecond) // no more attempts come
			hs = r.all()
			if len(hs) != tc.wantHits {
				t.Errorf("%d attempts (%s), want %d", len(hs), types(hs), tc.wantHits)
			}
			for _, h := range hs {
				if h.id != hs[0].id {
					t.Errorf("attempt with id %s, the first had %s: the id must be stable across retries", h.id, hs[0].id)
				}
			}
			var dead []Delivery
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				if dead, _ = store.DeadLetters(w.ctx); len(dead) >= tc.wantDead {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if len(dead) != tc.wantDead {
				t.Errorf("%d dead letters, want %d", len(dead), tc.wantDead)
			}
			if tc.wantDead > 0 && (dead[0].Attempts != tc.wantHits || dead[0].LastError == "") {
				t.Errorf("dead letter %+v: want %d attempts and the last error", dead[0], tc.wantHits)
			}
			if p, _ := store.Pending(w.ctx); len(p) != 0 {
				t.Errorf("%d deliveries still pending", len(p))
			}
			if hs := target.all(); len(hs) != 0 {
				t.Errorf("the redirect's target got %s", types(hs))
			}
		})
	}
}

// A receiver that does not answer delays neither another receiver nor
// the notifier.
func TestSlowReceiverDelaysNoOther(t *testing.T) {
	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(block) })
	fast := newReceiver(t, nil)
	w := newWorld(t, NewMem(), NewDestination("", slow.URL, nil, nil), dest(fast))
	w.cfg.Timeout = time.Minute
	w.start()
	start := time.Now()
	for _, id := range []string{taskA, taskB} {
		w.run(id)
	}
	fast.waitFor(t, "4 notices at the fast receiver", func(hs []hit) bool { return len(hs) >= 4 })
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the fast receiver waited %s", d)
	}
}

// Stores the restart tests run on: in memory, and the KV buckets on an
// embedded JetStream.
func stores(t *testing.T) map[string]func() (Store, jetstream.JetStream) {
	return map[string]func() (Store, jetstream.JetStream){
		"mem": func() (Store, jetstream.JetStream) { return NewMem(), nil },
		"kv": func() (Store, jetstream.JetStream) {
			srv := embeddedtest.Server(t)
			js, err := jetstream.New(embeddedtest.Connect(t, srv, "notifier"))
			if err != nil {
				t.Fatal(err)
			}
			kv, err := OpenKV(context.Background(), js, 1)
			if err != nil {
				t.Fatal(err)
			}
			return kv, js
		},
	}
}

// A notifier restarted after delivering sends nothing again, and goes on
// with what came meanwhile.
func TestRestartSendsNothingTwice(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store, _ := open()
			r := newReceiver(t, nil)
			w := newWorld(t, store, dest(r))
			w.start()
			w.run(taskA)
			r.waitFor(t, "task A's notices", func(hs []hit) bool { return len(hs) >= 2 })
			w.stop()
			w.run(taskB) // while it is down
			w.start()
			hs := r.waitFor(t, "task B's notices", func(hs []hit) bool { return len(hs) >= 4 })
			time.Sleep(300 * time.Millisecond)
			hs = r.all()
			seen := map[string]bool{}
			for _, h := range hs {
				if seen[h.id] {
					t.Errorf("notice %s (%s) delivered twice", h.id, h.n.Type)
				}
				seen[h.id] = true
			}
			if len(hs) != 4 {
				t.Errorf("got %s, want started and completed of A, then of B", types(hs))
			}
		})
	}
}

// A notifier killed between a send and its record sends that notice
// again after the restart — with the same id, so that the receiver
// de-duplicates it — and loses nothing.
func TestKilledMidDelivery(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store, _ := open()
			r := newReceiver(t, nil)
			w := newWorld(t, store, dest(r))
			var once sync.Once
			crashed := make(chan struct{})
			w.cfg.crash = func(d Delivery) bool {
				hit := false
				once.Do(func() { hit = true; close(crashed) })
				return hit
			}
			w.start()
			w.run(taskA)
			<-crashed
			w.stop()
			w.cfg.crash = nil
			w.start()
			hs := r.waitFor(t, "every notice", func(hs []hit) bool { return len(hs) >= 3 })
			time.Sleep(300 * time.Millisecond)
			hs = r.all()
			unique := map[string]int{}
			for _, h := range hs {
				unique[h.id]++
			}
			if len(unique) != 2 || count(hs, Started) != 2 || count(hs, Completed) != 1 {
				t.Errorf("got %s; want started twice (sent, killed before its record, sent again) and completed once", types(hs))
			}
			if hs[0].id != hs[1].id {
				t.Errorf("the resent notice has id %s, the first %s", hs[1].id, hs[0].id)
			}
		})
	}
}

// With the advice stream: a waiting task gets starts_soon before it
// starts, and no starts_soon after.
func TestStartsSoonFromAdvice(t *testing.T) {
	store, js := stores(t)["kv"]()
	r := newReceiver(t, nil)
	w := newWorld(t, store, dest(r))
	w.js = js
	w.start()
	w.append(dt.Task().ID(taskA).Name("train").Team("vision").GPUs(1).Submitted())
	publish := func(p50 time.Duration, seq uint64, state domain.TaskState) {
		t.Helper()
		now := time.Now()
		b, _ := json.Marshal(estimate.Advice{TaskID: taskA, State: string(state), P50Start: now.Add(p50), P90Start: now.Add(2 * p50), BasedOnSeq: seq, At: now})
		if _, err := js.Publish(w.ctx, events.AdviceSubject(taskA), b); err != nil {
			t.Fatal(err)
		}
	}
	publish(time.Hour, 2, domain.Queued)
	time.Sleep(200 * time.Millisecond)
	if hs := r.all(); len(hs) != 0 {
		t.Fatalf("got %s for a start an hour away", types(hs))
	}
	publish(3*time.Minute, 2, domain.Queued)
	r.waitFor(t, "starts_soon", func(hs []hit) bool { return count(hs, StartsSoon) == 1 })
	w.append(dt.Dispatch(taskA, dt.On("n1", 0)))
	w.append(events.Started{TaskID: taskA, Node: "n1", PID: 1})
	r.waitFor(t, "started", func(hs []hit) bool { return count(hs, Started) == 1 })
	publish(time.Minute, 2, domain.Queued) // late advice from before the start
	time.Sleep(300 * time.Millisecond)
	hs := r.all()
	if got := types(hs); count(hs, StartsSoon) != 1 || hs[0].n.Type != StartsSoon || hs[1].n.Type != Started || len(hs) != 2 {
		t.Errorf("got %s, want starts_soon then started, nothing after", got)
	}
}

// A notifier's first start begins at the log's end: nothing about what
// happened before it existed.
func TestFirstStartNothingFromThePast(t *testing.T) {
	r := newReceiver(t, nil)
	w := newWorld(t, NewMem(), dest(r))
	w.run(taskA)
	w.start()
	w.run(taskB)
	r.waitFor(t, "task B's notices", func(hs []hit) bool { return len(hs) >= 2 })
	time.Sleep(200 * time.Millisecond)
	for _, h := range r.all() {
		if h.n.TaskID != taskB {
			t.Errorf("got %s about task %s, from before the first start", h.n.Type, h.n.TaskID)
		}
	}
}

// A task's own destinations (gpuq submit --notify) get that task's
// notices — and no other task's — unsigned and saying so, with the same
// retries; restricted like a team's: loopback only where allowed.
func TestTaskNotifyDelivery(t *testing.T) {
	cases := map[string]struct {
		allow    Allow
		wantHits int // at the task's receiver
		wantDead int
	}{
		"delivered where allowed (gpuq dev)":       {allow: Allow{Local: true}, wantHits: 2},
		"loopback refused by default: dead letter": {allow: Allow{}, wantDead: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			team := newReceiver(t, nil) // the operator's, sees everything
			mine := newReceiver(t, func(n int) int {
				if n == 1 {
					return 500 // the first attempt fails: retried like any delivery
				}
				return 200
			})
			store := NewMem()
			w := newWorld(t, store, dest(team))
			w.cfg.Allow = tc.allow
			w.start()
			url := mine.srv.URL + "/task-hook"
			w.append(dt.Task().ID(taskA).Name("train").Team("vision").GPUs(1).Notify(url).Submitted())
			w.append(dt.Dispatch(taskA, dt.On("n1", 0)))
			w.append(events.Started{TaskID: taskA, Node: "n1", PID: 1})
			w.append(events.Completed{TaskID: taskA, Node: "n1"})
			w.run(taskB) // names no destination of its own
			team.waitFor(t, "both tasks' notices at the operator's", func(hs []hit) bool { return len(hs) >= 4 })
			if tc.wantHits > 0 {
				// started fails once, then started and completed arrive.
				mine.waitFor(t, "task A's notices", func(hs []hit) bool { return len(hs) >= tc.wantHits+1 })
			}
			var dead []Delivery
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if dead, _ = store.DeadLetters(w.ctx); len(dead) >= tc.wantDead {
					break
				}
			}
			time.Sleep(200 * time.Millisecond)
			hs := mine.all()
			if tc.wantHits == 0 {
				if len(hs) != 0 {
					t.Fatalf("a loopback task destination got %s without --webhook-allow or gpuq dev", types(hs))
				}
				if len(dead) != tc.wantDead || !strings.Contains(dead[0].LastError, "not allowed") {
					t.Fatalf("dead letters %+v, want %d refused by the allow rules", dead, tc.wantDead)
				}
				return
			}
			if len(dead) != 0 {
				t.Errorf("dead letters %+v", dead)
			}
			unique := map[string]bool{}
			for _, h := range hs {
				unique[h.id] = true
				if h.n.TaskID != taskA {
					t.Errorf("the task's destination got %s about task %s", h.n.Type, h.n.TaskID)
				}
				if h.sig != "" {
					t.Errorf("%s: signed (%q); a task's destination has no secret", h.n.Type, h.sig)
				}
			}
			if len(unique) != 2 || count(hs, Started) != 2 || count(hs, Completed) != 1 {
				t.Errorf("got %s; want started (refused once, then again with the same id) and completed", types(hs))
			}
			// The operator's destination still gets task A's notices, signed.
			if n := len(team.all()); n != 4 {
				t.Errorf("the operator's destination got %d notices, want 4", n)
			}
		})
	}
}

// The header says a task destination's delivery is unsigned.
func TestTaskNotifyUnsignedHeader(t *testing.T) {
	got := make(chan http.Header, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() }))
	t.Cleanup(srv.Close)
	w := newWorld(t, NewMem())
	w.cfg.Allow = Allow{Local: true}
	w.start()
	w.append(dt.Task().ID(taskA).Name("train").Team("vision").GPUs(1).Notify(srv.URL).Submitted())
	w.append(dt.Dispatch(taskA, dt.On("n1", 0)))
	w.append(events.Started{TaskID: taskA, Node: "n1", PID: 1})
	select {
	case h := <-got:
		if h.Get(HeaderSignatureStatus) != "unsigned" || h.Get(HeaderSignature) != "" || h.Get(HeaderID) == "" {
			t.Errorf("headers %v: want %s: unsigned, no signature, an event id", h, HeaderSignatureStatus)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery in 20 s")
	}
}

// A notifier restarted with a task's delivery pending delivers it to the
// task's destination (known from the record, not from a configuration).
func TestTaskNotifyAfterRestart(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store, _ := open()
			mine := newReceiver(t, nil)
			w := newWorld(t, store)
			w.cfg.Allow = Allow{Local: true}
			var once sync.Once
			crashed := make(chan struct{})
			w.cfg.crash = func(d Delivery) bool {
				hit := false
				once.Do(func() { hit = true; close(crashed) })
				return hit
			}
			w.start()
			w.append(dt.Task().ID(taskA).Name("train").Team("vision").GPUs(1).Notify(mine.srv.URL).Submitted())
			w.append(dt.Dispatch(taskA, dt.On("n1", 0)))
			w.append(events.Started{TaskID: taskA, Node: "n1", PID: 1})
			<-crashed
			w.stop()
			w.cfg.crash = nil
			w.append(events.Completed{TaskID: taskA, Node: "n1"}) // while it is down
			w.start()
			hs := mine.waitFor(t, "started again and completed", func(hs []hit) bool { return count(hs, Completed) == 1 && count(hs, Started) == 2 })
			time.Sleep(300 * time.Millisecond)
			if hs = mine.all(); len(hs) != 3 {
				t.Errorf("got %s; want started (killed before its record), started again, completed", types(hs))
			}
		})
	}
}

// With the advice stream: a task whose P90 start plus its predicted run
// passes its deadline gets deadline_at_risk once, at its own destination
// too; none after it started.
func TestDeadlineAtRiskFromAdvice(t *testing.T) {
	store, js := stores(t)["kv"]()
	r := newReceiver(t, nil)
	mine := newReceiver(t, nil)
	w := newWorld(t, store, dest(r))
	w.js = js
	w.cfg.Allow = Allow{Local: true}
	w.start()
	dl := time.Now().Add(3 * time.Hour)
	w.append(dt.Task().ID(taskA).Name("train").Team("vision").GPUs(1).Hours(1).Deadline(dl).Notify(mine.srv.URL).Submitted())
	publish := func(p90 time.Duration, runS float64) {
		t.Helper()
		now := time.Now()
		b, _ := json.Marshal(estimate.Advice{TaskID: taskA, State: string(domain.Queued), P50Start: now.Add(p90 / 2), P90Start: now.Add(p90),
			RunS: runS, BasedOnSeq: 2, At: now})
		if _, err := js.Publish(w.ctx, events.AdviceSubject(taskA), b); err != nil {
			t.Fatal(err)
		}
	}
	publish(time.Hour, 3600) // ends in 2 h: safe
	time.Sleep(300 * time.Millisecond)
	if hs := r.all(); len(hs) != 0 {
		t.Fatalf("got %s for a deadline met", types(hs))
	}
	publish(time.Hour, 3*3600) // ends in 4 h: at risk
	hs := r.waitFor(t, "deadline_at_risk", func(hs []hit) bool { return count(hs, DeadlineAtRisk) == 1 })
	publish(70*time.Minute, 3*3600) // still at risk: no second one
	mine.waitFor(t, "deadline_at_risk at the task's destination", func(hs []hit) bool { return count(hs, DeadlineAtRisk) == 1 })
	var n Notice
	for _, h := range hs {
		if h.n.Type == DeadlineAtRisk {
			n = h.n
		}
	}
	if !strings.Contains(n.Text, "may miss its deadline") || !strings.Contains(n.Text, "about 3 h run") || n.Deadline == nil || n.RunS != 3*3600 {
		t.Errorf("notice %+v", n)
	}
	w.append(dt.Dispatch(taskA, dt.On("n1", 0)))
	w.append(events.Started{TaskID: taskA, Node: "n1", PID: 1})
	r.waitFor(t, "started", func(hs []hit) bool { return count(hs, Started) == 1 })
	publish(2*time.Hour, 5*3600) // late advice from before the start
	time.Sleep(300 * time.Millisecond)
	if hs := r.all(); count(hs, DeadlineAtRisk) != 1 {
		t.Errorf("got %s, want one deadline_at_risk and none after started", types(hs))
	}
}
