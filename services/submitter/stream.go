package submitter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// The live stream, GET /v1/events (Server-Sent Events).
//
// One hub per submitter fans out, in memory, what the submitter's one
// fold applies (every log record, framed once) and what its one advice
// subscription hears. Each follower (one HTTP response) has a bounded
// buffer; the hub never waits for one: a follower whose buffer is full is
// dropped (its response ends), and its client resumes with Last-Event-ID.
// What a resuming follower missed is read back from the hub's ring of
// recent records, and from the log itself (direct gets by sequence)
// when the ring no longer holds it: never a consumer per follower.

// Stream defaults (Config.Stream overrides them).
const (
	// DefaultMaxFollowers bounds concurrent followers; one more is 503.
	DefaultMaxFollowers = 2000
	// DefaultFollowerBuffer is each follower's buffer, in frames.
	DefaultFollowerBuffer = 1024
	// DefaultKeepAlive is the interval of keep-alive comments.
	DefaultKeepAlive = 15 * time.Second
	// DefaultMaxResume is how far behind the log a Last-Event-ID may be
	// and still be resumed record by record; further back, the follower
	// gets a reset event and goes on live (its client reloads).
	DefaultMaxResume = 50_000
	// DefaultRing is how many recent records the hub keeps framed for
	// resumes; older ones are read from the log.
	DefaultRing = 8192
	// maxBatch: a batch larger than this finds the fan-out far behind the
	// fold (see process).
	maxBatch = 65536
	// streamWriteTimeout bounds one write to a follower: a client that
	// does not read for this long is gone.
	streamWriteTimeout = 10 * time.Second
)

// StreamConfig sizes the live stream (zero values: the defaults).
type StreamConfig struct {
	MaxFollowers int
	Buffer       int
	KeepAlive    time.Duration
	MaxResume    int
	Ring         int
}

