package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/audit"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// TestLiveDigest: the leading scheduler keeps the digest of its fold in
// the lease bucket; it equals a fresh replay's digest after the same
// sequence, follows the log, and is gone once the scheduler stops.
func TestLiveDigest(t *testing.T) {
	s := newServer(t)
	now := dt.Epoch
	s.append(t, now, dt.Node("n1").GPUs(4).Available(), dt.Task().ID("a").GPUs(2).Submitted(), dt.Task().ID("b").GPUs(4).Submitted())
	r := start(t, s, now, -1)
	kv, err := s.log.JetStream().KeyValue(context.Background(), events.LeaderBucket)
	if err != nil {
		t.Fatal(err)
	}
	// waitDigest waits for a digest at the log's last sequence.
	waitDigest := func() audit.LiveDigest {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			r.settle(t, s)
			last := s.last(t)
			var v audit.LiveDigest
			if e, err := kv.Get(context.Background(), audit.LiveDigestKey); err == nil && json.Unmarshal(e.Value(), &v) == nil && v.Seq == last {
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("no live digest at seq %d within a minute", last)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	check := func(v audit.LiveDigest) {
		t.Helper()
		var recs []events.Record
		if _, err := events.ReadAll(context.Background(), s.log, 1, "", func(rec events.Record) error {
			recs = append(recs, rec)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if want := audit.Replay(recs, policy.New(policy.DefaultOptions()), v.Seq, false).Digest; v.Digest != want {
			t.Errorf("live digest after seq %d = %s, a fresh replay's %s", v.Seq, v.Digest, want)
		}
		rep := audit.Verify(recs, audit.Options{Live: &v})
		if rep.Live != audit.LiveMatch || !rep.OK {
			t.Errorf("verify with the live digest: live %q ok %v %+v", rep.Live, rep.OK, rep.Violations)
		}
		if leading, epoch := r.sched.Lease(); !leading || v.Epoch != epoch || v.Instance == "" {
			t.Errorf("digest of instance %q epoch %d; the scheduler leads %v at epoch %d", v.Instance, v.Epoch, leading, epoch)
		}
	}
	first := waitDigest() // a dispatched (and b waiting) are in it
	check(first)
	s.append(t, now, events.Started{TaskID: "a", Node: "n1"}, events.Completed{TaskID: "a", Node: "n1"})
	second := waitDigest()
	if second.Seq <= first.Seq {
		t.Errorf("the digest did not follow the log: seq %d then %d", first.Seq, second.Seq)
	}
	check(second)
	r.stop()
	if _, err := kv.Get(context.Background(), audit.LiveDigestKey); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("after the scheduler stopped the digest is still there (err %v)", err)
	}
}
