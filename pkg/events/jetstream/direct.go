package jetstream

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/events"
)

// Direct reads: a Log in direct mode (Attach, Log.Direct) reads and
// follows the stream with direct gets by sequence ($JS.API.DIRECT.GET,
// batched) and creates no consumer, so it leaves no state on the server
// and cannot fill the stream's consumer limit: what readers (the CLI, the
// auditor, agents, the submitter's per-request reads) use. A stream
// without AllowDirect (made by an older gpuq and not updated yet) is read
// one message at a time through $JS.API.STREAM.MSG.GET, which also
// creates nothing.

// directBatch is how many messages one direct get asks for, and
// directMaxBytes how many bytes at most (the server stops a batch early at
// that many).
const (
	directBatch    = 1024
	directMaxBytes = 4 << 20
)

// DirectPoll is how often a direct follower asks for new messages when
// nothing woke it (a variable for tests). Wake-ups come from a core NATS
// subscription to the followed subjects, where the credential may
// subscribe; without one, a follower sees a new message within DirectPoll.
var DirectPoll = 250 * time.Millisecond

// directTimeout bounds one direct get's wait for its answer.
const directTimeout = 10 * time.Second

// Direct returns a Log on the same stream and connection whose reads and
// follows create no consumer (see above). Appends are unchanged.
func (l *Log) Direct() *Log {
	d := *l
	d.direct = true
	return &d
}

// IsDirect reports whether l reads by direct gets.
func (l *Log) IsDirect() bool { return l.direct }

// allowDirect is whether the stream answers direct gets. A yes is kept
// until a direct get finds no responder (the admin turned them off); a no
// for a minute (the admin may turn them on: `nats stream edit`).
func (l *Log) allowDirect(ctx context.Context) (bool, error) {
	switch v := l.directOK.Load(); {
	case v == 1:
		return true, nil
	case v < 0 && time.Since(time.Unix(0, -v)) < time.Minute:
		return false, nil
	}
	s, err := l.js.Stream(ctx, l.stream)
	if err != nil {
		return false, err
	}
	ok := s.CachedInfo().Config.AllowDirect
	if ok {
		l.directOK.Store(1)
	} else {
		l.directOK.Store(-time.Now().UnixNano())
	}
	return ok, nil
}

