package service

import (
	"context"
	"errors"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

// Appender appends a service's decisions in the background, one batch at
// a time, so that its reaction never waits on the log's acks and the fold
// goes on meanwhile: the decide/act split of a service whose next
// decision depends on the last one's outcome (the scheduler must fold its
// own dispatches before it places again).
//
// A batch is published as events.AppendAll publishes it (asynchronously,
// on one connection, in order, a bounded window in flight: see
// events.Batcher), and every message ends with a definite outcome: an ack
// (a duplicate's is the original's sequence), ErrConflict, or an error the
// log answered (Retry reports false). An outcome the log left unknown —
// an ack that timed out, a connection that closed, no responder — is
// retried with the same message id and guard, with backoff, until it is
// definite, the batch's context ends or Hold reports false: the retry of
// a message that was stored meanwhile acks as a duplicate with the
// original's sequence, so a decision that did land is never taken for one
// that did not, nor one that did not for one that did.
type Appender struct {
	log  events.Log
	wake chan<- struct{}
	// Retry reports whether an append's error leaves its outcome unknown
	// (retried) rather than refused (final). Nil: every error but
	// ErrConflict and a context's end is retried.
	Retry func(error) bool
	// Hold, when set, is asked before each retry: false ends the batch
	// with the outcomes still unknown (a scheduler that lost its lease
	// must not append).
	Hold func() bool
	// MinBackoff and MaxBackoff bound the wait between retries (defaults
	// 50 ms and 2 s).
	MinBackoff, MaxBackoff time.Duration

	done chan Appended // of the batch in flight; nil when none
}

// Appended is the outcome of one batch.
type Appended struct {
	Msgs []events.Msg
	// Results[i] is Msgs[i]'s last outcome: an ack, ErrConflict, an error
	// the log answered, or — only when the batch ended before it was
	// definite (context, Hold) — the last error, Unknown counting them.
	Results []events.Result
	// Last is the highest sequence acknowledged, duplicates included: a
	// fold that has reached it holds every message of the batch that is in
	// the log.
	Last    uint64
	Retries int // appends tried again
	Unknown int // messages whose outcome stayed unknown
}

// NewAppender returns an Appender on log; wake (optional, buffered) is
// sent to, without blocking, whenever a batch is done: a service passes
// its Hooks.Wake so that it reacts at once.
func NewAppender(log events.Log, wake chan<- struct{}) *Appender {
	return &Appender{log: log, wake: wake}
}

// Busy reports whether a batch is in flight (Take has not returned it).
func (a *Appender) Busy() bool { return a.done != nil }

// Start appends msgs in the background; it does nothing and returns
// false while another batch is in flight. Start, Busy and Take are called
// from one goroutine (the service's reaction).
func (a *Appender) Start(ctx context.Context, msgs []events.Msg) bool {
	if a.done != nil {
		return false
	}
	done := make(chan Appended, 1)
	a.done = done
	go func() {
		done <- a.append(ctx, msgs)
		if a.wake != nil {
			select {
			case a.wake <- struct{}{}:
			default:
			}
		}
	}()
	return true
}

// Take returns the outcome of the batch in flight once it is done, without
// waiting (ok false: none is done).
func (a *Appender) Take() (Appended, bool) { return a.take(closed) }

// Wait is Take that waits, until the batch is done or ctx ends.
func (a *Appender) Wait(ctx context.Context) (Appended, bool) { return a.take(ctx.Done()) }

// closed is a channel closed from the start: take with it does not wait.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// take receives the batch's outcome, waiting until it is done or stop
// closes (an outcome already there wins over a closed stop).
func (a *Appender) take(stop <-chan struct{}) (Appended, bool) {
	if a.done == nil {
		return Appended{}, false
	}
	var r Appended
	select {
	case r = <-a.done:
	default:
		select {
		case r = <-a.done:
		case <-stop:
			return Appended{}, false
		}
	}
	a.done = nil
	return r, true
}

// unknown reports whether err leaves an append's outcome unknown.
func (a *Appender) unknown(err error) bool {
	switch {
	case err == nil, errors.Is(err, events.ErrConflict):
		return false
	case a.Retry != nil:
		return a.Retry(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	}
	return true
}

// append appends msgs until every outcome is definite, or it must stop.
func (a *Appender) append(ctx context.Context, msgs []events.Msg) Appended {
	out := Appended{Msgs: msgs, Results: events.AppendAll(ctx, a.log, msgs)}
	backoff := a.MinBackoff
	if backoff <= 0 {
		backoff = 50 * time.Millisecond
	}
	maxBackoff := a.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 2 * time.Second
	}
	for {
		var again []int // indices into msgs, in order
		for i, r := range out.Results {
			if a.unknown(r.Err) {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			break
		}
		if ctx.Err() != nil || (a.Hold != nil && !a.Hold()) || !sleep(ctx, backoff) || (a.Hold != nil && !a.Hold()) {
			out.Unknown = len(again)
			break
		}
		backoff = min(2*backoff, maxBackoff)
		retry := make([]events.Msg, len(again))
		for j, i := range again {
			retry[j] = msgs[i]
		}
		out.Retries += len(retry)
		for j, r := range events.AppendAll(ctx, a.log, retry) {
			out.Results[again[j]] = r
		}
	}
	for _, r := range out.Results {
		if r.Err == nil {
			out.Last = max(out.Last, r.Ack.Seq)
		}
	}
	return out
}
