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
}

// Log is an events.Log over one JetStream stream.
type Log struct {
	nc     *nats.Conn
	js     js.JetStream
	stream string
}

var _ events.Log = (*Log)(nil)

// Open creates or updates the audit stream and returns a Log on it.
func Open(ctx context.Context, nc *nats.Conn, cfg StreamConfig) (*Log, error) {
	j, err := js.New(nc)
	if err != nil {
		return nil, err
	}
	sc := events.AuditStream(cfg.Name, cfg.Replicas, cfg.DedupeWindow)
	if cfg.MemoryStorage {
		sc.Storage = js.MemoryStorage
	}
	if _, err := j.CreateOrUpdateStream(ctx, sc); err != nil {
		return nil, fmt.Errorf("events/jetstream: stream %s: %w", sc.Name, err)
	}
	return &Log{nc: nc, js: j, stream: sc.Name}, nil
}

// JetStream returns the underlying context, for KV buckets and streams
// beside the audit log.
func (l *Log) JetStream() js.JetStream { return l.js }

// Append implements events.Log.
func (l *Log) Append(ctx context.Context, m events.Msg) (events.Ack, error) {
	msg := nats.NewMsg(m.Subject)
	msg.Data = m.Data
	if m.MsgID != "" {
		msg.Header.Set(js.MsgIDHeader, m.MsgID)
	}
	if m.Expect != nil {
		msg.Header.Set(js.ExpectedLastSubjSeqHeader, strconv.FormatUint(m.Expect.LastSeq, 10))
		msg.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", m.Expect.Filter)
	}
	ack, err := l.js.PublishMsg(ctx, msg)
	if err != nil {
		var apiErr *js.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == js.JSErrCodeStreamWrongLastSequence {
			return events.Ack{}, events.ErrConflict
		}
		return events.Ack{}, err
	}
	return events.Ack{Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// LastSeq implements events.Log.
func (l *Log) LastSeq(ctx context.Context) (uint64, error) {
	s, err := l.js.Stream(ctx, l.stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

func (l *Log) consumer(ctx context.Context, from uint64, filter string) (js.Consumer, error) {
	cfg := js.OrderedConsumerConfig{DeliverPolicy: js.DeliverAllPolicy}
	if from > 1 {
		cfg.DeliverPolicy = js.DeliverByStartSequencePolicy
		cfg.OptStartSeq = from
	}
	if filter != "" {
		cfg.FilterSubjects = []string{filter}
	}
	return l.js.OrderedConsumer(ctx, l.stream, cfg)
}

// Read implements events.Log.
func (l *Log) Read(ctx context.Context, from uint64, filter string, fn func(events.Stored) error) (uint64, error) {
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
	for {
		m, err := nextCtx(ctx, it)
		if err != nil {
			return last, err
		}
		meta, err := m.Metadata()
		if err != nil {
			return last, err
		}
		seq := meta.Sequence.Stream
		if seq > last {
			return last, nil
		}
		if err := fn(events.Stored{Seq: seq, Subject: m.Subject(), Data: m.Data(), Time: meta.Timestamp}); err != nil {
			return last, err
		}
		if seq == last || meta.NumPending == 0 {
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
	meta, err := m.Metadata()
	if err != nil {
		return events.Stored{}, err
	}
	return events.Stored{Seq: meta.Sequence.Stream, Subject: m.Subject(), Data: m.Data(), Time: meta.Timestamp}, nil
}

func (f *follower) Close() { f.it.Stop() }

// Attach returns a Log on an existing stream without creating or changing
// it: what clients (the CLI, jobs) use.
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
	return &Log{nc: nc, js: j, stream: stream}, nil
}
