// Package jetstream is the events.Log adapter over NATS JetStream (the
// jetstream package of nats.go). Appends are synchronous publishes that wait
// for the stream's ack; message ids use JetStream's Nats-Msg-Id
// de-duplication; expected sequences use
// Nats-Expected-Last-Subject-Sequence(-Subject). Reads and follows use
// ordered consumers, which recover from gaps on their own.
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/events"
)

// StreamConfig describes the audit stream.
type StreamConfig struct {
	Name          string        // default events.StreamName
	Replicas      int           // default 1; 3 in production
	DedupeWindow  time.Duration // default events.DefaultDedupeWindow
	MemoryStorage bool          // tests only; production is file storage
	// Direct makes the Log read and follow by direct gets, creating no
	// consumer (see Direct); otherwise it uses ordered consumers.
	Direct bool
}

// Log is an events.Log over one JetStream stream.
type Log struct {
	nc     *nats.Conn
	js     js.JetStream
	stream string
	// direct: reads and follows by direct gets, no consumer (direct.go).
	direct bool
	// directOK caches whether the stream allows direct gets: 0 not known,
	// 1 yes, negative: no, as of that Unix time in ns, negated. Shared by
	// a Log and its Direct copies.
	directOK *atomic.Int64
}

var (
	_ events.Log        = (*Log)(nil)
	_ events.Identifier = (*Log)(nil)
	_ events.Batcher    = (*Log)(nil)
	_ events.Getter     = (*Log)(nil)
	_ events.LastGetter = (*Log)(nil)
)

// Open creates the audit stream, or updates it where its configuration
// differs, and returns a Log on it. A stream that already has the
// configuration is left alone (no update), so a user that may only create
// it can open it.
func Open(ctx context.Context, nc *nats.Conn, cfg StreamConfig) (*Log, error) {
	j, err := js.New(nc)
	if err != nil {
		return nil, err
	}
	sc := events.AuditStream(cfg.Name, cfg.Replicas, cfg.DedupeWindow)
	if cfg.MemoryStorage {
		sc.Storage = js.MemoryStorage
	}
	if _, err := events.EnsureStream(ctx, ensuring{j}, sc); err != nil {
		return nil, fmt.Errorf("events/jetstream: %w", err)
	}
	return &Log{nc: nc, js: ensuring{j}, stream: sc.Name, direct: cfg.Direct, directOK: new(atomic.Int64)}, nil
}

// JetStream returns the underlying context, for KV buckets and streams
// beside the audit log.
func (l *Log) JetStream() js.JetStream { return l.js }

// Append implements events.Log.
func (l *Log) Append(ctx context.Context, m events.Msg) (events.Ack, error) {
	ack, err := l.js.PublishMsg(ctx, natsMsg(m))
	if err != nil {
		return events.Ack{}, appendErr(err)
	}
	return events.Ack{Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// natsMsg is m with its message id and expectation as JetStream headers.
func natsMsg(m events.Msg) *nats.Msg {
	msg := nats.NewMsg(m.Subject)
	msg.Data = m.Data
	if m.MsgID != "" {
		msg.Header.Set(js.MsgIDHeader, m.MsgID)
	}
	if m.Expect != nil {
		msg.Header.Set(js.ExpectedLastSubjSeqHeader, strconv.FormatUint(m.Expect.LastSeq, 10))
		msg.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", m.Expect.Filter)
	}
	return msg
}

// appendErr maps a refused expectation to events.ErrConflict.
func appendErr(err error) error {
	if WrongLastSequence(err) {
		return events.ErrConflict
	}
	return err
}

// wrongLastSequenceConstant is nats-server's other code for a refused
// expected sequence ("wrong last sequence" without the number; seen on
// replicated streams under load).
const wrongLastSequenceConstant js.ErrorCode = 10164

// WrongLastSequence reports whether err is JetStream refusing a publish
// for its expected last sequence, under either of the server's codes.
func WrongLastSequence(err error) bool {
	var apiErr *js.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == js.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == wrongLastSequenceConstant)
}

// batchChunk bounds the publishes of AppendBatch in flight, well under
// nats.go's 4,000 outstanding async publishes per context.
const batchChunk = 512

// ackTimeout bounds the wait for a chunk's acks when ctx has no deadline,
// as nats.go bounds a synchronous publish.
const ackTimeout = 5 * time.Second

// AppendBatch implements events.Batcher: the messages are published
// asynchronously on the Log's connection, up to batchChunk at a time, and
// then their acks awaited. One connection keeps their order, so each
// message is stored (or refused) as if appended alone after the previous.
func (l *Log) AppendBatch(ctx context.Context, ms []events.Msg) []events.Result {
	out := make([]events.Result, len(ms))
	futures := make([]js.PubAckFuture, 0, min(len(ms), batchChunk))
	for from := 0; from < len(ms); from += batchChunk {
		chunk := ms[from:min(from+batchChunk, len(ms))]
		futures = futures[:0]
		for i, m := range chunk {
			f, err := l.js.PublishMsgAsync(natsMsg(m))
			if err != nil {
				out[from+i].Err = err
			}
			futures = append(futures, f) // nil when the publish failed
		}
		l.awaitAcks(ctx, futures, out[from:])
	}
	return out
}

// awaitAcks fills out[i] from futures[i] (nil: the publish failed, out[i]
// holds why).
func (l *Log) awaitAcks(ctx context.Context, futures []js.PubAckFuture, out []events.Result) {
	wait := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, ackTimeout)
		defer cancel()
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			out[i].Ack = events.Ack{Seq: ack.Sequence, Duplicate: ack.Duplicate}
		case err := <-f.Err():
			out[i].Err = appendErr(err)
		case <-wait.Done():
			out[i].Err = ctx.Err()
			if out[i].Err == nil {
				out[i].Err = fmt.Errorf("events/jetstream: %w", js.ErrAsyncPublishTimeout)
			}
		}
	}
}

