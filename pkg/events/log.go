package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
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

// Identifier is a Log that can name itself: the same name for as long
// as it is the same log (across restarts of its servers), another for
// another log — one created afresh, or one of another account or server
// that holds a stream of the same name. An agent records it in each run
// it starts and never adopts a run recorded under another log.
type Identifier interface {
	Identity(ctx context.Context) (string, error)
}

// Getter is a Log that can read one message by its sequence.
type Getter interface {
	Get(ctx context.Context, seq uint64) (Stored, error)
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

// Batcher is a Log that can append several messages with one wait:
// AppendBatch publishes them all, in order, before it awaits any answer.
// Each message has the outcome it would have had appended alone, one after
// the other in the same order (a de-duplicated id, an expected sequence
// that does not hold: ErrConflict); results[i] is ms[i]'s.
type Batcher interface {
	AppendBatch(ctx context.Context, ms []Msg) []Result
}

// Result is the outcome of one message of a batch.
type Result struct {
	Ack Ack
	Err error
}

// AppendAll appends ms in order: with one AppendBatch when l is a Batcher,
// else with Append one at a time. Either way, every message is tried and
// results[i] is ms[i]'s outcome.
func AppendAll(ctx context.Context, l Log, ms []Msg) []Result {
	if b, ok := l.(Batcher); ok {
		return b.AppendBatch(ctx, ms)
	}
	out := make([]Result, len(ms))
	for i, m := range ms {
		out[i].Ack, out[i].Err = l.Append(ctx, m)
	}
	return out
}

// ReadAll decodes every record from seq from on and calls fn, in log
// order; it returns the first error of the read or of fn, and the log's
// last sequence as Read does. A record that does not decode never stops
// it: fn gets it as an Invalid event (DecodeRecord).
//
// A long read decodes and calls fn on a second goroutine, overlapping
// them with the read itself: after the first pipelineAfter messages, which
// are handled inline, messages go there in batches. fn is never called
// concurrently and every call has returned when ReadAll returns.
//
// While a long read runs, the process's GC target (GOGC) is raised when it
// is the default, within bounds, and set back when it ends: see readgc.go.
func ReadAll(ctx context.Context, l Log, from uint64, filter string, fn func(Record) error) (uint64, error) {
	d := newDecoder() // one intern table for the whole read
	var (
		n       int
		p       *pipeline
		cur     []Stored
		ferr    error // of the inline part
		batches int
	)
	// The raised GC target (readgc.go) is set back however the read ends,
	// a panic recovered by the caller included.
	entered := false
	defer func() {
		if entered {
			gcLeave()
		}
	}()
	last, err := l.Read(ctx, from, filter, func(s Stored) error {
		if p == nil {
			if n++; n <= pipelineAfter {
				err := fn(d.record(s))
				ferr = err
				return err
			}
			p = startPipeline(d, fn)
			cur = make([]Stored, 0, pipelineBatch)
			gcEnter()
			entered = true
		}
		if p.failed.Load() {
			return errPipeline
		}
		cur = append(cur, s)
		if len(cur) == pipelineBatch {
			p.work <- cur
			cur = p.fresh()
			if batches++; batches%readGCEvery == 0 {
				gcAdjust()
			}
		}
		return nil
	})
	if p == nil {
		if ferr != nil {
			return last, ferr
		}
		return last, err
	}
	if len(cur) > 0 {
		p.work <- cur
	}
	close(p.work)
	<-p.done
	if p.err != nil {
		return last, p.err
	}
	return last, err
}

// Pipelining: a read longer than pipelineAfter messages hands batches of
// pipelineBatch to a goroutine that decodes them and calls fn.
const (
	pipelineAfter = 1024
	pipelineBatch = 256
)

var errPipeline = errors.New("events: read stopped by a callback error")

type pipeline struct {
	work   chan []Stored
	free   chan []Stored
	done   chan struct{}
	failed atomic.Bool
	err    error // read after done
}

func startPipeline(d *decoder, fn func(Record) error) *pipeline {
	p := &pipeline{work: make(chan []Stored, 8), free: make(chan []Stored, 9), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for b := range p.work {
			if p.err == nil {
				for _, s := range b {
					if err := fn(d.record(s)); err != nil {
						p.err = err
						p.failed.Store(true)
						break
					}
				}
			}
			clear(b)
			select {
			case p.free <- b[:0]:
			default:
			}
		}
	}()
	return p
}

// fresh returns an empty batch, reusing one the goroutine is done with.
func (p *pipeline) fresh() []Stored {
	select {
	case b := <-p.free:
		return b
	default:
		return make([]Stored, 0, pipelineBatch)
	}
}

// ErrNotSubmitted is returned by ReadSubmitted when the log holds no
// submitted event of the task at or after the given sequence.
var ErrNotSubmitted = errors.New("events: no submitted event")

var errFound = errors.New("found")

// ReadSubmitted returns a task's submitted event, the first at or after
// seq (the fold's Task.SubmitSeq). The exported environment lives only
// there: the fold does not keep it, and the agent reads it when it starts
// the task.
//
// It reads the message at seq directly when the log can (Getter), which
// needs no consumer: the agent reads one per task it starts.
func ReadSubmitted(ctx context.Context, l Log, taskID string, seq uint64) (Submitted, error) {
	if g, ok := l.(Getter); ok && seq > 0 {
		if m, err := g.Get(ctx, seq); err == nil {
			if s, ok := DecodeRecord(m).Event.(Submitted); ok && s.TaskID == taskID {
				return s, nil
			}
		}
	}
	var sub Submitted
	_, err := ReadAll(ctx, l, seq, TaskPrefix+taskID+"."+string(TypeSubmitted), func(r Record) error {
		s, ok := r.Event.(Submitted)
		if !ok || s.TaskID != taskID {
			return nil
		}
		sub = s
		return errFound
	})
	switch {
	case err == errFound:
		return sub, nil
	case err != nil:
		return Submitted{}, err
	}
	return Submitted{}, fmt.Errorf("%w of task %s from sequence %d", ErrNotSubmitted, taskID, seq)
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

// LastGetter is a Log that can read the last message on one subject
// directly (no consumer, nothing kept on the server).
type LastGetter interface {
	// Last is the last message on subject (no wildcards); ok is false when
	// the log holds none.
	Last(ctx context.Context, subject string) (m Stored, ok bool, err error)
}
