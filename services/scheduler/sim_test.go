package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/sim"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// simTasks is a small mixed workload that fills two 8-GPU nodes, queues,
// and has CRITICAL arrivals preempt running LOW and MEDIUM work.
func simTasks() []sim.Task {
	prios := []domain.Priority{domain.Low, domain.Medium, domain.Medium, domain.High, domain.Low, domain.Medium, domain.Low, domain.High, domain.Medium, domain.Critical}
	var out []sim.Task
	for i := range 60 {
		d := time.Duration(10+(i*37)%110) * time.Minute
		out = append(out, sim.Task{ID: fmt.Sprintf("t%03d", i), Team: sim.SingleTeam, Priority: prios[i%len(prios)],
			Submit: time.Duration(i) * 4 * time.Minute, Duration: d, GPUs: []int{1, 2, 4, 8, 2}[i%5], Hours: 1.5 * d.Hours()})
	}
	return out
}

func isDecision(e events.Event) bool {
	switch e.(type) {
	case events.Dispatched, events.PreemptRequested, events.Requeued, events.Lost:
		return true
	}
	return false
}

// TestSameDecisionsAsSimulator: one policy, two drivers. The simulator's
// log of a run is replayed into the real scheduler — its lease, the
// runtime's fold and follow, its passes — record group by record group:
// every run of the agents' and submitters' records is appended while the
// scheduler's fold is held, so it sees the group at once, as the
// simulator decided on it. The scheduler must then append exactly the
// decisions the simulator's log holds next (its lease's epoch aside), and
// nothing where the simulator decided nothing.
func TestSameDecisionsAsSimulator(t *testing.T) {
	ctx := context.Background()
	pol := policy.New(policy.Options{})
	recs, err := sim.Log(ctx, sim.Config{Nodes: 2, GPUsPerNode: 8, Epoch: dt.Epoch}, pol, simTasks())
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t) // the lease and heartbeat buckets
	l, clk := memlog.New(), &fakeClock{t: dt.Epoch}
	l.Now = clk.now
	ready := make(chan struct{})
	sched := New(Config{Log: l, JS: s.log.JetStream(), Policy: pol, Logger: zerolog.Nop(),
		LeaseTTL: 10 * time.Second, Tick: time.Hour, NodeTimeout: -1, SnapshotEvery: -1, Now: clk.now,
		Ready: func() { close(ready) }})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sched.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-ready:
	case <-time.After(time.Minute):
		t.Fatal("the scheduler did not lead in a minute")
	}
	sched.mu.Lock()
	fold := sched.fold
	sched.mu.Unlock()

	last := func() uint64 { n, _ := l.LastSeq(ctx); return n }
	// settle waits until the scheduler has folded the whole log and
	// appended nothing more for a while.
	settle := func() {
		deadline := time.Now().Add(30 * time.Second)
		for stable := 0; stable < 5; {
			if time.Now().After(deadline) {
				t.Fatal("the scheduler did not settle in 30 s")
			}
			n := last()
			time.Sleep(10 * time.Millisecond)
			if fold.Seq() == n && last() == n {
				stable++
			} else {
				stable = 0
			}
		}
	}
	decisions, preempts, groups := 0, 0, 0
	for i := 0; i < len(recs); {
		// 1. The next group of the agents' and submitters' records.
		j := i
		for j < len(recs) && !isDecision(events.DecodeRecord(recs[j]).Event) {
			j++
		}
		var appended uint64
		fold.Read(func(*domain.State) {
			for _, m := range recs[i:j] {
				clk.set(m.Time)
				if _, err := l.Append(ctx, events.Msg{Subject: m.Subject, Data: m.Data}); err != nil {
					t.Error(err)
					return
				}
			}
			appended = last()
			// Every record waits in the runtime's queue before it folds.
			for deadline := time.Now().Add(10 * time.Second); fold.Counters.StreamLast.Load() < appended && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		})
		if t.Failed() {
			return
		}
		settle()
		// 2. What the scheduler decided against what the simulator did.
		k := j
		for k < len(recs) && isDecision(events.DecodeRecord(recs[k]).Event) {
			k++
		}
		var want, got []events.Event
		for _, m := range recs[j:k] {
			want = append(want, events.DecodeRecord(m).Event)
		}
		if _, err := l.Read(ctx, appended+1, "", func(m events.Stored) error {
			got = append(got, withEpoch(events.DecodeRecord(m).Event, 0, 0))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("after seq %d: decisions differ (-simulator +scheduler):\n%s", appended, diff)
		}
		for _, e := range want {
			if _, ok := e.(events.PreemptRequested); ok {
				preempts++
			}
		}
		decisions += len(want)
		groups++
		i = k
	}
	if decisions < len(simTasks()) || preempts == 0 {
		t.Errorf("%d decisions (%d preemptions) in %d groups; want every task dispatched and some preemption", decisions, preempts, groups)
	}
	t.Logf("%d decisions (%d preemptions) in %d groups agree", decisions, preempts, groups)
}