func (c StreamConfig) withDefaults() StreamConfig {
	if c.MaxFollowers <= 0 {
		c.MaxFollowers = DefaultMaxFollowers
	}
	if c.Buffer <= 0 {
		c.Buffer = DefaultFollowerBuffer
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.MaxResume <= 0 {
		c.MaxResume = DefaultMaxResume
	}
	if c.Ring <= 0 {
		c.Ring = DefaultRing
	}
	return c
}

// StreamRecord is the data of a log record's event on the stream.
type StreamRecord struct {
	Seq     uint64          `json:"seq"`
	Type    string          `json:"type"`
	Time    time.Time       `json:"time"` // the log's time of the record
	Subject string          `json:"subject"`
	TaskID  string          `json:"task_id,omitempty"`
	Node    string          `json:"node,omitempty"`
	Team    string          `json:"team,omitempty"`
	Data    json.RawMessage `json:"data"` // the event as written; null when it does not decode
}

// StreamHello is the data of the first event of every response.
type StreamHello struct {
	Seq     uint64 `json:"seq"`               // the log sequence the stream goes on from
	Resumed bool   `json:"resumed,omitempty"` // a Last-Event-ID was resumed
	Team    string `json:"team,omitempty"`    // the caller's team: only its records come
}

// StreamReset is the data of a reset event: the stream could not resume
// and goes on from Seq; the client reloads its state.
type StreamReset struct {
	Seq    uint64 `json:"seq"`
	Reason string `json:"reason"`
}

// StreamNode is the data of a node event: a node's view after a record
// that changed it or what its GPUs hold, as of the fold's sequence Seq.
type StreamNode struct {
	Seq uint64 `json:"seq"`
	api.NodeView
}

// item is one thing the hub fans out.
type item struct {
	seq    uint64 // the log sequence of a record; 0 for derived events (advice, node)
	team   string // the task's team ("" with public: every follower; "" without: unscoped only)
	public bool
	frame  []byte
}

// visible is whether a follower of team (""; unscoped) may see it.
func (it *item) visible(team string) bool { return team == "" || it.public || it.team == team }

// pending is a record as the fold applied it, framed by the hub.
type pending struct {
	rec       events.Record
	team      string
	known     bool     // team is the task's (or the record is a node's: public)
	public    bool     // a node's record
	nodes     []string // nodes whose view may have changed
	terminal  string   // a task that ended with this record
	advice    []byte   // an advice message instead of a record
	adviceFor string   // its task
}

// follower is one response's place in the fan-out: a bounded queue of
// frames (shared with the other followers, not copied) that the hub
// appends to without waiting, and its writer empties.
type follower struct {
	team string
	max  int
	mu   sync.Mutex
	q    [][]byte
	sig  chan struct{} // cap 1: the queue is not empty
	gone chan struct{}
	once sync.Once
	why  atomic.Value // string: why it was dropped
}

func newFollower(team string, max int) *follower {
	return &follower{team: team, max: max, sig: make(chan struct{}, 1), gone: make(chan struct{})}
}

// push queues b; false when the queue is full (the follower is behind).
func (f *follower) push(b []byte) bool {
	f.mu.Lock()
	if len(f.q) >= f.max {
		f.mu.Unlock()
		return false
	}
	f.q = append(f.q, b)
	f.mu.Unlock()
	select {
	case f.sig <- struct{}{}:
	default:
	}
	return true
}

// take empties the queue into buf (reused) and returns what was queued.
func (f *follower) take(buf [][]byte) [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := append(buf[:0], f.q...)
	clear(f.q)
	f.q = f.q[:0]
	return out
}

func (f *follower) drop(why string) {
	f.once.Do(func() { f.why.Store(why); close(f.gone) })
}

type adviceEntry struct {
	team    string
	known   bool // team is the task's (else it was not folded yet)
	basedOn uint64
	frame   []byte
}

// hub is the stream's fan-out (see the comment at the top of the file).
type hub struct {
	s   *server
	cfg StreamConfig

	qmu    sync.Mutex
	live   bool // the fold caught up: records are queued from now on
	queue  []pending
	wake   chan struct{}
	liveCh chan struct{} // closed when live

	mu        sync.Mutex
	closed    bool // shutting down: no new followers
	followers map[*follower]struct{}
	head      uint64 // last record fanned out
	base      uint64 // the ring holds (base, head]
	ring      [][]byte
	ringTeam  []string
	ringPub   []bool
	lastNode  map[string][]byte // node → its last view's JSON (hub goroutine only)

	amu    sync.Mutex
	advice map[string]adviceEntry

	dropped atomic.Uint64
	count   atomic.Int64 // followers registered
	slots   atomic.Int64 // responses under way (the limit)
}

func newHub(s *server, cfg StreamConfig) *hub {
	cfg = cfg.withDefaults()
	return &hub{s: s, cfg: cfg, wake: make(chan struct{}, 1), liveCh: make(chan struct{}),
		followers: map[*follower]struct{}{}, ring: make([][]byte, cfg.Ring), ringTeam: make([]string, cfg.Ring),
		ringPub: make([]bool, cfg.Ring), lastNode: map[string][]byte{}, advice: map[string]adviceEntry{}}
}

// subjectKey splits a subject into its prefix kind and key.
func subjectKey(subject string) (task, node string) {
	if rest, ok := strings.CutPrefix(subject, events.TaskPrefix); ok {
		if i := strings.LastIndexByte(rest, '.'); i > 0 {
			return rest[:i], ""
		}
	}
	if rest, ok := strings.CutPrefix(subject, events.NodePrefix); ok {
		if i := strings.LastIndexByte(rest, '.'); i > 0 {
			return "", rest[:i]
		}
	}
	return "", ""
}

// applied is the fold's Applied hook (the fold's lock held): it queues the
// record once the hub is live, and never blocks.
func (h *hub) applied(st *domain.State, r events.Record) {
	h.qmu.Lock()
	if !h.live {
		h.qmu.Unlock()
		return
	}
	h.qmu.Unlock()
	p := pending{rec: r}
	task, node := subjectKey(r.Subject)
	switch {
	case node != "":
		p.known, p.public, p.nodes = true, true, []string{node}
	case task != "":
		if t := st.Tasks[task]; t != nil {
			p.team, p.known = t.Team, true
			if t.Node != "" {
				p.nodes = append(p.nodes, t.Node)
			}
			for _, pl := range t.Placements {
				if pl.Node != t.Node {
					p.nodes = append(p.nodes, pl.Node)
				}
			}
			if t.State.Terminal() {
				p.terminal = task
			}
		}
	}
	h.enqueue(p)
}

func (h *hub) enqueue(p pending) {
	h.qmu.Lock()
	h.queue = append(h.queue, p)
	h.qmu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// start makes the hub live at the fold's sequence seq (the CaughtUp hook).
func (h *hub) start(seq uint64) {
	h.qmu.Lock()
	defer h.qmu.Unlock()
	if h.live {
		return
	}
	h.mu.Lock()
	h.head, h.base = seq, seq
	h.mu.Unlock()
	h.live = true
	close(h.liveCh)
}

// run frames and fans out what is queued until ctx ends.
func (h *hub) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			h.mu.Lock()
			for f := range h.followers {
				f.drop("the submitter is stopping")
			}
			h.mu.Unlock()
			return
		case <-h.wake:
		}
		h.qmu.Lock()
		batch := h.queue
		h.queue = nil
		h.qmu.Unlock()
		h.process(batch)
	}
}

