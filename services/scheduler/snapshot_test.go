package scheduler

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/embedded/embeddedtest"
	"github.com/gpuq/gpuq/pkg/events"
	evjs "github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/snapshot"
)

// server is an embedded JetStream with the audit log.
type server struct {
	log *evjs.Log
}

func newServer(t *testing.T) *server {
	t.Helper()
	srv := embeddedtest.Server(t)
	nc := embeddedtest.Connect(t, srv, "test")
	log, err := evjs.Open(context.Background(), nc, evjs.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return &server{log: log}
}

func (s *server) append(t *testing.T, at time.Time, es ...events.Event) {
	t.Helper()
	for _, e := range es {
		if _, err := events.Append(context.Background(), s.log, e, events.Meta{Time: at}, "", nil); err != nil {
			t.Fatal(err)
		}
	}
}

func (s *server) last(t *testing.T) uint64 {
	t.Helper()
	n, err := s.log.LastSeq(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// copyTo appends every message of s's log to dst's empty log, so that
// both hold the same records at the same sequences.
func (s *server) copyTo(t *testing.T, dst *server) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.log.Read(ctx, 1, "", func(m events.Stored) error {
		_, err := dst.log.Append(ctx, events.Msg{Subject: m.Subject, Data: m.Data})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// run is a scheduler leading on s's log at a fixed time, with a zero-width
// lease and no node timeout. folded is the state it had folded when it
// became ready (before its first pass).
type run struct {
	sched  *Scheduler
	folded *domain.State
	stop   func()
	logs   *syncBuffer // what it logged
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func start(t *testing.T, s *server, now time.Time, every int) *run {
	t.Helper()
	r := &run{logs: &syncBuffer{}}
	var once sync.Once
	ready := make(chan struct{})
	r.sched = New(Config{Log: s.log, JS: s.log.JetStream(), Policy: policy.New(policy.Options{}), Logger: zerolog.New(r.logs),
		LeaseTTL: time.Second, Tick: 20 * time.Millisecond, NodeTimeout: -1, SnapshotEvery: every,
		Now: func() time.Time { return now },
		Ready: func() {
			once.Do(func() {
				r.folded = r.sched.Snapshot() // on the loop, before the first pass
				close(ready)
			})
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.sched.Run(ctx) }()
	r.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run ended before it was ready: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the scheduler did not get ready in a minute")
	}
	return r
}

// settle waits until the scheduler has folded the whole log and a
// quarter of a second of passes appended nothing more.
func (r *run) settle(t *testing.T, s *server) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for stable := 0; stable < 12; {
		if time.Now().After(deadline) {
			t.Fatal("the scheduler did not settle in a minute")
		}
		last := s.last(t)
		time.Sleep(20 * time.Millisecond)
		if st := r.sched.Snapshot(); st != nil && st.Seq == last && s.last(t) == last {
			stable++
		} else {
			stable = 0
		}
	}
}

// tail decodes the records after seq from.
func (s *server) tail(t *testing.T, from uint64) []events.Event {
	t.Helper()
	var out []events.Event
	if _, err := events.ReadAll(context.Background(), s.log, from+1, "", func(r events.Record) error {
		// The leader's epoch is the lease bucket's revision, which differs
		// between two servers; the decision does not.
		out = append(out, withEpoch(r.Event, 0, 0))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A scheduler restarted on a log with its snapshot reaches the state of
// one folding the same log from the start, and decides the same.
//
//  1. A scheduler leads on a history (nodes, tasks run and completed so
//     that the predictor learns, tasks queued), snapshotting every 7
//     events, then stops: its last snapshot covers the log.
//  2. More happens: completions, new submissions (the tail).
//  3. The log is copied to a second server, which has no snapshot.
//  4. A scheduler starts on each: from the snapshot and the tail, and from
//     sequence 1. Their folded states are equal, and so are the decisions
//     each appends before it settles.
func TestRestartFromSnapshot(t *testing.T) {
	t0 := dt.Epoch
	a := newServer(t)
	a.append(t, t0, dt.Node("n0").GPUs(4).Available(), dt.Node("n1").GPUs(4).Available())
	for i := range 12 {
		a.append(t, t0, dt.Task().ID(fmt.Sprintf("h%02d", i)).Name(fmt.Sprintf("resnet-%d", i)).Team([]string{"vision", "nlp"}[i%2]).
			GPUs(1+i%3).Hours(2).Priority([]domain.Priority{domain.Low, domain.Medium, domain.High}[i%3]).IdempotencyKey(fmt.Sprint("k", i)).Submitted())
	}

	// 1. The first leader places what fits; the test plays the agents.
	first := start(t, a, t0.Add(time.Minute), 7)
	first.settle(t, a)
	st := first.sched.Snapshot()
	var started []string
	for _, task := range st.InState(domain.Dispatched) {
		a.append(t, t0.Add(2*time.Minute), events.Started{TaskID: task.ID, Node: task.Node, PID: 100})
		started = append(started, task.ID)
	}
	for _, id := range started[:2] {
		a.append(t, t0.Add(70*time.Minute), events.Completed{TaskID: id, Node: st.Tasks[id].Node})
	}
	first.settle(t, a)
	first.stop() // writes the last snapshot
	covered := a.last(t)

	// 2. The tail.
	for _, id := range started[2:3] {
		a.append(t, t0.Add(90*time.Minute), events.Completed{TaskID: id, Node: st.Tasks[id].Node})
	}
	a.append(t, t0.Add(91*time.Minute), events.Checkpointed{TaskID: started[3], Ref: "ckpt-1"},
		dt.Task().ID("late").Name("bert-9").Team("nlp").GPUs(2).Priority(domain.Critical).Submitted(),
		events.Cancelled{TaskID: "h11", By: "bob"})
	end := a.last(t)

	store, err := snapshot.Open(context.Background(), a.log.JetStream(), 1)
	if err != nil {
		t.Fatal(err)
	}
	at, _, err := store.Load(context.Background(), snapshotName, a.log)
	if err != nil || at.Seq != covered {
		t.Fatalf("the stopped leader's snapshot: %v, %v; want at %d", at, err, covered)
	}

	// 3. The same log without a snapshot.
	b := newServer(t)
	a.copyTo(t, b)
	if b.last(t) != end {
		t.Fatalf("copied log ends at %d, want %d", b.last(t), end)
	}

	// 4. Both restart.
	now := t0.Add(2 * time.Hour)
	fromSnap := start(t, a, now, 7)
	fromSnap.settle(t, a)
	fromSnap.stop()
	fromLog := start(t, b, now, -1)
	fromLog.settle(t, b)
	fromLog.stop()

	if !strings.Contains(fromSnap.logs.String(), "scheduler: state from snapshot") {
		t.Fatalf("the restart did not use the snapshot; it logged:\n%s", fromSnap.logs)
	}
	if fromSnap.folded.Seq != end || fromLog.folded.Seq != end {
		t.Fatalf("folded up to %d (snapshot) and %d (log), want %d", fromSnap.folded.Seq, fromLog.folded.Seq, end)
	}
	// The copy's records have the second server's stored times, and its
	// lease other epochs: everything else must be equal.
	opts := cmp.Options{cmpopts.IgnoreUnexported(domain.State{}, domain.Task{}, domain.Node{}), cmpopts.IgnoreTypes(time.Time{}),
		cmpopts.IgnoreFields(domain.State{}, "Epoch", "EpochSeq"), cmpopts.IgnoreFields(domain.Task{}, "RunSeconds")}
	if diff := cmp.Diff(fromLog.folded, fromSnap.folded, opts); diff != "" {
		t.Fatalf("restarted state (-from the log +from the snapshot):\n%s", diff)
	}
	if m := fromSnap.folded.IndexMismatch(); m != "" {
		t.Fatalf("restarted from the snapshot: %s", m)
	}
	got, want := a.tail(t, end), b.tail(t, end)
	if len(want) == 0 {
		t.Fatal("the restarted schedulers decided nothing; the test needs decisions to compare")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("decisions after the restart (-from the log +from the snapshot):\n%s", diff)
	}
}

// A snapshot that cannot be used is ignored: the scheduler folds the log
// from the start and carries on.
func TestRestartIgnoresBadSnapshot(t *testing.T) {
	s := newServer(t)
	s.append(t, dt.Epoch, dt.Node("n0").GPUs(2).Available(), dt.Task().ID("a").Submitted())
	store, err := snapshot.Open(context.Background(), s.log.JetStream(), 1)
	if err != nil {
		t.Fatal(err)
	}
	// One part that is not a state, after the first record.
	var first snapshot.Mark
	if _, err := events.ReadAll(context.Background(), s.log, 1, "", func(r events.Record) error {
		if r.Seq == 1 {
			first = snapshot.MarkOf(r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Save(context.Background(), snapshotName, first, []byte("not a state"), nil); err != nil {
		t.Fatal(err)
	}
	r := start(t, s, dt.Epoch, 5)
	r.settle(t, s)
	r.stop()
	if !strings.Contains(r.logs.String(), "snapshot ignored") {
		t.Errorf("no warning about the bad snapshot; it logged:\n%s", r.logs)
	}
	if r.folded.Seq != 2 || r.folded.Tasks["a"] == nil {
		t.Fatalf("folded Seq %d, tasks %v; want the whole log", r.folded.Seq, r.folded.Tasks)
	}
	if got := s.tail(t, 2); len(got) != 1 || got[0].EventType() != events.TypeDispatched {
		t.Fatalf("after the restart: %v, want one dispatch", got)
	}
}
