package submitter

import (
	"context"
	"sync"

	"github.com/gpuq/gpuq/pkg/api"
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

// historyCache keeps the latest histories read, each for the task's last
// sequence it was read at (domain.Task.LastSeq): while the task has no
// new record, its history is answered from memory, and concurrent
// requests for it share one read (a request whose shared read failed
// reads on its own). At most historyCacheSize tasks are
// kept (an arbitrary one is dropped to make room).
type historyCache struct {
	mu sync.Mutex
	m  map[string]*historyRead
}

const historyCacheSize = 1024

type historyRead struct {
	last uint64
	done chan struct{}
	out  []api.HistoryEntry // read-only once done
	err  error
}

// get is the history of task id at its last sequence last, read with read
// when it is not kept (or being read) for that sequence. A failed read is
// not kept.
func (c *historyCache) get(id string, last uint64, read func() ([]api.HistoryEntry, error)) ([]api.HistoryEntry, error) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]*historyRead{}
	}
	h := c.m[id]
	if h != nil && h.last == last {
		c.mu.Unlock()
		<-h.done
		if h.err != nil { // the reader's own failure (its request's end): read for this one
			return read()
		}
		return h.out, nil
	}
	if h == nil && len(c.m) >= historyCacheSize {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	h = &historyRead{last: last, done: make(chan struct{})}
	c.m[id] = h
	c.mu.Unlock()
	h.out, h.err = read()
	if h.err != nil {
		c.mu.Lock()
		if c.m[id] == h {
			delete(c.m, id)
		}
		c.mu.Unlock()
	}
	close(h.done)
	return h.out, h.err
}
