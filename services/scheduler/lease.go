package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/events"
)

const leaseKey = "scheduler"

// lease is the leader lease: a key in a KV bucket whose entries expire
// after the TTL. The holder creates the key and renews it with Update on
// its revision; a standby's Create fails until the key has expired.
type lease struct {
	kv       jetstream.KeyValue
	instance string
	ttl      time.Duration
	cancel   context.CancelFunc
	done     chan struct{}
}

func newLease(ctx context.Context, js jetstream.JetStream, instance string, ttl time.Duration) (*lease, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: events.LeaderBucket, TTL: ttl, History: 1,
		Description: "gpuq scheduler leader lease"})
	if err != nil {
		return nil, err
	}
	return &lease{kv: kv, instance: instance, ttl: ttl}, nil
}

// acquire blocks until this instance holds the lease; the returned context
// ends when the lease is lost or ctx ends.
func (l *lease) acquire(ctx context.Context) (context.Context, error) {
	for {
		rev, err := l.kv.Create(ctx, leaseKey, []byte(l.instance))
		if err == nil {
			lctx, cancel := context.WithCancel(ctx)
			l.cancel, l.done = cancel, make(chan struct{})
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
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r, err := l.kv.Update(ctx, leaseKey, []byte(l.instance), rev)
			if err != nil {
				if ctx.Err() == nil {
					lost()
				}
				return
			}
			rev = r
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