// process fans out one batch: each record's frame (in log order), the
// advice, then the views of the nodes the records touched.
func (h *hub) process(batch []pending) {
	if len(batch) > maxBatch {
		// The fan-out fell far behind the fold: rather than hold every
		// follower to it, they are dropped and resume from the ring and
		// the log; the records still go into the ring, in order.
		h.mu.Lock()
		for f := range h.followers {
			h.dropLocked(f, fmt.Sprintf("the stream fell %d records behind the log", len(batch)))
		}
		h.mu.Unlock()
	}
	touched := map[string]bool{}
	var ended []string
	for i := range batch {
		p := &batch[i]
		if p.advice != nil {
			if !p.known {
				// the advisor's fold was ahead of ours: the task may be
				// known by now
				p.team, p.known = h.teamOf(p.adviceFor)
			}
			h.fan(item{frame: p.advice, team: p.team}, p.known)
			continue
		}
		fr := frameRecord(p.rec, p.team, p.known)
		h.fan(item{seq: p.rec.Seq, team: p.team, public: p.public, frame: fr}, p.known || p.public)
		for _, n := range p.nodes {
			touched[n] = true
		}
		if p.terminal != "" {
			ended = append(ended, p.terminal)
		}
	}
	if len(ended) > 0 {
		h.amu.Lock()
		for _, id := range ended {
			delete(h.advice, id)
		}
		h.amu.Unlock()
	}
	if len(touched) == 0 {
		return
	}
	var frames [][]byte
	h.s.m.read(func(st *domain.State) {
		for n := range touched {
			nd := st.Nodes[n]
			if nd == nil {
				continue
			}
			b, _ := json.Marshal(StreamNode{Seq: st.Seq, NodeView: nodeView(st, n, nd)})
			// the view without its sequence decides whether it changed
			key, _ := json.Marshal(nodeView(st, n, nd))
			if bytes.Equal(h.lastNode[n], key) {
				continue
			}
			h.lastNode[n] = key
			frames = append(frames, frame(0, "node", b))
		}
	})
	for _, fr := range frames {
		h.fan(item{public: true, frame: fr}, true)
	}
}

