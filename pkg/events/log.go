package events

import (
	"context"
	"errors"
	"strings"
	"time"
)

// ErrConflict is returned by Append when an expected sequence does not hold:
// another writer appended to the guarded subjects first. The caller re-reads
// and decides again; nothing was appended.
var ErrConflict = errors.New("events: expected last sequence does not match")

// Msg is one append.
type Msg struct {
	Subject string
	Data    []byte
	// MsgID de-duplicates retries inside the stream's duplicate window: a
	// second append with the same id appends nothing and acks the original.
	MsgID string
	// Expect, when set, makes the append conditional (optimistic concurrency).
	Expect *Expect
}

// Expect: the last message on subjects matching Filter (a subject, wildcards
// allowed) must have sequence LastSeq; 0 means "no such message yet".
type Expect struct {
	Filter  string
	LastSeq uint64
}

// Ack is the log's answer to an append.
type Ack struct {
	Seq       uint64
	Duplicate bool // MsgID seen before; Seq is the original's
}

// Stored is one message as the log keeps it.
type Stored struct {
	Seq     uint64
	Subject string
	Data    []byte
	Time    time.Time
}

// Log is the append-only event log port. Implementations are safe for
// concurrent use. Sequences start at 1 and have no gaps.
type Log interface {
	// Append adds one message and returns its sequence.
	Append(ctx context.Context, m Msg) (Ack, error)
	// Read calls fn for every message with sequence ≥ from whose subject
	// matches filter ("" = all), in order, up to the last message present
	// when Read was called. It returns the log's last sequence at that time.
	Read(ctx context.Context, from uint64, filter string, fn func(Stored) error) (uint64, error)
	// Follow delivers messages with sequence ≥ from matching filter, in
	// order, now and as they are appended, until ctx ends or Close.
	Follow(ctx context.Context, from uint64, filter string) (Follower, error)
	// LastSeq is the sequence of the last message in the log (0 if empty).
	LastSeq(ctx context.Context) (uint64, error)
}

// Follower yields followed messages.
type Follower interface {
	// Next blocks until the next message, ctx's end or Close.
	Next(ctx context.Context) (Stored, error)
	Close()
}

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("events: follower closed")

// Append encodes e and appends it with the given options.
func Append(ctx context.Context, l Log, e Event, m Meta, msgID string, expect *Expect) (Ack, error) {
	subj, data, _, err := Encode(e, m)
	if err != nil {
		return Ack{}, err
	}
	return l.Append(ctx, Msg{Subject: subj, Data: data, MsgID: msgID, Expect: expect})
}

// ReadAll decodes every record from seq from on and calls fn.
func ReadAll(ctx context.Context, l Log, from uint64, filter string, fn func(Record) error) (uint64, error) {
	d := newDecoder() // one intern table for the whole read
	return l.Read(ctx, from, filter, func(s Stored) error {
		r, err := d.Decode(s)
		if err != nil {
			return err
		}
		return fn(r)
	})
}

// SubjectMatch reports whether subject matches a NATS filter with * and >.
func SubjectMatch(filter, subject string) bool {
	if filter == "" || filter == ">" {
		return true
	}
	if filter == subject {
		return true
	}
	f := strings.Split(filter, ".")
	s := strings.Split(subject, ".")
	for i, ft := range f {
		if ft == ">" {
			return len(s) > i
		}
		if i >= len(s) || (ft != "*" && ft != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}

// Pump moves a follower's messages into a channel until ctx ends or the
// follower fails; the channel is then closed. Services select on it beside
// their timers and drain what has arrived before deciding.
func Pump(ctx context.Context, f Follower, buf int) <-chan Stored {
	out := make(chan Stored, buf)
	go func() {
		defer close(out)
		for {
			m, err := f.Next(ctx)
			if err != nil {
				return
			}
			select {
			case out <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