// LastSeq implements events.Log: one stream info request (the info that
// Stream fetches is current; asking Info again was a second round trip).
func (l *Log) LastSeq(ctx context.Context) (uint64, error) {
	s, err := l.js.Stream(ctx, l.stream)
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().State.LastSeq, nil
}

// Identity implements events.Identifier: the stream's name and the
// instant the server created it (which JetStream keeps with the stream,
// across restarts): a stream deleted and created again, or one of the
// same name in another account — what the same store directory holds for
// another auth mode — has another.
func (l *Log) Identity(ctx context.Context) (string, error) {
	s, err := l.js.Stream(ctx, l.stream)
	if err != nil {
		return "", err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return "", err
	}
	return l.stream + "@" + info.Created.UTC().Format(time.RFC3339Nano), nil
}

func (l *Log) consumer(ctx context.Context, from uint64, filter string) (js.Consumer, error) {
	// An ordered consumer is ephemeral: a live one keeps itself active
	// with heartbeats, and one a finished read leaves behind is removed by
	// the server after InactiveThreshold. Its default (5 min) let a busy
	// agent's reads pile up to the server's 1,000 consumers per stream.
	cfg := js.OrderedConsumerConfig{DeliverPolicy: js.DeliverAllPolicy, InactiveThreshold: 10 * time.Second}
	if from > 1 {
		cfg.DeliverPolicy = js.DeliverByStartSequencePolicy
		cfg.OptStartSeq = from
	}
	if filter != "" {
		cfg.FilterSubjects = []string{filter}
	}
	return l.js.OrderedConsumer(ctx, l.stream, cfg)
}

// Get implements events.Getter: the message at seq, read directly from
// the stream (no consumer).
func (l *Log) Get(ctx context.Context, seq uint64) (events.Stored, error) {
	st, err := l.js.Stream(ctx, l.stream)
	if err != nil {
		return events.Stored{}, err
	}
	m, err := st.GetMsg(ctx, seq)
	if err != nil {
		return events.Stored{}, err
	}
	return events.Stored{Seq: m.Sequence, Subject: m.Subject, Data: m.Data, Time: m.Time}, nil
}

// ReadStallAfter is how long Read waits for a message the stream holds
// before it fails (a variable for tests).
var ReadStallAfter = 30 * time.Second

// Read implements events.Log.
func (l *Log) Read(ctx context.Context, from uint64, filter string, fn func(events.Stored) error) (uint64, error) {
	if l.direct {
		return l.readDirect(ctx, from, filter, fn)
	}
	last, err := l.LastSeq(ctx)
	if err != nil {
		return 0, err
	}
	if from == 0 {
		from = 1
	}
	if last < from {
		return last, nil
	}
	c, err := l.consumer(ctx, from, filter)
	if err != nil {
		return 0, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, err
	}
	if info.NumPending == 0 {
		return last, nil
	}
	it, err := c.Messages(js.PullMaxMessages(4096))
	if err != nil {
		return 0, err
	}
	defer it.Stop()
	// A read waits only for messages the stream holds: a wait of
	// ReadStallAfter is a consumer gone silent (see Fold's watchdog in
	// pkg/service), not a slow log, and fails the read, which its caller
	// retries, rather than hanging it.
	// The watchdog's view costs the loop two atomic stores a message.
	var (
		delivered atomic.Uint64 // messages Next returned
		inNext    atomic.Bool   // the loop waits in Next
	)
	stalled := make(chan struct{})
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		const ticks = 4 // quiet ticks in Next that make a stall
		t := time.NewTicker(ReadStallAfter / ticks)
		defer t.Stop()
		quiet, prev := 0, uint64(0)
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			cur := delivered.Load()
			if inNext.Load() && cur == prev {
				quiet++
			} else {
				quiet = 0
			}
			prev = cur
			if quiet >= ticks {
				close(stalled)
				it.Stop()
				return
			}
		}
	}()
	var seq uint64 // the last delivered
	for {
		inNext.Store(true)
		m, err := nextCtx(ctx, it)
		inNext.Store(false)
		delivered.Add(1)
		if err != nil {
			select {
			case <-stalled:
				return last, fmt.Errorf("events/jetstream: reading %s stalled after seq %d of %d: nothing delivered for %s", l.stream, seq, last, ReadStallAfter)
			default:
			}
			return last, err
		}
		meta, err := metadata(m)
		if err != nil {
			return last, err
		}
		seq = meta.seq
		if seq > last {
			return last, nil
		}
		if err := fn(events.Stored{Seq: seq, Subject: m.Subject(), Data: m.Data(), Time: meta.time}); err != nil {
			return last, err
		}
		if seq == last || meta.pending == 0 {
			return last, nil
		}
	}
}