// fan delivers it to every follower that may see it; a record (seq > 0)
// also goes into the ring and moves the head. known: the record's team is
// known (else only unscoped followers see it).
func (h *hub) fan(it item, known bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if it.seq > 0 {
		if it.seq <= h.head {
			return // folded before the hub went live, or a re-delivery
		}
		n := uint64(len(h.ring))
		i := it.seq % n
		h.ring[i], h.ringTeam[i], h.ringPub[i] = it.frame, it.team, it.public
		if !known {
			h.ringTeam[i] = "\x00" // no team sees it
		}
		h.head = it.seq
		if h.head-h.base > n {
			h.base = h.head - n
		}
	}
	for f := range h.followers {
		if !known && f.team != "" {
			continue
		}
		if !it.visible(f.team) {
			continue
		}
		if !f.push(it.frame) {
			h.dropLocked(f, fmt.Sprintf("did not keep up: %d events buffered", f.max))
		}
	}
}

func (h *hub) dropLocked(f *follower, why string) {
	if _, ok := h.followers[f]; !ok {
		return
	}
	delete(h.followers, f)
	h.count.Add(-1)
	h.dropped.Add(1)
	f.drop(why)
}

func (h *hub) remove(f *follower) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.followers[f]; ok {
		delete(h.followers, f)
		h.count.Add(-1)
	}
}

// register adds f if the ring still holds every record after `after`: it
// returns those of them f may see, and the head f goes on from. ok false:
// the ring does not reach back; read (after, base] from the log first.
func (h *hub) register(f *follower, after uint64) (backlog [][]byte, base uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		f.drop("the submitter is stopping")
		return nil, h.base, true
	}
	if after < h.base {
		return nil, h.base, false
	}
	for seq := after + 1; seq <= h.head; seq++ {
		i := seq % uint64(len(h.ring))
		if t := h.ringTeam[i]; f.team == "" || h.ringPub[i] || t == f.team {
			backlog = append(backlog, h.ring[i])
		}
	}
	h.followers[f] = struct{}{}
	h.count.Add(1)
	return backlog, h.base, true
}

// frame is one SSE event: id (when seq > 0), event and one data line.
func frame(seq uint64, event string, data []byte) []byte {
	b := make([]byte, 0, len(data)+48)
	if seq > 0 {
		b = append(b, "id: "...)
		b = strconv.AppendUint(b, seq, 10)
		b = append(b, '\n')
	}
	b = append(b, "event: "...)
	b = append(b, event...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, '\n', '\n')
}

// eventName is a record's type as an SSE event name: what the log says
// when it is a plain name, else "unknown" (a writer's type never breaks
// the framing).
func eventName(t string) string {
	if t == "" || len(t) > 64 {
		return "unknown"
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return "unknown"
		}
	}
	return t
}

// frameRecord frames a folded record.
func frameRecord(r events.Record, team string, known bool) []byte {
	task, node := subjectKey(r.Subject)
	typ := string(r.Envelope.Type)
	data := json.RawMessage("null")
	if inv, ok := r.Event.(events.Invalid); ok {
		typ = string(inv.Type)
	} else if len(r.Envelope.Data) > 0 {
		var buf bytes.Buffer
		if json.Compact(&buf, r.Envelope.Data) == nil {
			data = buf.Bytes()
		}
	}
	if typ == "" {
		typ = r.Subject[strings.LastIndexByte(r.Subject, '.')+1:]
	}
	if !known {
		team = ""
	}
	b, _ := json.Marshal(StreamRecord{Seq: r.Seq, Type: typ, Time: r.Time.UTC(), Subject: r.Subject,
		TaskID: task, Node: node, Team: team, Data: data})
	return frame(r.Seq, eventName(typ), b)
}

