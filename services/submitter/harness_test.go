package submitter

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
)

var (
	t0         = time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	testLimits = domain.Limits{MaxGPUs: 8, MaxHours: 48}
)

// clock is a fake Now that ticks one second per read.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

// last is the time Now returned last: the log stamps an append with the
// writer's own time.
func (c *clock) last() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// harness is a server on a log, folding and following it, without NATS or
// an HTTP listener.
type harness struct {
	t   testing.TB
	log events.Log
	s   *server
	ctx context.Context
	h   http.Handler
}

func testLogger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

// newHarness starts a server on l (a fresh memlog when nil).
func newHarness(t testing.TB, l events.Log) *harness {
	t.Helper()
	clk := &clock{t: t0}
	if l == nil {
		l = memlog.New()
	}
	// The fold's clock is the log's: a memlog stamps with the harness's
	// clock.
	ml, _ := l.(*memlog.Log)
	if il, ok := l.(*interceptLog); ok {
		ml, _ = il.Log.(*memlog.Log)
	}
	if ml != nil {
		ml.Now = clk.last
	}
	ctx, cancel := context.WithCancel(context.Background())
	// The handler stands for a loopback listener; httptest.NewRequest's
	// own Host (example.com) is one of its names too, so a test that makes
	// its requests that way reaches the API (the browser checks have their
	// own tests, with their own Hosts).
	s := newServer(Config{Log: l, Limits: testLimits, Logger: testLogger(t), Now: clk.Now, HTTPHosts: []string{"example.com"}})
	if err := s.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); s.follow(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	s.ready.Store(true)
	return &harness{t: t, log: l, s: s, ctx: context.Background(), h: s.handler()}
}

// validReq is a request that passes validation.
func validReq() domain.Request {
	return domain.Request{Name: "bert-base", Team: "nlp", Priority: "high", GPUs: 2, Hours: 3,
		Hypothesis: "warmup 10k beats 2k", Command: "python train.py"}
}

func (h *harness) submit(req domain.Request) api.SubmitReply {
	h.t.Helper()
	rep, err := h.s.submit(h.ctx, req)
	if err != nil {
		h.t.Fatalf("submit: %v", err)
	}
	return rep
}

func (h *harness) show(id string) api.TaskView {
	h.t.Helper()
	v, err := h.s.show(h.ctx, id)
	if err != nil {
		h.t.Fatalf("show %s: %v", id, err)
	}
	return v
}

// appendEvent appends e as another writer (the scheduler, an agent) would.
func (h *harness) appendEvent(e events.Event) uint64 {
	h.t.Helper()
	ack, err := events.Append(h.ctx, h.log, e, events.Meta{Time: t0}, "", nil)
	if err != nil {
		h.t.Fatalf("append %s: %v", e.EventType(), err)
	}
	return ack.Seq
}

// dispatch places a task on a fresh one-GPU node, as the scheduler would.
func (h *harness) dispatch(id string) {
	h.t.Helper()
	node, gpu := "node-"+id[len(id)-6:], "GPU-"+id
	h.appendEvent(events.Available{Node: node, GPUs: []events.GPU{{UUID: gpu, Model: "H100", MemoryMiB: 81920, Healthy: true}}, FreeGPUs: 1})
	h.appendEvent(events.Dispatched{TaskID: id, Placements: []events.Placement{{Node: node, GPUs: []string{gpu}}}})
}

func (h *harness) lastSeq() uint64 {
	h.t.Helper()
	n, err := h.log.LastSeq(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// natsCall runs op through the NATS handler with req encoded as JSON (or
// used as is when it is a string).
func (h *harness) natsCall(op string, req any) api.Reply {
	h.t.Helper()
	var data []byte
	switch r := req.(type) {
	case string:
		data = []byte(r)
	default:
		var err error
		if data, err = json.Marshal(r); err != nil {
			h.t.Fatal(err)
		}
	}
	return h.s.handleNATS(h.ctx, op, data)
}

// testHost is the Host of the harness's HTTP requests: a name of the
// loopback listener the harness stands for.
const testHost = "localhost:8080"

// httpCall serves one HTTP request as curl or the CLI sends it (Host
// testHost, Content-Type application/json); body is sent as is.
func (h *harness) httpCall(method, path, body string) *httptest.ResponseRecorder {
	h.t.Helper()
	return h.httpCallHeader(method, path, body, http.Header{"Content-Type": {"application/json"}})
}

// httpCallHeader is httpCall with these headers (and no others but Host).
func (h *harness) httpCallHeader(method, path, body string, hdr http.Header) *httptest.ResponseRecorder {
	h.t.Helper()
	var r *http.Request
	if body == "" {
		r = httptest.NewRequest(method, path, nil)
	} else {
		r = httptest.NewRequest(method, path, bytes.NewBufferString(body))
	}
	r.Host = testHost
	for k, vs := range hdr {
		if strings.EqualFold(k, "Host") {
			r.Host = vs[0]
			continue
		}
		r.Header[http.CanonicalHeaderKey(k)] = vs
	}
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	return w
}

// errReply decodes an HTTP error body.
func errReply(t *testing.T, w *httptest.ResponseRecorder) api.Reply {
	t.Helper()
	var r api.Reply
	if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil {
		t.Fatalf("error body %q: %v", w.Body.String(), err)
	}
	return r
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// interceptLog runs hook once, just before the first append that match
// accepts, on the inner log: another writer that wins a race.
type interceptLog struct {
	events.Log
	mu    sync.Mutex
	match func(events.Msg) bool
	hook  func(ctx context.Context, inner events.Log, m events.Msg)
	fired bool
	// repeat fires the hook before every matching append, not only the first.
	repeat bool
}

func (l *interceptLog) Append(ctx context.Context, m events.Msg) (events.Ack, error) {
	l.mu.Lock()
	fire := !l.fired && l.match != nil && l.match(m)
	if fire && !l.repeat {
		l.fired = true
	}
	hook := l.hook
	l.mu.Unlock()
	if fire {
		hook(ctx, l.Log, m)
	}
	return l.Log.Append(ctx, m)
}

func (l *interceptLog) set(match func(events.Msg) bool, hook func(context.Context, events.Log, events.Msg)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.match, l.hook, l.fired = match, hook, false
}

// Task ids of the shape submit mints that no test submits.
const (
	unknownID = "00000000-0000-7000-8000-000000000000"
	earlyID   = "0190a5b2-3c4d-7e8f-9a0b-1c2d3e4f5a6b"
)

// catchUp folds every record present in the log now (once).
func (s *server) catchUp(ctx context.Context) error { return s.m.f.CatchUp(ctx, nil) }

// skipped is the number of records the fold skipped.
func (m *model) skipped() uint64 { return m.f.Counters.Skipped.Load() }
