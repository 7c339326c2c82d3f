package scheduler

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
)

// The lease: one holder at a time, a larger epoch for every new holder,
// renewal keeps it, a holder paused past two thirds of the TTL finds it
// invalid at once, a renewal that fails ends the term.
func TestLease(t *testing.T) {
	s := newServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := s.log.JetStream()
	a, err := newLease(ctx, js, "a", 600*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newLease(ctx, js, "b", 600*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	actx, err := a.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := a.epoch

	t.Run("renewal keeps it", func(t *testing.T) {
		time.Sleep(1500 * time.Millisecond) // past the TTL: only renewals keep it
		if actx.Err() != nil || !a.valid() {
			t.Fatalf("lease lost while renewing: ctx %v, valid %v", actx.Err(), a.valid())
		}
		bctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if _, err := b.acquire(bctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a second holder while the first renews: %v", err)
		}
	})

	t.Run("paused past the lease: invalid at once", func(t *testing.T) {
		saved := a.renewed.Load()
		a.renewed.Store(int64(time.Since(a.start) - 500*time.Millisecond)) // as after a pause
		if a.valid() {
			t.Fatal("valid 500 ms after the last renewal with a 600 ms TTL")
		}
		a.renewed.Store(saved)
	})

	t.Run("a new holder has a larger epoch", func(t *testing.T) {
		a.release()
		if _, err := b.acquire(ctx); err != nil {
			t.Fatal(err)
		}
		if b.epoch <= first {
			t.Fatalf("epoch %d after %d: not larger", b.epoch, first)
		}
	})

	t.Run("a failed renewal ends the term", func(t *testing.T) {
		// Someone else's write to the key: b's next Update fails.
		if _, err := b.kv.Put(ctx, leaseKey, []byte("intruder")); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(5 * time.Second)
		for b.cancel != nil {
			select {
			case <-b.done:
				return
			case <-deadline:
				t.Fatal("the term did not end after a failed renewal")
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
}

// withEpoch stamps every kind of decision and nothing else.
func TestWithEpoch(t *testing.T) {
	cases := map[string]struct {
		in   events.Event
		want uint64
	}{
		"dispatched":        {events.Dispatched{TaskID: "t"}, 7},
		"preempt_requested": {events.PreemptRequested{TaskID: "t"}, 7},
		"requeued":          {events.Requeued{TaskID: "t"}, 7},
		"lost":              {events.Lost{Node: "n"}, 7},
		"completed":         {events.Completed{TaskID: "t"}, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got uint64
			switch e := withEpoch(tc.in, 7, 3).(type) {
			case events.Dispatched:
				got = e.Epoch
			case events.PreemptRequested:
				got = e.Epoch
			case events.Requeued:
				got = e.Epoch
			case events.Lost:
				got = e.Epoch
			}
			if got != tc.want {
				t.Fatalf("epoch %d, want %d", got, tc.want)
			}
		})
	}
}

// A deposed leader cannot dispatch: with two real schedulers on one log,
// a decision appended with the first leader's epoch after the second
// leader has decided is refused by every fold.
func TestDeposedLeaderFenced(t *testing.T) {
	s := newServer(t)
	s.append(t, dt.Epoch, dt.Node("n0").GPUs(3).Available(), dt.Task().ID("a").GPUs(1).Submitted())
	first := start(t, s, dt.Epoch, -1)
	first.settle(t, s)
	st := first.sched.Snapshot()
	oldEpoch, oldSeq := st.Epoch, st.Seq
	first.stop()
	s.append(t, dt.Epoch, dt.Task().ID("b").GPUs(1).Submitted())
	second := start(t, s, dt.Epoch, -1)
	second.settle(t, s)
	st = second.sched.Snapshot()
	if st.Epoch <= oldEpoch || st.Tasks["b"].State != domain.Dispatched {
		t.Fatalf("second leader: epoch %d after %d, b %s", st.Epoch, oldEpoch, st.Tasks["b"].State)
	}
	second.stop()
	// The first leader wakes up and dispatches c onto the free GPU.
	s.append(t, dt.Epoch, dt.Task().ID("c").GPUs(1).Submitted())
	free := ""
	for _, g := range st.Nodes["n0"].GPUs {
		if st.Owner[g.UUID] == "" {
			free = g.UUID
		}
	}
	// Decided on the log as the first leader last saw it.
	stale := events.Dispatched{TaskID: "c", Placements: []events.Placement{{Node: "n0", GPUs: []string{free}}}, Epoch: oldEpoch, BasedOnSeq: oldSeq}
	if free == "" {
		t.Fatal("no free GPU left for the stale decision: the test needs one")
	}
	s.append(t, dt.Epoch, stale)
	fresh := domain.NewState()
	var why string
	if _, err := events.ReadAll(context.Background(), s.log, 1, "", func(r events.Record) error {
		if w := fresh.Apply(r); w != "" && r.Event.Key() == "c" {
			why = w
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(why, "deposed leader") {
		t.Fatalf("the deposed leader's dispatch: skipped %q, want refused for its epoch", why)
	}
	if c := fresh.Tasks["c"]; c.State == domain.Dispatched && c.Placements[0].GPUs[0] == free && c.DispatchSeq == fresh.Seq {
		t.Fatalf("c dispatched by the stale decision: %+v", c)
	}
}

// Every bucket takes the configured replicas: on one server three cannot
// be given, and the error says which bucket and how many.
func TestReplicasReported(t *testing.T) {
	s := newServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := New(Config{Log: s.log, JS: s.log.JetStream(), Replicas: 3}).Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "bucket gpuq_leader with 3 replicas") {
		t.Fatalf("Run with 3 replicas on one server: %v, want the leader bucket and its replicas named", err)
	}
}
