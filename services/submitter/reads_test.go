package submitter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/embedded/embeddedtest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/events/memlog"
)

// jsSubmitter is a submitter run on an embedded JetStream server, with
// NATS and HTTP, after the given messages were appended to its log.
type jsSubmitter struct {
	connect func(name string) (*nats.Conn, error)
	nc      *nats.Conn // a client's connection
	log     *jetstream.Log
	base    string // http://addr
}

func startJSSubmitter(t *testing.T, before []events.Msg) *jsSubmitter {
	t.Helper()
	srv := embeddedtest.Server(t)
	svcNC := embeddedtest.Connect(t, srv, "submitter")
	ctx, cancel := context.WithCancel(context.Background())
	log, err := jetstream.Open(ctx, svcNC, jetstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for from := 0; from < len(before); from += 10000 {
		for _, r := range log.AppendBatch(ctx, before[from:min(from+10000, len(before))]) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	addr := freeAddr(t)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{NC: svcNC, Log: log, HTTPAddr: addr, Limits: testLimits, Logger: testLogger(t),
			Now: (&clock{t: t0}).Now, Ready: func() { close(ready) }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run returned before ready: %v", err)
	case <-time.After(120 * time.Second):
		t.Fatal("not ready after 120s")
	}
	nc, err := srv.Connect("cli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &jsSubmitter{connect: srv.Connect, nc: nc, log: log, base: "http://" + addr}
}

// consumers is the audit stream's consumer count.
func (j *jsSubmitter) consumers(t *testing.T) int {
	t.Helper()
	s, err := j.log.JetStream().Stream(context.Background(), events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// submittedMsgs are n submitted events of distinct tasks, of two teams
// and four classes.
func submittedMsgs(t testing.TB, n int) ([]events.Msg, []string) {
	t.Helper()
	prios := []string{"critical", "high", "medium", "low"}
	msgs := make([]events.Msg, n)
	ids := make([]string, n)
	for i := range msgs {
		ids[i] = uuid.NewString()
		e := events.Submitted{TaskID: ids[i], Name: fmt.Sprintf("task-%d", i), Team: []string{"nlp", "vision"}[i%2],
			Priority: prios[i%4], GPUs: 1 + i%4, Hours: 2, Hypothesis: "h", Command: "python train.py --seed " + fmt.Sprint(i),
			SubmittedAt: t0.Add(time.Duration(i) * time.Millisecond)}
		subj, data, _, err := events.Encode(e, events.Meta{Time: t0})
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = events.Msg{Subject: subj, Data: data}
	}
	return msgs, ids
}

// TestQueueAllPagesOverNATSAndHTTP: `gpuq queue --all` of a queue far
// larger than one NATS message (the #22 finding: 2,800 tasks, past 1 MB,
// timed out) comes back whole, a page at a time, over NATS (api.Client.Queue,
// what the CLI uses) and over HTTP (?limit=&after=, Link rel="next"), in
// the order of the unpaginated listing; every page is under
// api.QueuePageBytes and api.QueuePage tasks.
func TestQueueAllPagesOverNATSAndHTTP(t *testing.T) {
	n := 100_000
	if testing.Short() || raceEnabled {
		n = 10_000
	}
	msgs, ids := submittedMsgs(t, n)
	j := startJSSubmitter(t, msgs)

	start := time.Now()
	cl := &api.Client{NC: j.nc, Timeout: 30 * time.Second}
	got, err := cl.Queue(true)
	if err != nil {
		t.Fatalf("queue over NATS: %v", err)
	}
	t.Logf("%d tasks over NATS in %s", len(got), time.Since(start))
	gotIDs := make([]string, len(got))
	for i, v := range got {
		gotIDs[i] = v.TaskID
	}
	want := slices.Clone(ids)
	sort.Strings(want)
	sorted := slices.Clone(gotIDs)
	sort.Strings(sorted)
	if !slices.Equal(sorted, want) {
		t.Fatalf("queue over NATS listed %d tasks (%d distinct), want the %d submitted", len(got), len(slices.Compact(sorted)), n)
	}

	// The unpaginated HTTP listing has the same order.
	resp, err := http.Get(j.base + "/v1/tasks?all=true")
	if err != nil {
		t.Fatal(err)
	}
	var whole []api.TaskView
	if err := json.NewDecoder(resp.Body).Decode(&whole); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for i := range whole {
		if i >= len(gotIDs) || whole[i].TaskID != gotIDs[i] {
			t.Fatalf("task %d: NATS pages list %s, the whole listing %s", i, gotIDs[i], whole[i].TaskID)
		}
	}

	// Over HTTP, page by page, following Link.
	start = time.Now()
	next := "/v1/tasks?all=true&limit=" + fmt.Sprint(api.QueuePage)
	var httpIDs []string
	linkRE := regexp.MustCompile(`^<([^>]+)>; rel="next"$`)
	pages := 0
	for next != "" {
		resp, err := http.Get(j.base + next)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", next, resp.StatusCode, body)
		}
		if len(body) > api.QueuePageBytes+2 {
			t.Fatalf("GET %s: a page of %d bytes, want at most %d", next, len(body), api.QueuePageBytes)
		}
		var page []api.TaskView
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		if len(page) > api.QueuePage || len(page) == 0 {
			t.Fatalf("GET %s: %d tasks", next, len(page))
		}
		for _, v := range page {
			httpIDs = append(httpIDs, v.TaskID)
		}
		pages++
		next = ""
		if l := resp.Header.Get("Link"); l != "" {
			m := linkRE.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("Link %q", l)
			}
			next = m[1]
		}
	}
	t.Logf("%d tasks over HTTP in %d pages in %s", len(httpIDs), pages, time.Since(start))
	if !slices.Equal(httpIDs, gotIDs) {
		t.Fatalf("HTTP pages listed %d tasks, NATS pages %d, or in another order", len(httpIDs), len(gotIDs))
	}
}

// TestQueuePageRequests: the limit and the cursor are checked, each error
// naming its field.
func TestQueuePageRequests(t *testing.T) {
	h := newHarness(t, nil)
	var ids []string
	for range 5 {
		ids = append(ids, h.submit(validReq()).TaskID)
	}
	tests := map[string]struct {
		req       api.QueueRequest
		wantField string
		wantN     int
		wantNext  bool
	}{
		"default page":     {req: api.QueueRequest{}, wantN: 5},
		"a page of two":    {req: api.QueueRequest{Limit: 2}, wantN: 2, wantNext: true},
		"after the fourth": {req: api.QueueRequest{Limit: 2, After: ids[3]}, wantN: 1},
		"after the last":   {req: api.QueueRequest{After: ids[4]}, wantN: 0},
		"limit too large":  {req: api.QueueRequest{Limit: api.QueuePage + 1}, wantField: "limit"},
		"negative limit":   {req: api.QueueRequest{Limit: -1}, wantField: "limit"},
		"unknown cursor":   {req: api.QueueRequest{After: uuid.NewString()}, wantField: "after"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := h.natsCall(api.OpQueue, tc.req)
			if tc.wantField != "" {
				if r.Field != tc.wantField {
					t.Fatalf("reply %+v, want an error on %s", r, tc.wantField)
				}
				return
			}
			var page []api.TaskView
			if err := json.Unmarshal(r.Result, &page); err != nil || r.Error != "" {
				t.Fatalf("reply %+v: %v", r, err)
			}
			if len(page) != tc.wantN || (r.Next != "") != tc.wantNext {
				t.Fatalf("%d tasks, next %q; want %d, next %v", len(page), r.Next, tc.wantN, tc.wantNext)
			}
		})
	}
	if w := h.httpCall("GET", "/v1/tasks?limit=0", ""); w.Code != http.StatusBadRequest || errReply(t, w).Field != "limit" {
		t.Errorf("limit=0 over HTTP: %d %s", w.Code, w.Body)
	}
	w := h.httpCall("GET", "/v1/tasks?limit=2", "")
	if w.Code != http.StatusOK || w.Header().Get("Link") != fmt.Sprintf(`</v1/tasks?after=%s&limit=2>; rel="next"`, url.QueryEscape(ids[1])) {
		t.Errorf("limit=2 over HTTP: %d, Link %q", w.Code, w.Header().Get("Link"))
	}
}

// TestPollersOverHTTP: a thousand clients polling show, history and logs
// of a running task over HTTP at once (the #22 finding: every request
// opened a JetStream consumer; 65 % of 1,000 pollers of logs got 500s, p99
// 8 s). No answer is a 5xx, and the stream has no more consumers than the
// submitter's own follow afterwards. The latencies are measured and
// logged, not asserted (this machine's load varies).
func TestPollersOverHTTP(t *testing.T) {
	pollers := 1000
	if testing.Short() {
		pollers = 200
	}
	id := uuid.NewString()
	var msgs []events.Msg
	add := func(e events.Event) {
		subj, data, _, err := events.Encode(e, events.Meta{Time: t0})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, events.Msg{Subject: subj, Data: data})
	}
	add(events.Submitted{TaskID: id, Name: "polled", Team: "nlp", Priority: "high", GPUs: 1, Hours: 2, Hypothesis: "h",
		Command: "python train.py", SubmittedAt: t0})
	add(events.Available{Node: "node-a", GPUs: []events.GPU{{UUID: "GPU-a", Model: "H100", MemoryMiB: 81920, Healthy: true}}, FreeGPUs: 1})
	add(events.Dispatched{TaskID: id, Placements: []events.Placement{{Node: "node-a", GPUs: []string{"GPU-a"}}}})
	add(events.Started{TaskID: id, Node: "node-a", PID: 42, LogDir: "/runs/" + id})
	j := startJSSubmitter(t, msgs)

	// The node's agent answers log requests.
	agentNC, err := j.connect("agent")
	if err != nil {
		t.Fatal(err)
	}
	defer agentNC.Close()
	if _, err := agentNC.Subscribe(api.LogsSubject("node-a"), func(m *nats.Msg) {
		var req api.LogsRequest
		_ = json.Unmarshal(m.Data, &req)
		b, _ := json.Marshal(api.LogsReply{TaskID: req.TaskID, Node: "node-a", Next: 6, Size: 6, Data: "hello\n"})
		out, _ := json.Marshal(api.Reply{Result: b})
		_ = m.Respond(out)
	}); err != nil {
		t.Fatal(err)
	}
	if err := agentNC.Flush(); err != nil {
		t.Fatal(err)
	}
	consumersBefore := j.consumers(t)

	paths := []string{"/v1/tasks/" + id, "/v1/tasks/" + id + "/history", "/v1/tasks/" + id + "/logs"}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: pollers, MaxConnsPerHost: 0}, Timeout: 60 * time.Second}
	type result struct {
		path   string
		status int
		took   time.Duration
		err    error
	}
	results := make([]result, pollers*len(paths))
	var wg sync.WaitGroup
	startGate := make(chan struct{})
	for p := range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGate
			for k := range paths {
				path := paths[(p+k)%len(paths)]
				s := time.Now()
				resp, err := client.Get(j.base + path)
				r := result{path: path, err: err}
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					r.status = resp.StatusCode
				}
				r.took = time.Since(s)
				results[p*len(paths)+k] = r
			}
		}()
	}
	start := time.Now()
	close(startGate)
	wg.Wait()
	wall := time.Since(start)

	byPath := map[string][]time.Duration{}
	var all []time.Duration
	fivexx, failed := 0, 0
	for _, r := range results {
		switch {
		case r.err != nil:
			failed++
			t.Errorf("GET %s: %v", r.path, r.err)
		case r.status >= 500:
			fivexx++
		case r.status != http.StatusOK:
			t.Errorf("GET %s: %d", r.path, r.status)
		}
		byPath[r.path] = append(byPath[r.path], r.took)
		all = append(all, r.took)
	}
	pct := func(ds []time.Duration, p float64) time.Duration {
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(float64(len(ds))*p))]
	}
	t.Logf("%d pollers x %d requests in %s: %d 5xx, %d transport errors; p50 %s, p99 %s, max %s",
		pollers, len(paths), wall.Round(time.Millisecond), fivexx, failed, pct(all, 0.50), pct(all, 0.99), pct(all, 1))
	for _, p := range paths {
		t.Logf("  %-60s p50 %s p99 %s", p, pct(byPath[p], 0.50), pct(byPath[p], 0.99))
	}
	if fivexx > 0 {
		t.Errorf("%d answers were 5xx, want none", fivexx)
	}
	// The submitter's own: its fold's follow, and the consumer of its
	// initial read until the server drops it (10 s after the read).
	if n := j.consumers(t); n > 2 {
		t.Errorf("the stream has %d consumers after the pollers (%d before), want at most the fold's 2: reads opened consumers", n, consumersBefore)
	}
}