// onAdvice takes one advice message (the advice subscription, or the
// initial read of the advice stream).
func (h *hub) onAdvice(data []byte) {
	var a struct {
		TaskID     string `json:"task_id"`
		State      string `json:"state"`
		BasedOnSeq uint64 `json:"based_on_seq"`
	}
	if json.Unmarshal(data, &a) != nil || !events.ValidKey(a.TaskID) {
		return
	}
	var buf bytes.Buffer
	if json.Compact(&buf, data) != nil {
		return
	}
	h.s.estimates.add(data, h.s.ended)
	team, known := h.teamOf(a.TaskID)
	fr := frame(0, "advice", buf.Bytes())
	// The cache and the queue change together, in the order the advice
	// came, so that a follower's snapshot and its live events agree.
	h.amu.Lock()
	defer h.amu.Unlock()
	if old, ok := h.advice[a.TaskID]; ok && old.basedOn > a.BasedOnSeq {
		return // an older advice than the one kept
	}
	switch domain.TaskState(a.State) {
	case domain.Queued, domain.Dispatched:
		h.advice[a.TaskID] = adviceEntry{team: team, known: known, basedOn: a.BasedOnSeq, frame: fr}
	default:
		delete(h.advice, a.TaskID)
	}
	h.enqueue(pending{advice: fr, adviceFor: a.TaskID, team: team, known: known})
}

// teamOf is a task's team as the fold knows it (known false: not folded).
func (h *hub) teamOf(id string) (team string, known bool) {
	h.s.m.read(func(st *domain.State) {
		if t := st.Tasks[id]; t != nil {
			team, known = t.Team, true
		}
	})
	return team, known
}

// adviceSnapshot is the latest advice of every waiting task team may see.
func (h *hub) adviceSnapshot(team string) [][]byte {
	h.amu.Lock()
	var unknown []string
	for id, e := range h.advice {
		if !e.known {
			unknown = append(unknown, id)
		}
	}
	h.amu.Unlock()
	for _, id := range unknown { // teams the fold learnt since (never under amu: the fold's lock first)
		if tm, ok := h.teamOf(id); ok {
			h.amu.Lock()
			if e, ok := h.advice[id]; ok && !e.known {
				e.team, e.known = tm, true
				h.advice[id] = e
			}
			h.amu.Unlock()
		}
	}
	h.amu.Lock()
	defer h.amu.Unlock()
	out := make([][]byte, 0, len(h.advice))
	for _, e := range h.advice {
		if team == "" || e.known && e.team == team {
			out = append(out, e.frame)
		}
	}
	return out
}