// nextCtx waits for the next message or the end of ctx.
func nextCtx(ctx context.Context, it js.MessagesContext) (js.Msg, error) {
	if ctx.Done() == nil {
		return it.Next()
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	m, err := it.Next()
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return m, err
}

// Follow implements events.Log.
func (l *Log) Follow(ctx context.Context, from uint64, filter string) (events.Follower, error) {
	if l.direct {
		return l.followDirect(from, filter)
	}
	c, err := l.consumer(ctx, from, filter)
	if err != nil {
		return nil, err
	}
	it, err := c.Messages(js.PullMaxMessages(4096))
	if err != nil {
		return nil, err
	}
	return &follower{it: it}, nil
}

type follower struct {
	it     js.MessagesContext
	closed bool
}

func (f *follower) Next(ctx context.Context) (events.Stored, error) {
	m, err := nextCtx(ctx, f.it)
	if err != nil {
		if errors.Is(err, js.ErrMsgIteratorClosed) && ctx.Err() == nil {
			return events.Stored{}, events.ErrClosed
		}
		return events.Stored{}, err
	}
	meta, err := metadata(m)
	if err != nil {
		return events.Stored{}, err
	}
	return events.Stored{Seq: meta.seq, Subject: m.Subject(), Data: m.Data(), Time: meta.time}, nil
}

// msgMeta is what Read and Follow use of a message's metadata.
type msgMeta struct {
	seq, pending uint64
	time         time.Time
}

// metadata is m.Metadata()'s stream sequence, timestamp and pending count,
// read from the ack reply subject without allocating (Metadata allocates
// its result: one allocation per message read). Anything ackMeta does not
// recognise goes to Metadata, which reports what is wrong.
func metadata(m js.Msg) (msgMeta, error) {
	if seq, ts, pending, ok := ackMeta(m.Reply()); ok {
		return msgMeta{seq: seq, pending: pending, time: time.Unix(0, ts)}, nil
	}
	md, err := m.Metadata()
	if err != nil {
		return msgMeta{}, err
	}
	return msgMeta{seq: md.Sequence.Stream, pending: md.NumPending, time: md.Timestamp}, nil
}

// ackMeta parses a JetStream ack reply subject as nats.go's Metadata does:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>                                  (9 tokens)
//	$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>[.<token>…] (11 or more)
//
// and returns the stream sequence, the timestamp in Unix nanoseconds and
// the pending count, as Metadata reads them (the timestamp converted as it
// converts it). ok is false for any other shape, and for a number token
// that is empty, not all digits or longer than 19 digits (where Metadata
// reads 0 or overflows): Metadata then decides.
func ackMeta(reply string) (seq uint64, ts int64, pending uint64, ok bool) {
	const prefix = "$JS.ACK."
	if len(reply) < len(prefix) || reply[:len(prefix)] != prefix {
		return 0, 0, 0, false
	}
	var tok [12]string // the first 12 tokens
	n, start := 0, 0
	for i := 0; i <= len(reply); i++ {
		if i == len(reply) || reply[i] == '.' {
			if n < len(tok) {
				tok[n] = reply[start:i]
			}
			n++
			start = i + 1
		}
	}
	base := 0 // where <stream> is, less 2
	switch {
	case n == 9:
	case n >= 11:
		base = 2
	default:
		return 0, 0, 0, false
	}
	var okS, okT, okP bool
	seq, okS = ackNum(tok[base+5])
	t, okT := ackNum(tok[base+7])
	pending, okP = ackNum(tok[base+8])
	return seq, int64(t), pending, okS && okT && okP
}

// ackNum parses a token of 1 to 19 decimal digits (no uint64 overflow).
func ackNum(s string) (uint64, bool) {
	if len(s) == 0 || len(s) > 19 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

func (f *follower) Close() { f.it.Stop() }

// Attach returns a Log on an existing stream without creating or changing
// it, reading by direct gets (no consumer): what clients (the CLI, the
// auditor) use.
func Attach(ctx context.Context, nc *nats.Conn, stream string) (*Log, error) {
	if stream == "" {
		stream = events.StreamName
	}
	j, err := js.New(nc)
	if err != nil {
		return nil, err
	}
	if _, err := j.Stream(ctx, stream); err != nil {
		return nil, fmt.Errorf("event stream %s: %w (is gpuq running on this NATS server?)", stream, err)
	}
	return &Log{nc: nc, js: ensuring{j}, stream: stream, direct: true, directOK: new(atomic.Int64)}, nil
}
