package submitter

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
)

// streamHarness is newHarness with the stream sized by cfg, on l (a fresh
// memlog when nil), served by an httptest server.
func streamHarness(t testing.TB, l events.Log, cfg StreamConfig) (*harness, *httptest.Server) {
	t.Helper()
	if l == nil {
		l = memlog.New()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := newServer(Config{Log: l, Limits: testLimits, Logger: testLogger(t), Stream: cfg})
	if err := s.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); s.follow(ctx, nil) }()
	s.ready.Store(true)
	h := &harness{t: t, log: l, s: s, ctx: context.Background(), h: s.handler()}
	srv := httptest.NewServer(h.h)
	t.Cleanup(func() {
		s.hub.shutdown()
		srv.Close()
		cancel()
		<-done
	})
	return h, srv
}

// sse is one event of a stream.
type sse struct {
	ID    uint64
	Event string
	Data  string
}

// stream is a follower over HTTP.
type stream struct {
	t      testing.TB
	res    *http.Response
	events chan sse
	errc   chan error
}

// openStream follows url with the given headers (name, value pairs).
func openStream(t testing.TB, url string, hdr ...string) *stream {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	st := &stream{t: t, res: res, events: make(chan sse, 1<<16), errc: make(chan error, 1)}
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != http.StatusOK {
		return st
	}
	go func() {
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var cur sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.Event != "" || cur.Data != "" {
					st.events <- cur
				}
				cur = sse{}
			case strings.HasPrefix(line, ":"):
				st.events <- sse{Event: "comment", Data: line}
			case strings.HasPrefix(line, "id: "):
				cur.ID, _ = strconv.ParseUint(line[4:], 10, 64)
			case strings.HasPrefix(line, "event: "):
				cur.Event = line[7:]
			case strings.HasPrefix(line, "data: "):
				cur.Data = line[6:]
			}
		}
		st.errc <- sc.Err()
		close(st.events)
	}()
	return st
}

// until collects events until done says so; it fails after d.
func (s *stream) until(d time.Duration, done func(got []sse) bool) []sse {
	s.t.Helper()
	var got []sse
	timeout := time.After(d)
	for !done(got) {
		select {
		case e, ok := <-s.events:
			if !ok {
				s.t.Fatalf("stream ended before the condition held; got %d events: %v", len(got), got)
			}
			got = append(got, e)
		case <-timeout:
			s.t.Fatalf("condition not met after %s; got %d events: %v", d, len(got), got)
		}
	}
	return got
}

// ids are the ids of the records among evs.
func ids(evs []sse) []uint64 {
	var out []uint64
	for _, e := range evs {
		if e.ID > 0 {
			out = append(out, e.ID)
		}
	}
	return out
}

