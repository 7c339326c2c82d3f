package scheduler

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/audit"
	"github.com/gpuq/gpuq/pkg/domain"
)

// The live digest. While it leads, the scheduler keeps the digest of its
// fold (audit.Digest of the state, after the sequence it has folded) in
// the lease bucket under audit.LiveDigestKey, so that `gpuq audit verify`
// can check that the live state equals a fresh replay of the log to the
// same sequence. The key lives in the lease bucket because the leader may
// already write there and its TTL is the lease's: it is rewritten while
// the scheduler leads, and gone shortly after it stops leading.

// digestEvery is the least time between two digests; after one that
// took d, the next waits at least 20 × d, so digests take at most a
// twentieth of the loop (audit.Digest is a pass over every task).
const digestEvery = time.Second

type liveDigest struct {
	kv       jetstream.KeyValue
	instance string
	epoch    uint64
	ttl      time.Duration
	value    []byte    // the last digest record, to put
	seq      uint64    // its sequence
	next     time.Time // no digest before
	dirty    bool      // value not yet put
	put      time.Time // when a put was last started
	// busy holds a token while a put is in flight: puts run on their own
	// goroutine, one at a time, so that a slow bucket (a cluster electing
	// a leader) never holds up the scheduler's loop.
	busy chan struct{}
	wg   sync.WaitGroup
}

func newLiveDigest(kv jetstream.KeyValue, instance string, epoch uint64, ttl time.Duration) *liveDigest {
	return &liveDigest{kv: kv, instance: instance, epoch: epoch, ttl: ttl, busy: make(chan struct{}, 1)}
}

// update computes the digest of st when the fold moved since the last one
// and it is time (the fold's lock held).
func (d *liveDigest) update(st *domain.State) {
	if d == nil || d.value != nil && st.Seq == d.seq || time.Now().Before(d.next) {
		return
	}
	start := time.Now()
	v := audit.LiveDigest{Instance: d.instance, Epoch: d.epoch, Seq: st.Seq, Digest: audit.Digest(st), Time: start.UTC()}
	took := time.Since(start)
	d.next = time.Now().Add(max(digestEvery, 20*took))
	d.value, _ = json.Marshal(v)
	d.seq, d.dirty = st.Seq, true
}

// publish puts the last digest when it is new, or again before the
// bucket's TTL would expire it (without the fold's lock).
func (d *liveDigest) publish(ctx context.Context) {
	if d == nil || d.value == nil || !d.dirty && time.Since(d.put) < d.ttl/3 {
		return
	}
	select {
	case d.busy <- struct{}{}:
	default:
		return // the last put is still in flight
	}
	value := d.value
	d.dirty, d.put = false, time.Now()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer func() { <-d.busy }()
		pctx, cancel := context.WithTimeout(ctx, d.ttl/2)
		defer cancel()
		_, _ = d.kv.Put(pctx, audit.LiveDigestKey, value) // a failed put is retried within ttl/3
	}()
}

// clear removes the digest when the scheduler stops leading, after any
// put in flight (best effort, briefly: the TTL removes it otherwise).
func (d *liveDigest) clear() {
	if d == nil {
		return
	}
	d.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), min(time.Second, d.ttl/4))
	defer cancel()
	if e, err := d.kv.Get(ctx, audit.LiveDigestKey); err == nil {
		var v audit.LiveDigest
		if json.Unmarshal(e.Value(), &v) == nil && v.Instance == d.instance && v.Epoch == d.epoch {
			_ = d.kv.Delete(ctx, audit.LiveDigestKey, jetstream.LastRevision(e.Revision()))
		}
	}
}