// waitHead waits until the hub has fanned out seq, at most d, and returns
// its head then.
func (h *hub) waitHead(ctx context.Context, seq uint64, d time.Duration) uint64 {
	deadline := time.Now().Add(d)
	for {
		h.mu.Lock()
		head := h.head
		h.mu.Unlock()
		if head >= seq || time.Now().After(deadline) || ctx.Err() != nil {
			return head
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// streamAfter reads Last-Event-ID (or ?after=): the sequence to resume
// after, and whether one was given.
func streamAfter(r *http.Request) (uint64, bool, error) {
	field, v := "Last-Event-ID", r.Header.Get("Last-Event-ID")
	if v == "" {
		field, v = "after", r.URL.Query().Get("after")
	}
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, false, invalid(field, fmt.Sprintf("must be a log sequence, a whole number ≥ 0 (got %q)", v))
	}
	return n, true, nil
}

// httpEvents serves GET /v1/events.
func (s *server) httpEvents(w http.ResponseWriter, r *http.Request) {
	h := s.hub
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		return
	}
	after, resume, err := streamAfter(r)
	if err != nil {
		s.fail(w, "events", err)
		return
	}
	select {
	case <-h.liveCh:
	case <-r.Context().Done():
		return
	}
	if h.slots.Add(1) > int64(h.cfg.MaxFollowers) {
		h.slots.Add(-1)
		w.Header().Set("Retry-After", "5")
		writeError(w, &opError{Status: http.StatusServiceUnavailable,
			Msg: fmt.Sprintf("too many followers of the stream (limit %d); try again later", h.cfg.MaxFollowers)})
		return
	}
	defer h.slots.Add(-1)
	team := ""
	if c, ok := callerOf(r.Context()); ok {
		team = c.Team
	}
	rc := http.NewResponseController(w)
	// A stream outlives the server's read and write timeouts: each write
	// gets its own deadline instead, and the read side none (the server's
	// background read would otherwise end the request at ReadTimeout).
	_ = rc.SetReadDeadline(time.Time{})
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream; charset=utf-8")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	write := func(b []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		_, err := w.Write(b)
		return err
	}
	flush := func() error {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		return rc.Flush()
	}
	hello := func(seq uint64) error {
		b, _ := json.Marshal(StreamHello{Seq: seq, Resumed: resume, Team: team})
		return write(frame(0, "hello", b))
	}
	reset := func(seq uint64, why string) error {
		b, _ := json.Marshal(StreamReset{Seq: seq, Reason: why})
		return write(frame(0, "reset", b))
	}
	if _, err := w.Write([]byte("retry: 2000\n\n")); err != nil {
		return
	}

	f := newFollower(team, h.cfg.Buffer)
	defer h.remove(f)
	ctx := r.Context()

	// 1. Resume: what the ring no longer holds is read from the log, up
	// to the ring's base, until the ring holds the rest; then register.
	var backlog [][]byte
	h.mu.Lock()
	head := h.head
	h.mu.Unlock()
	if resume && after > head {
		// Another replica's fold may be ahead of this one: wait for a
		// sequence the log holds.
		if last, err := s.log.LastSeq(ctx); err == nil && after <= last {
			head = h.waitHead(ctx, after, s.syncTimeout)
		}
	}
	switch {
	case !resume:
		after = head
	case after > head:
		if err := reset(head, fmt.Sprintf("Last-Event-ID %d is past the log's last sequence %d (another log?): reload", after, head)); err != nil {
			return
		}
		after = head
	case head-after > uint64(h.cfg.MaxResume):
		if err := reset(head, fmt.Sprintf("Last-Event-ID %d is %d records behind the log (more than %d): reload", after, head-after, h.cfg.MaxResume)); err != nil {
			return
		}
		after = head
	}
	if err := hello(after); err != nil {
		return
	}
	for {
		bl, base, ok := h.register(f, after)
		if ok {
			backlog = bl
			break
		}
		n, err := s.readBack(ctx, after, base, team, write)
		if err != nil {
			s.logger.Warn().Err(err).Uint64("after", after).Msg("events: reading the log back failed")
			return
		}
		after = n
	}
	for _, b := range backlog {
		if write(b) != nil {
			return
		}
	}
	for _, b := range h.adviceSnapshot(team) {
		if write(b) != nil {
			return
		}
	}
	if flush() != nil {
		return
	}

	// 2. Live: frames as the hub hands them over, keep-alives between.
	keep := time.NewTicker(h.cfg.KeepAlive)
	defer keep.Stop()
	var buf [][]byte
	send := func() error {
		buf = f.take(buf)
		for _, b := range buf {
			if err := write(b); err != nil {
				return err
			}
		}
		clear(buf)
		return flush()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.gone:
			// Dropped: what was queued is still in order; send it and
			// end, the client resumes after the last id it got.
			if send() != nil {
				return
			}
			why, _ := f.why.Load().(string)
			_, _ = w.Write([]byte(": dropped: " + why + "\n\n"))
			_ = flush()
			return
		case <-keep.C:
			if write([]byte(": keep-alive\n\n")) != nil || flush() != nil {
				return
			}
		case <-f.sig:
			if send() != nil {
				return
			}
		}
	}
}