// refusingLog refuses every follow, as a server whose stream is at its
// consumer limit refuses the submitter's consumer.
type refusingLog struct{ events.Log }

func (refusingLog) Follow(context.Context, uint64, string) (events.Follower, error) {
	return nil, errors.New("nats: maximum consumers limit reached")
}

// TestHealthzNamesARefusedFollow: a submitter whose follow of the log the
// server refuses answers /healthz 503 naming why (not "ok").
func TestHealthzNamesARefusedFollow(t *testing.T) {
	h := newHarness(t, refusingLog{memlog.New()})
	for deadline := time.Now().Add(5 * time.Second); ; {
		w := h.httpCall("GET", "/healthz", "")
		if w.Code == http.StatusServiceUnavailable && strings.Contains(w.Body.String(), "maximum consumers limit reached") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz: %d %s, want 503 naming the refused consumer", w.Code, w.Body)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTeamLogsOverNATS: a team's client (api.Client with Team, what
// `gpuq logs` uses with a team's credential, which may not ask the agents
// itself) reads its own task's output through the submitter's
// team-scoped logs operation; another team is refused.
func TestTeamLogsOverNATS(t *testing.T) {
	id := uuid.NewString()
	var msgs []events.Msg
	for _, e := range []events.Event{
		events.Submitted{TaskID: id, Name: "mine", Team: "nlp", Priority: "high", GPUs: 1, Hours: 2, Hypothesis: "h", Command: "c", SubmittedAt: t0},
		events.Available{Node: "node-a", GPUs: []events.GPU{{UUID: "GPU-a", Model: "H100", MemoryMiB: 81920, Healthy: true}}, FreeGPUs: 1},
		events.Dispatched{TaskID: id, Placements: []events.Placement{{Node: "node-a", GPUs: []string{"GPU-a"}}}},
		events.Started{TaskID: id, Node: "node-a", PID: 42, LogDir: "/runs/" + id},
	} {
		subj, data, _, err := events.Encode(e, events.Meta{Time: t0})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, events.Msg{Subject: subj, Data: data})
	}
	j := startJSSubmitter(t, msgs)
	agentNC, err := j.connect("agent")
	if err != nil {
		t.Fatal(err)
	}
	defer agentNC.Close()
	if _, err := agentNC.Subscribe(api.LogsSubject("node-a"), func(m *nats.Msg) {
		b, _ := json.Marshal(api.LogsReply{TaskID: id, Node: "node-a", Next: 6, Size: 6, Data: "hello\n"})
		out, _ := json.Marshal(api.Reply{Result: b})
		_ = m.Respond(out)
	}); err != nil {
		t.Fatal(err)
	}
	_ = agentNC.Flush()

	nlp := &api.Client{NC: j.nc, Team: "nlp", Timeout: 5 * time.Second}
	out, err := nlp.Logs("node-a", api.LogsRequest{TaskID: id})
	if err != nil || out.Data != "hello\n" {
		t.Fatalf("team nlp's logs of its task: %+v, %v", out, err)
	}
	vision := &api.Client{NC: j.nc, Team: "vision", Timeout: 5 * time.Second}
	if _, err := vision.Logs("node-a", api.LogsRequest{TaskID: id}); err == nil {
		t.Fatal("team vision read team nlp's task's output")
	}
}

// BenchmarkQueuePage: one page of a 100,000-task queue, from a cursor in
// its middle, over the NATS handler (the listing's order is sorted once
// per fold sequence and kept).
func BenchmarkQueuePage(b *testing.B) {
	l := memlog.New()
	msgs, ids := submittedMsgs(b, 100_000)
	for _, r := range events.AppendAll(context.Background(), l, msgs) {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	h := newHarness(b, l)
	r := h.natsCall(api.OpQueue, api.QueueRequest{All: true})
	if r.Error != "" {
		b.Fatal(r.Error)
	}
	req := api.QueueRequest{All: true, After: ids[len(ids)/2]}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if r := h.natsCall(api.OpQueue, req); r.Error != "" || r.Next == "" {
			b.Fatalf("%+v", r.Error)
		}
	}
}

// TestHistoryCache: a task's history is read once while the task has no
// new record, again once it has one, and a failed read is not kept.
func TestHistoryCache(t *testing.T) {
	var c historyCache
	reads := 0
	read := func(n int) func() ([]api.HistoryEntry, error) {
		return func() ([]api.HistoryEntry, error) {
			reads++
			return make([]api.HistoryEntry, n), nil
		}
	}
	fail := func() ([]api.HistoryEntry, error) { reads++; return nil, errors.New("gone") }
	steps := []struct {
		name      string
		last      uint64
		read      func() ([]api.HistoryEntry, error)
		wantN     int
		wantErr   bool
		wantReads int
	}{
		{"first read", 5, read(2), 2, false, 1},
		{"same sequence: kept", 5, read(9), 2, false, 1},
		{"a new record: read again", 7, read(3), 3, false, 2},
		{"a failed read", 9, fail, 0, true, 3},
		{"not kept after failing", 9, read(4), 4, false, 4},
	}
	for _, st := range steps {
		got, err := c.get("a", st.last, st.read)
		if (err != nil) != st.wantErr || len(got) != st.wantN || reads != st.wantReads {
			t.Fatalf("%s: %d entries, err %v, %d reads; want %d, err %v, %d reads", st.name, len(got), err, reads, st.wantN, st.wantErr, st.wantReads)
		}
	}
}