func hasID(n uint64) func([]sse) bool {
	return func(got []sse) bool {
		for _, e := range got {
			if e.ID >= n {
				return true
			}
		}
		return false
	}
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// fill appends n submissions and, for every third, a node and its
// dispatch, directly to the log (another writer).
func fill(t testing.TB, l events.Log, n int, team func(i int) string) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprintf("0190a000-0000-7000-8000-%012x", rand.Uint64()&0xffffffffffff)
		e := events.Submitted{TaskID: id, Name: fmt.Sprintf("t%d", i), Team: team(i), Priority: "medium", GPUs: 1, Hours: 1,
			Hypothesis: "h", Command: "true", SubmittedAt: t0}
		if _, err := events.Append(ctx, l, e, events.Meta{Time: t0}, "", nil); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			node, gpu := "node-"+id[len(id)-6:], "GPU-"+id
			for _, ev := range []events.Event{
				events.Available{Node: node, GPUs: []events.GPU{{UUID: gpu, Model: "H100", MemoryMiB: 81920, Healthy: true}}, FreeGPUs: 1},
				events.Dispatched{TaskID: id, Placements: []events.Placement{{Node: node, GPUs: []string{gpu}}}},
			} {
				if _, err := events.Append(ctx, l, ev, events.Meta{Time: t0}, "", nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func waitFold(t testing.TB, h *harness, seq uint64) {
	t.Helper()
	if err := h.s.m.waitFor(context.Background(), seq, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Resuming after any sequence delivers every record after it, once, in
// order: before the hub went live (read from the log), from the ring, and
// past the ring (read from the log again).
func TestStreamResumeNoRepeatNoMiss(t *testing.T) {
	l := memlog.New()
	fill(t, l, 20, func(int) string { return "nlp" }) // folded before the hub is live
	h, srv := streamHarness(t, l, StreamConfig{Ring: 16})
	fill(t, l, 40, func(int) string { return "nlp" }) // live: the ring holds the last 16
	last := h.lastSeq()
	waitFold(t, h, last)
	// the hub has fanned everything out once a live follower saw the last record
	openStream(t, srv.URL+"/v1/events?after="+strconv.FormatUint(last-1, 10)).until(5*time.Second, hasID(last))

	rng := rand.New(rand.NewPCG(27, 1))
	cuts := []uint64{0, 1, 19, 20, 21, last - 17, last - 16, last - 15, last - 1, last}
	for range 20 {
		cuts = append(cuts, rng.Uint64N(last+1))
	}
	for _, cut := range cuts {
		t.Run(fmt.Sprint("after ", cut), func(t *testing.T) {
			hdr := []string{"Last-Event-ID", strconv.FormatUint(cut, 10)}
			s := openStream(t, srv.URL+"/v1/events", hdr...)
			var got []sse
			if cut < last {
				got = s.until(5*time.Second, hasID(last))
			} else {
				got = s.until(5*time.Second, func(g []sse) bool { return len(g) > 0 && g[0].Event == "hello" })
			}
			if diff := cmp.Diff(seqRange(cut+1, last), ids(got)); diff != "" {
				t.Errorf("ids after %d (-want +got):\n%s", cut, diff)
			}
			// and what comes next is live, once
			more := h.submit(validReq())
			got = s.until(5*time.Second, hasID(more.Seq))
			if diff := cmp.Diff(seqRange(more.Seq-uint64(len(ids(got)))+1, more.Seq), ids(got)); diff != "" || len(ids(got)) == 0 {
				t.Errorf("live ids (-want +got):\n%s", diff)
			}
			last = more.Seq
		})
	}
}

// A follower whose writes block is dropped once its buffer is full; the
// hub never waits for it and the others get every event.
func TestStreamSlowFollowerDropped(t *testing.T) {
	h, srv := streamHarness(t, nil, StreamConfig{Buffer: 256})
	fast := openStream(t, srv.URL+"/v1/events")
	fast.until(5*time.Second, func(g []sse) bool { return len(g) > 0 })

	slow := &blockingWriter{header: http.Header{}, release: make(chan struct{}), blocked: make(chan struct{})}
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/v1/events", nil)
	served := make(chan struct{})
	go func() { defer close(served); h.h.ServeHTTP(slow, req) }()
	// the slow follower registers, then its writes block: it reads nothing more
	waitUntil(func() bool { return h.s.hub.count.Load() == 2 }, 5*time.Second)
	if n := h.s.hub.count.Load(); n != 2 {
		t.Fatalf("%d followers, want 2", n)
	}

	// 600 records, 50 at a time: the fast follower is never 256 behind;
	// the slow one took what was queued when it first woke (at most the
	// first 50 or so) and blocked writing them, so it is 256 behind
	// before the end.
	var (
		last uint64
		got  []sse
	)
	for range 12 {
		for range 50 {
			last = h.submit(validReq()).Seq
		}
		got = append(got, fast.until(10*time.Second, hasID(last))...)
	}
	if diff := cmp.Diff(seqRange(1, last), ids(got)); diff != "" {
		t.Errorf("the fast follower's records (-want +got):\n%s", diff)
	}
	if d := h.s.hub.dropped.Load(); d != 1 {
		t.Errorf("dropped = %d, want 1 (the slow follower)", d)
	}
	<-slow.blocked
	close(slow.release)
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("the dropped follower's response did not end")
	}
	if !strings.Contains(slow.body.String(), ": dropped: did not keep up") {
		t.Errorf("the dropped follower was not told why; it got:\n%s", slow.body.String())
	}
}

// blockingWriter is a ResponseWriter whose writes block, after its
// first flush, until release.
type blockingWriter struct {
	header  http.Header
	release chan struct{}
	blocked chan struct{} // closed when a write first blocks
	flushed bool
	mu      sync.Mutex
	body    strings.Builder
}

func (w *blockingWriter) Header() http.Header { return w.header }
func (w *blockingWriter) WriteHeader(int)     {}
func (w *blockingWriter) Flush()              { w.mu.Lock(); w.flushed = true; w.mu.Unlock() }
func (w *blockingWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	flushed := w.flushed
	w.mu.Unlock()
	if flushed {
		select {
		case <-w.blocked:
		default:
			close(w.blocked)
		}
		<-w.release
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.Write(b)
}

// A team's token follows only its team's records and advice (node
// records are everyone's); the admin's follows everything.
func TestStreamTeamScope(t *testing.T) {
	h, tok := tokenHarness(t)
	srv := httptest.NewServer(h.h)
	t.Cleanup(srv.Close)
	t.Cleanup(h.s.hub.shutdown)

	follow := func(who string) *stream {
		return openStream(t, srv.URL+"/v1/events", "Authorization", "Bearer "+tok[who])
	}
	streams := map[string]*stream{"vision": follow("vision"), "nlp": follow("nlp"), "admin": follow("admin")}
	for _, s := range streams {
		s.until(5*time.Second, func(g []sse) bool { return len(g) > 0 })
	}
	if code, _ := h.httpAs("", http.MethodGet, "/v1/events", ""); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", code)
	}
	v := validReq()
	v.Team = "vision"
	vis := h.submit(v)
	n := validReq()
	n.Team = "nlp"
	nlp := h.submit(n)
	h.dispatch(nlp.TaskID) // a node record (public), then the dispatch (nlp's)
	h.s.hub.onAdvice([]byte(fmt.Sprintf(`{"task_id":%q,"state":"queued","position":1,"based_on_seq":%d}`, vis.TaskID, vis.Seq)))
	last := h.lastSeq()

	want := map[string][]uint64{
		"admin":  seqRange(vis.Seq, last),
		"vision": {vis.Seq, nlp.Seq + 1},       // its submission, the node
		"nlp":    {nlp.Seq, nlp.Seq + 1, last}, // its submission, the node, its dispatch
	}
	for who, s := range streams {
		got := s.until(5*time.Second, func(g []sse) bool {
			seen := map[uint64]bool{}
			for _, id := range ids(g) {
				seen[id] = true
			}
			for _, id := range want[who] {
				if !seen[id] {
					return false
				}
			}
			return true
		})
		// what came after the wanted ones (nothing else should come)
		time.Sleep(100 * time.Millisecond)
	drain:
		for {
			select {
			case e := <-s.events:
				got = append(got, e)
			default:
				break drain
			}
		}
		if diff := cmp.Diff(want[who], ids(got)); diff != "" {
			t.Errorf("%s's records (-want +got):\n%s", who, diff)
		}
		advice := 0
		for _, e := range got {
			if e.Event == "advice" {
				advice++
			}
			if e.ID > 0 && who != "admin" {
				var r StreamRecord
				if err := json.Unmarshal([]byte(e.Data), &r); err != nil {
					t.Fatal(err)
				}
				if r.TaskID != "" && r.Team != who {
					t.Errorf("%s got team %s's record %d", who, r.Team, r.Seq)
				}
			}
		}
		if wantAdvice := map[string]int{"admin": 1, "vision": 1, "nlp": 0}[who]; advice != wantAdvice {
			t.Errorf("%s got %d advice events, want %d", who, advice, wantAdvice)
		}
	}
	// a resume is scoped the same way
	r := openStream(t, srv.URL+"/v1/events", "Authorization", "Bearer "+tok["vision"], "Last-Event-ID", "0")
	evs := r.until(5*time.Second, hasID(nlp.Seq+1))
	if diff := cmp.Diff([]uint64{vis.Seq, nlp.Seq + 1}, ids(evs)); diff != "" {
		t.Errorf("vision's resume from 0 (-want +got):\n%s", diff)
	}
	var hello StreamHello
	if len(evs) == 0 || evs[0].Event != "hello" || json.Unmarshal([]byte(evs[0].Data), &hello) != nil || hello.Team != "vision" {
		t.Errorf("first event %v, want hello naming team vision", evs[:min(1, len(evs))])
	}
}

func TestStreamRequests(t *testing.T) {
	h, srv := streamHarness(t, nil, StreamConfig{KeepAlive: 50 * time.Millisecond})
	first := h.submit(validReq())
	for name, tc := range map[string]struct {
		path, header string
		status       int
		field        string
	}{
		"Last-Event-ID not a number": {path: "/v1/events", header: "x", status: 400, field: "Last-Event-ID"},
		"negative after":             {path: "/v1/events?after=-1", status: 400, field: "after"},
		"after not a number":         {path: "/v1/events?after=abc", status: 400, field: "after"},
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+tc.path, nil)
			if tc.header != "" {
				req.Header.Set("Last-Event-ID", tc.header)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var rep struct{ Error, Field string }
			_ = json.NewDecoder(res.Body).Decode(&rep)
			if res.StatusCode != tc.status || rep.Field != tc.field {
				t.Errorf("got %d field %q (%s), want %d field %q", res.StatusCode, rep.Field, rep.Error, tc.status, tc.field)
			}
		})
	}
	t.Run("past the log: reset", func(t *testing.T) {
		s := openStream(t, srv.URL+"/v1/events", "Last-Event-ID", "999")
		got := s.until(5*time.Second, func(g []sse) bool { return len(g) >= 2 })
		var rs StreamReset
		if got[0].Event != "reset" || json.Unmarshal([]byte(got[0].Data), &rs) != nil || rs.Seq != first.Seq {
			t.Errorf("got %v, want a reset at %d first", got, first.Seq)
		}
	})
	t.Run("keep-alive", func(t *testing.T) {
		s := openStream(t, srv.URL+"/v1/events")
		s.until(5*time.Second, func(g []sse) bool { return len(g) > 0 && g[len(g)-1].Data == ": keep-alive" })
	})
}

// Past MaxFollowers a follower gets 503; one that leaves makes room.
func TestStreamFollowerLimit(t *testing.T) {
	h, srv := streamHarness(t, nil, StreamConfig{MaxFollowers: 2})
	hello := func(g []sse) bool { return len(g) > 0 }
	a := openStream(t, srv.URL+"/v1/events")
	a.until(5*time.Second, hello)
	openStream(t, srv.URL+"/v1/events").until(5*time.Second, hello)
	if c := openStream(t, srv.URL+"/v1/events"); c.res.StatusCode != http.StatusServiceUnavailable || c.res.Header.Get("Retry-After") == "" {
		t.Errorf("the third follower: %d (Retry-After %q), want 503 with Retry-After", c.res.StatusCode, c.res.Header.Get("Retry-After"))
	}
	a.res.Body.Close()
	waitUntil(func() bool { return h.s.hub.slots.Load() == 1 }, 5*time.Second)
	if d := openStream(t, srv.URL+"/v1/events"); d.res.StatusCode != http.StatusOK {
		t.Errorf("after one left: %d, want 200", d.res.StatusCode)
	}
}

// The stream outlives the server's read and write timeouts.
func TestStreamOutlivesServerTimeouts(t *testing.T) {
	h, _ := streamHarness(t, nil, StreamConfig{})
	srv := httptest.NewUnstartedServer(h.h)
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	s := openStream(t, srv.URL+"/v1/events")
	s.until(5*time.Second, func(g []sse) bool { return len(g) > 0 })
	time.Sleep(time.Second)
	rep := h.submit(validReq())
	s.until(5*time.Second, hasID(rep.Seq))
}

// A dispatch moves the node's view: a node event with the holder.
func TestStreamNodeEvents(t *testing.T) {
	h, srv := streamHarness(t, nil, StreamConfig{})
	s := openStream(t, srv.URL+"/v1/events")
	s.until(5*time.Second, func(g []sse) bool { return len(g) > 0 })
	rep := h.submit(validReq())
	h.dispatch(rep.TaskID)
	holds := func(e sse) bool {
		var nv StreamNode
		return e.Event == "node" && json.Unmarshal([]byte(e.Data), &nv) == nil && len(nv.GPUs) == 1 &&
			nv.GPUs[0].TaskID != nil && *nv.GPUs[0].TaskID == rep.TaskID
	}
	got := s.until(5*time.Second, func(g []sse) bool { return len(g) > 0 && holds(g[len(g)-1]) })
	// records in log order; node views after the batch that moved them
	var types []string
	for _, e := range got {
		if e.ID > 0 {
			types = append(types, e.Event)
		}
	}
	want := []string{"submitted", "available", "dispatched"}
	if diff := cmp.Diff(want, types); diff != "" {
		t.Errorf("record event names (-want +got):\n%s", diff)
	}
	var nv StreamNode
	if e := got[len(got)-1]; json.Unmarshal([]byte(e.Data), &nv) != nil || len(nv.GPUs) != 1 || nv.GPUs[0].TaskID == nil ||
		*nv.GPUs[0].TaskID != rep.TaskID || nv.Seq < rep.Seq+2 {
		t.Errorf("last node event %+v, want the node with its GPU held by %s as of seq ≥ %d", e, rep.TaskID, rep.Seq+2)
	}
}

// Advice is kept for waiting tasks and sent to a new follower first; an
// older advice never replaces a newer one; a task that left the queue
// drops out.
func TestStreamAdviceSnapshot(t *testing.T) {
	h, srv := streamHarness(t, nil, StreamConfig{})
	a, b := h.submit(validReq()), h.submit(validReq())
	adv := func(id string, state string, seq uint64) {
		h.s.hub.onAdvice([]byte(fmt.Sprintf(`{"task_id":%q,"state":%q,"based_on_seq":%d,"reason":"r%d"}`, id, state, seq, seq)))
	}
	adv(a.TaskID, "queued", 5)
	adv(a.TaskID, "queued", 3) // older: ignored
	adv(b.TaskID, "queued", 4)
	adv(b.TaskID, "running", 6) // started: no longer kept
	s := openStream(t, srv.URL+"/v1/events")
	got := s.until(5*time.Second, func(g []sse) bool { return len(g) >= 2 })
	if got[1].Event != "advice" || !strings.Contains(got[1].Data, `"reason":"r5"`) {
		t.Errorf("snapshot %v, want task a's advice r5 only", got)
	}
	select {
	case e := <-s.events:
		if e.Event == "advice" {
			t.Errorf("a second advice in the snapshot: %v", e)
		}
	case <-time.After(100 * time.Millisecond):
	}
}

// Without tokens the page carries the head of the queue before its
// script runs; a name is text, never markup.
func TestPageQueue(t *testing.T) {
	h := newHarness(t, nil)
	req := validReq()
	req.Name = "<script>alert(1)</script>"
	rep := h.submit(req)
	w := h.httpCall(http.MethodGet, "/", "")
	if w.Code != 200 || !strings.Contains(w.Body.String(), rep.TaskID) || !strings.Contains(w.Body.String(), "&lt;script&gt;alert(1)&lt;/script&gt;") ||
		strings.Contains(w.Body.String(), "<script>alert") {
		t.Errorf("GET /: %d, want the queued task, its name escaped:\n%s", w.Code, w.Body.String())
	}
}

// The page is served without a token, with a policy that forbids inline
// script and framing; its script and style come from the binary.
func TestPage(t *testing.T) {
	h, _ := tokenHarness(t)
	for name, tc := range map[string]struct {
		path, ctype, contains string
		status                int
	}{
		"page":        {path: "/", status: 200, ctype: "text/html; charset=utf-8", contains: `data-auth="true"`},
		"script":      {path: "/ui/app.js", status: 200, ctype: "text/javascript; charset=utf-8", contains: "Last-Event-ID"},
		"style":       {path: "/ui/app.css", status: 200, ctype: "text/css; charset=utf-8", contains: ".badge"},
		"no such":     {path: "/ui/nope.js", status: 404},
		"api unknown": {path: "/v1/nope", status: 401}, // the API still wants a token
	} {
		t.Run(name, func(t *testing.T) {
			code, body := h.httpAs("", http.MethodGet, tc.path, "")
			if code != tc.status {
				t.Fatalf("GET %s: %d, want %d: %s", tc.path, code, tc.status, body)
			}
			if tc.contains != "" && !strings.Contains(body, tc.contains) {
				t.Errorf("GET %s does not contain %q", tc.path, tc.contains)
			}
			if tc.ctype != "" {
				r := httptest.NewRequest(http.MethodGet, tc.path, nil)
				w := httptest.NewRecorder()
				h.h.ServeHTTP(w, r)
				if got := w.Header().Get("Content-Type"); got != tc.ctype {
					t.Errorf("Content-Type %q, want %q", got, tc.ctype)
				}
				if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
					t.Errorf("Content-Security-Policy %q", csp)
				}
			}
		})
	}
	// POST / is no page
	if code, _ := h.httpAs("", http.MethodPost, "/", "{}"); code == http.StatusOK {
		t.Errorf("POST / answered 200")
	}
}

// Advice that arrives before the submitter's fold has the task (the
// advisor's fold was ahead) reaches the task's team once the fold has it.
func TestStreamAdviceBeforeTheTask(t *testing.T) {
	h, tok := tokenHarness(t)
	srv := httptest.NewServer(h.h)
	t.Cleanup(srv.Close)
	t.Cleanup(h.s.hub.shutdown)
	id := "0190a000-0000-7000-8000-00000000abcd"
	h.s.hub.onAdvice([]byte(fmt.Sprintf(`{"task_id":%q,"state":"queued","position":1,"based_on_seq":1}`, id)))
	seq := h.appendEvent(events.Submitted{TaskID: id, Name: "early", Team: "vision", Priority: "low", GPUs: 1, Hours: 1,
		Hypothesis: "h", Command: "true", SubmittedAt: t0})
	waitFold(t, h, seq)
	s := openStream(t, srv.URL+"/v1/events", "Authorization", "Bearer "+tok["vision"])
	got := s.until(5*time.Second, func(g []sse) bool { return len(g) >= 2 })
	if got[1].Event != "advice" || !strings.Contains(got[1].Data, id) {
		t.Errorf("vision's stream began %v, want its task's advice after hello", got)
	}
}
