package submitter

import (
	"context"
	"sync"

	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
)

// Reads that answer requests (show's log location, history, a duplicate
// submission's original) never open a consumer: they read the log by
// direct gets (pkg/events/jetstream direct.go), so a thousand pollers
// cost the server no state and cannot reach its consumer limit. The fold
// itself follows with the service's one ordered consumer.

// directReads is log reading by direct gets where it is a JetStream log.
func directReads(log events.Log) events.Log {
	if j, ok := log.(*jetstream.Log); ok {
		return j.Direct()
	}
	return log
}

// lastSeqFlight shares the log's last sequence among concurrent requests:
// a request waits for the next ask that starts after it arrived (so it
// still sees every write acknowledged before it: read-your-writes), and
// all the requests that arrive during one ask share the next. However
// many poll, the log is asked at most once per round trip.
type lastSeqFlight struct {
	mu      sync.Mutex
	running *seqAsk // the ask under way
	next    *seqAsk // the ask that starts when running ends
}

type seqAsk struct {
	done chan struct{}
	seq  uint64
	err  error
}

func (f *lastSeqFlight) get(ctx context.Context, log events.Log) (uint64, error) {
	f.mu.Lock()
	var a *seqAsk
	switch {
	case f.running == nil:
		a = &seqAsk{done: make(chan struct{})}
		f.running = a
		go f.ask(a, log)
	case f.next == nil:
		f.next = &seqAsk{done: make(chan struct{})}
		a = f.next
	default:
		a = f.next
	}
	f.mu.Unlock()
	select {
	case <-a.done:
		return a.seq, a.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// ask asks the log for a, then starts the ask that waited for it.
func (f *lastSeqFlight) ask(a *seqAsk, log events.Log) {
	for a != nil {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		a.seq, a.err = log.LastSeq(ctx)
		cancel()
		close(a.done)
		f.mu.Lock()
		a, f.next = f.next, nil
		f.running = a
		f.mu.Unlock()
	}
}
