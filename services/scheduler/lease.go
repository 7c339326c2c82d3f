package scheduler

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/events"
)

const leaseKey = "scheduler"

// lease is the leader lease: a key in a KV bucket whose entries expire
// after the TTL. The holder creates the key and renews it with Update on
// its revision; a standby's Create fails until the key has expired.
//
// The lease's epoch is the key's revision when this instance created it:
// the bucket's revisions only grow, so every new holder has a larger
// epoch than every earlier one. Decisions carry it and the fold refuses a
// decision of an older epoch than the newest it has seen (fencing).
type lease struct {
	kv       jetstream.KeyValue
	instance string
	ttl      time.Duration
	cancel   context.CancelFunc
	done     chan struct{}
	epoch    uint64
	renewed  atomic.Int64 // monotonic ns (since start) of the last renewal
	start    time.Time
}

func newLease(ctx context.Context, js jetstream.JetStream, instance string, ttl time.Duration, replicas int) (*lease, error) {
	kv, err := events.EnsureKV(ctx, js, events.LeaderKV(ttl, replicas))
	if err != nil {
		return nil, err
	}
	return &lease{kv: kv, instance: instance, ttl: ttl, start: time.Now()}, nil
}

// valid reports whether the lease still certainly holds: the last renewal
// was less than two thirds of the TTL ago, on the monotonic clock, which
// goes on while a process is stopped. A leader paused past its lease
// (SIGSTOP, a long GC, a frozen VM) finds it invalid the moment it runs
// again, before any renewal could tell it, and decides nothing.
func (l *lease) valid() bool {
	return time.Since(l.start)-time.Duration(l.renewed.Load()) < l.ttl*2/3
}

// acquire blocks until this instance holds the lease; the returned context
// ends when the lease is lost or ctx ends.
func (l *lease) acquire(ctx context.Context) (context.Context, error) {
	for {
		// Each attempt is bounded by half the TTL: an ack lost while the
		// bucket changes leader (a server down, replicas being added) must
		// not hold the attempt for the caller's whole deadline.
		cctx, cancel := context.WithTimeout(ctx, l.ttl/2)
		rev, err := l.kv.Create(cctx, leaseKey, []byte(l.instance))
		cancel()
		if err == nil {
			lctx, cancel := context.WithCancel(ctx)
			l.cancel, l.done, l.epoch = cancel, make(chan struct{}), rev
			l.renewed.Store(int64(time.Since(l.start)))
			go l.renew(lctx, cancel, rev)
			return lctx, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(l.ttl / 4):
		}
	}
}

func (l *lease) renew(ctx context.Context, lost context.CancelFunc, rev uint64) {
	defer close(l.done)
	t := time.NewTicker(l.ttl / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !l.valid() {
				lost() // paused past the lease: another may hold it
				return
			}
			uctx, cancel := context.WithTimeout(ctx, l.ttl/2) // later than that, the lease is in doubt anyway
			r, err := l.kv.Update(uctx, leaseKey, []byte(l.instance), rev)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					lost()
				}
				return
			}
			rev = r
			l.renewed.Store(int64(time.Since(l.start)))
		}
	}
}

// release gives the lease up (best effort) so a standby takes over at once.
func (l *lease) release() {
	if l.cancel == nil {
		return
	}
	l.cancel()
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if e, err := l.kv.Get(ctx, leaseKey); err == nil && string(e.Value()) == l.instance {
		_ = l.kv.Delete(ctx, leaseKey, jetstream.LastRevision(e.Revision()))
	}
	l.cancel = nil
}
