// Package memlog is an in-memory events.Log: the same semantics as the
// JetStream log (ordering, de-duplication by message id, expected-sequence
// conflicts, follow), for tests and for the simulator's virtual time.
package memlog

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/pkg/events"
)

// Log keeps every message in memory. The duplicate window is unbounded:
// a message id is remembered for the life of the Log.
type Log struct {
	mu     sync.Mutex
	msgs   []events.Stored
	ids    map[string]uint64
	notify chan struct{}
	// last is the last sequence under each "prefix.>" filter (every
	// strict prefix of every subject stored): an expected-sequence check
	// on such a filter is a lookup, not a scan back through the log.
	last map[string]uint64
	// Now stamps stored messages; the simulator sets it to virtual time.
	Now func() time.Time
	id  string
}

var (
	_ events.Log        = (*Log)(nil)
	_ events.Identifier = (*Log)(nil)
)

// New returns an empty log.
func New() *Log {
	return &Log{ids: map[string]uint64{}, last: map[string]uint64{}, notify: make(chan struct{}), Now: time.Now, id: "memlog@" + uuid.NewString()}
}

// Identity implements events.Identifier: a name minted by New.
func (l *Log) Identity(context.Context) (string, error) { return l.id, nil }

// Append implements events.Log.
func (l *Log) Append(ctx context.Context, m events.Msg) (events.Ack, error) {
	if err := ctx.Err(); err != nil {
		return events.Ack{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if m.MsgID != "" {
		if seq, ok := l.ids[m.MsgID]; ok {
			return events.Ack{Seq: seq, Duplicate: true}, nil
		}
	}
	if m.Expect != nil {
		if l.lastSeq(m.Expect.Filter) != m.Expect.LastSeq {
			return events.Ack{}, events.ErrConflict
		}
	}
	seq := uint64(len(l.msgs)) + 1
	data := append([]byte(nil), m.Data...)
	l.msgs = append(l.msgs, events.Stored{Seq: seq, Subject: m.Subject, Data: data, Time: l.Now()})
	if m.MsgID != "" {
		l.ids[m.MsgID] = seq
	}
	for i := 0; i < len(m.Subject); i++ {
		if m.Subject[i] == '.' {
			l.last[m.Subject[:i+1]+">"] = seq
		}
	}
	close(l.notify)
	l.notify = make(chan struct{})
	return events.Ack{Seq: seq}, nil
}

// lastSeq is the last sequence whose subject matches filter (0: none).
func (l *Log) lastSeq(filter string) uint64 {
	if n := len(filter); n >= 2 && filter[n-2:] == ".>" && !strings.ContainsAny(filter[:n-2], "*>") {
		return l.last[filter]
	}
	for i := len(l.msgs) - 1; i >= 0; i-- {
		if events.SubjectMatch(filter, l.msgs[i].Subject) {
			return l.msgs[i].Seq
		}
	}
	return 0
}

// Get implements events.Getter.
func (l *Log) Get(ctx context.Context, seq uint64) (events.Stored, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq == 0 || seq > uint64(len(l.msgs)) {
		return events.Stored{}, fmt.Errorf("memlog: no message %d", seq)
	}
	return l.msgs[seq-1], nil
}

// Read implements events.Log.
func (l *Log) Read(ctx context.Context, from uint64, filter string, fn func(events.Stored) error) (uint64, error) {
	l.mu.Lock()
	msgs := l.msgs
	l.mu.Unlock()
	last := uint64(len(msgs))
	if from == 0 {
		from = 1
	}
	for i := from; i <= last; i++ {
		if err := ctx.Err(); err != nil {
			return last, err
		}
		m := msgs[i-1]
		if !events.SubjectMatch(filter, m.Subject) {
			continue
		}
		if err := fn(m); err != nil {
			return last, err
		}
	}
	return last, nil
}

// LastSeq implements events.Log.
func (l *Log) LastSeq(context.Context) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return uint64(len(l.msgs)), nil
}

// Follow implements events.Log.
func (l *Log) Follow(ctx context.Context, from uint64, filter string) (events.Follower, error) {
	if from == 0 {
		from = 1
	}
	return &follower{l: l, next: from, filter: filter, done: make(chan struct{})}, nil
}

type follower struct {
	l      *Log
	next   uint64
	filter string
	once   sync.Once
	done   chan struct{}
}

func (f *follower) Next(ctx context.Context) (events.Stored, error) {
	for {
		f.l.mu.Lock()
		for f.next <= uint64(len(f.l.msgs)) {
			m := f.l.msgs[f.next-1]
			f.next++
			if events.SubjectMatch(f.filter, m.Subject) {
				f.l.mu.Unlock()
				return m, nil
			}
		}
		wait := f.l.notify
		f.l.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return events.Stored{}, ctx.Err()
		case <-f.done:
			return events.Stored{}, events.ErrClosed
		}
	}
}

func (f *follower) Close() { f.once.Do(func() { close(f.done) }) }