// readBack writes the records (after, to] team may see, read from the log
// with the submitter's reads (on JetStream, direct gets by sequence in
// batches: no consumer), and returns to.
func (s *server) readBack(ctx context.Context, after, to uint64, team string, write func([]byte) error) (uint64, error) {
	emit := func(m events.Stored) error {
		rec := events.DecodeRecord(m)
		task, node := subjectKey(rec.Subject)
		tm, known := "", node != ""
		if task != "" {
			s.m.read(func(st *domain.State) {
				if t := st.Tasks[task]; t != nil {
					tm, known = t.Team, true
				}
			})
		}
		if team != "" && (!known || node == "" && tm != team) {
			return nil
		}
		return write(frameRecord(rec, tm, known))
	}
	_, err := s.reads.Read(ctx, after+1, "", func(m events.Stored) error {
		if m.Seq > to {
			return errStop
		}
		return emit(m)
	})
	if err != nil && !errors.Is(err, errStop) {
		return after, err
	}
	return to, nil
}

// shutdown ends every follower's response and refuses new ones (the HTTP
// server's shutdown would otherwise wait for them).
func (h *hub) shutdown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for f := range h.followers {
		delete(h.followers, f)
		h.count.Add(-1)
		f.drop("the submitter is stopping")
	}
}

// adviceLoadConcurrency bounds the initial read of the advice stream.
const adviceLoadConcurrency = 8

// followAdvice subscribes to every task's advice (one subscription for
// all followers) and reads the latest advice of every waiting task from
// the advice stream, in the background. It returns the unsubscribe.
func (s *server) followAdvice(ctx context.Context, nc *nats.Conn) func() {
	sub, err := nc.Subscribe(events.AdvicePrefix+">", func(m *nats.Msg) { s.hub.onAdvice(m.Data) })
	if err != nil {
		s.logger.Warn().Err(err).Msg("events: no advice on the stream: subscribing failed")
		return func() {}
	}
	j, ok := s.log.(interface{ JetStream() jetstream.JetStream })
	if !ok {
		return func() { _ = sub.Unsubscribe() }
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		st, err := j.JetStream().Stream(lctx, events.AdviceStreamName)
		if err != nil {
			if lctx.Err() == nil {
				s.logger.Info().Err(err).Msg("events: the advice stream is not readable yet; live advice only")
			}
			return
		}
		var ids []string
		s.m.read(func(d *domain.State) {
			for id, t := range d.Tasks {
				if t.State == domain.Queued || t.State == domain.Dispatched {
					ids = append(ids, id)
				}
			}
		})
		work := make(chan string)
		var (
			wg       sync.WaitGroup
			loaded   atomic.Int64
			firstErr atomic.Value
		)
		for range adviceLoadConcurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range work {
					m, err := st.GetLastMsgForSubject(lctx, events.AdviceSubject(id))
					switch {
					case err == nil:
						s.hub.onAdvice(m.Data)
						loaded.Add(1)
					case !errors.Is(err, jetstream.ErrMsgNotFound):
						firstErr.CompareAndSwap(nil, err)
					}
				}
			}()
		}
	feed:
		for _, id := range ids {
			select {
			case work <- id:
			case <-lctx.Done():
				break feed
			}
		}
		close(work)
		wg.Wait()
		ev := s.logger.Info()
		if err, _ := firstErr.Load().(error); err != nil {
			ev = s.logger.Warn().Err(err)
		}
		ev.Int("waiting", len(ids)).Int64("loaded", loaded.Load()).Msg("events: the latest advice of the waiting tasks read")
	}()
	return func() {
		cancel()
		<-done
		_ = sub.Unsubscribe()
	}
}

// registerMetrics adds the stream's figures to reg.
func (h *hub) registerMetrics(reg *prometheus.Registry) {
	labels := prometheus.Labels{"service": "submitter"}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpuq_stream_followers", ConstLabels: labels,
			Help: "Followers of GET /v1/events now."}, func() float64 { return float64(h.count.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gpuq_stream_dropped_total", ConstLabels: labels,
			Help: "Followers of GET /v1/events dropped because they did not keep up."}, func() float64 { return float64(h.dropped.Load()) }),
	)
}