// getRequest is the JetStream message get request (direct or not).
type getRequest struct {
	Seq      uint64 `json:"seq,omitempty"`
	LastFor  string `json:"last_by_subj,omitempty"`
	NextFor  string `json:"next_by_subj,omitempty"`
	Batch    int    `json:"batch,omitempty"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}

// nextFor is the next_by_subj of a filter: "" for every subject.
func nextFor(filter string) string {
	if filter == ">" {
		return ""
	}
	return filter
}

// fetch reads the messages from seq from on that match filter, at most
// directBatch of them, and calls fn for each in order. It returns how many
// it delivered (0: none at or after from).
func (l *Log) fetch(ctx context.Context, from uint64, filter string, fn func(events.Stored) error) (int, error) {
	if from == 0 {
		from = 1
	}
	ok, err := l.allowDirect(ctx)
	if err != nil {
		return 0, err
	}
	if !ok {
		m, found, err := l.msgGet(ctx, getRequest{Seq: from, NextFor: nextFor(filter)})
		if err != nil || !found {
			return 0, err
		}
		return 1, fn(m)
	}
	req, _ := json.Marshal(getRequest{Seq: from, NextFor: nextFor(filter), Batch: directBatch, MaxBytes: directMaxBytes})
	// A synchronous subscription without pending limits queues the whole
	// batch (at most directMaxBytes) however slow fn is: a channel
	// subscription would drop what does not fit, leaving a gap.
	inbox := l.nc.NewInbox()
	sub, err := l.nc.SubscribeSync(inbox)
	if err != nil {
		return 0, err
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return 0, err
	}
	if err := l.nc.PublishRequest("$JS.API.DIRECT.GET."+l.stream, inbox, req); err != nil {
		return 0, err
	}
	n := 0
	for {
		wctx, cancel := context.WithTimeout(ctx, directTimeout)
		m, err := sub.NextMsgWithContext(wctx)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return n, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			return n, fmt.Errorf("events/jetstream: direct get of %s from %d: no answer in %s", l.stream, from, directTimeout)
		case err != nil:
			return n, err
		}
		switch status := m.Header.Get("Status"); status {
		case "":
		case "204", "404": // end of batch; nothing at or after from
			return n, nil
		case "503": // no responders: direct gets were turned off
			l.directOK.Store(0)
			return n, fmt.Errorf("events/jetstream: direct get of %s from %d: no responders (direct gets turned off?)", l.stream, from)
		default:
			return n, fmt.Errorf("events/jetstream: direct get of %s from %d: status %s %s", l.stream, from, status, m.Header.Get("Description"))
		}
		s, err := directStored(m)
		if err != nil {
			return n, err
		}
		n++
		if err := fn(s); err != nil {
			return n, err
		}
	}
}

// directStored is the message a direct get answered, from its headers.
func directStored(m *nats.Msg) (events.Stored, error) {
	seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return events.Stored{}, fmt.Errorf("events/jetstream: direct get answer without a sequence: %w", err)
	}
	ts, err := time.Parse(time.RFC3339Nano, m.Header.Get("Nats-Time-Stamp"))
	if err != nil {
		return events.Stored{}, fmt.Errorf("events/jetstream: direct get answer of %d without a time: %w", seq, err)
	}
	return events.Stored{Seq: seq, Subject: m.Header.Get("Nats-Subject"), Data: m.Data, Time: ts}, nil
}

// msgGet is one message get through the stream's API subject (no
// AllowDirect needed): found is false when there is no such message.
func (l *Log) msgGet(ctx context.Context, r getRequest) (events.Stored, bool, error) {
	req, _ := json.Marshal(r)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, directTimeout)
		defer cancel()
	}
	resp, err := l.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+l.stream, req)
	if err != nil {
		return events.Stored{}, false, err
	}
	var out struct {
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Data    string    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &out); err != nil {
		return events.Stored{}, false, err
	}
	if out.Error != nil {
		if out.Error.Code == 404 {
			return events.Stored{}, false, nil
		}
		return events.Stored{}, false, fmt.Errorf("events/jetstream: message get of %s: %s", l.stream, out.Error.Description)
	}
	if out.Message == nil {
		return events.Stored{}, false, nil
	}
	data, err := base64.StdEncoding.DecodeString(out.Message.Data)
	if err != nil {
		return events.Stored{}, false, err
	}
	return events.Stored{Seq: out.Message.Seq, Subject: out.Message.Subject, Data: data, Time: out.Message.Time}, true, nil
}

// readDirect is Read by direct gets.
func (l *Log) readDirect(ctx context.Context, from uint64, filter string, fn func(events.Stored) error) (uint64, error) {
	last, err := l.LastSeq(ctx)
	if err != nil {
		return 0, err
	}
	return last, l.ReadTo(ctx, from, last, filter, fn)
}

// ReadTo is Read up to sequence last, which the caller knows (the log
// is not asked for its last sequence), always by direct gets: what a
// service reading for a request uses, which must create no consumer.
func (l *Log) ReadTo(ctx context.Context, from, last uint64, filter string, fn func(events.Stored) error) error {
	if from == 0 {
		from = 1
	}
	errPast := errors.New("past last")
	for from <= last {
		n, err := l.fetch(ctx, from, filter, func(m events.Stored) error {
			if m.Seq > last {
				return errPast
			}
			from = m.Seq + 1
			return fn(m)
		})
		switch {
		case errors.Is(err, errPast):
			return nil
		case err != nil:
			return err
		case n == 0:
			return nil
		}
	}
	return nil
}

// Last implements events.LastGetter: the last message on subject (no
// wildcards), read directly; ok is false when there is none.
func (l *Log) Last(ctx context.Context, subject string) (events.Stored, bool, error) {
	ok, err := l.allowDirect(ctx)
	if err != nil {
		return events.Stored{}, false, err
	}
	if !ok {
		return l.msgGet(ctx, getRequest{LastFor: subject})
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, directTimeout)
		defer cancel()
	}
	req, _ := json.Marshal(getRequest{LastFor: subject})
	m, err := l.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+l.stream, req)
	if errors.Is(err, nats.ErrNoResponders) {
		l.directOK.Store(0) // direct gets were turned off: look again next time
	}
	if err != nil {
		return events.Stored{}, false, err
	}
	switch status := m.Header.Get("Status"); status {
	case "":
	case "404":
		return events.Stored{}, false, nil
	default:
		return events.Stored{}, false, fmt.Errorf("events/jetstream: direct get of the last %s: status %s %s", subject, status, m.Header.Get("Description"))
	}
	s, err := directStored(m)
	return s, err == nil, err
}

// directFollower follows by direct gets: it asks for what follows the last
// message delivered, and when there is nothing, waits for a wake-up (a
// message on a followed subject, seen by a core subscription) or
// DirectPoll.
type directFollower struct {
	l      *Log
	filter string
	next   uint64
	buf    []events.Stored
	wake   chan struct{}
	sub    *nats.Subscription
	once   sync.Once
	closed chan struct{}
	ended  context.Context // done once closed
	end    context.CancelFunc
}

func (l *Log) followDirect(from uint64, filter string) (events.Follower, error) {
	if from == 0 {
		from = 1
	}
	f := &directFollower{l: l, filter: filter, next: from, wake: make(chan struct{}, 1), closed: make(chan struct{})}
	f.ended, f.end = context.WithCancel(context.Background())
	subj := filter
	if subj == "" {
		subj = ">"
	}
	// Best effort: a credential that may not subscribe to the subjects
	// polls instead (the server refuses the subscription asynchronously).
	if subj != ">" {
		f.sub, _ = l.nc.Subscribe(subj, func(*nats.Msg) { f.poke() })
	} else {
		f.sub, _ = l.nc.Subscribe(events.TaskPrefix+">", func(*nats.Msg) { f.poke() })
		if s2, err := l.nc.Subscribe(events.NodePrefix+">", func(*nats.Msg) { f.poke() }); err == nil {
			go func() { <-f.closed; _ = s2.Unsubscribe() }()
		}
	}
	return f, nil
}

func (f *directFollower) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// wakeRetries are the waits after a wake-up that found nothing new yet
// (the core message can arrive before the stream has stored it).
var wakeRetries = []time.Duration{2 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond}

func (f *directFollower) Next(ctx context.Context) (events.Stored, error) {
	retry := len(wakeRetries)
	for {
		if len(f.buf) > 0 {
			m := f.buf[0]
			f.buf = f.buf[1:]
			return m, nil
		}
		select {
		case <-f.closed:
			return events.Stored{}, events.ErrClosed
		default:
		}
		f.buf = f.buf[:0]
		// A Close (the runtime's stall watchdog) ends a get under way.
		fctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(f.ended, cancel)
		n, err := f.l.fetch(fctx, f.next, f.filter, func(m events.Stored) error {
			f.buf = append(f.buf, m)
			f.next = m.Seq + 1
			return nil
		})
		stop()
		cancel()
		if err != nil && n == 0 {
			switch {
			case ctx.Err() != nil:
				return events.Stored{}, ctx.Err()
			case f.ended.Err() != nil:
				return events.Stored{}, events.ErrClosed
			}
			return events.Stored{}, err
		}
		if n > 0 {
			continue
		}
		wait := DirectPoll
		if retry < len(wakeRetries) {
			wait = wakeRetries[retry]
			retry++
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return events.Stored{}, ctx.Err()
		case <-f.closed:
			t.Stop()
			return events.Stored{}, events.ErrClosed
		case <-f.wake:
			retry = 0
		case <-t.C:
		}
		t.Stop()
	}
}

func (f *directFollower) Close() {
	f.once.Do(func() {
		close(f.closed)
		f.end()
		if f.sub != nil {
			_ = f.sub.Unsubscribe()
		}
	})
}
