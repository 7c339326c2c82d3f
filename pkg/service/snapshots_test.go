package service_test

import (
	"context"
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
	"github.com/gpuq/gpuq/pkg/service"
	"github.com/gpuq/gpuq/pkg/snapshot"
)

// TestSnapshotPlusTail: a fold restored from its snapshot and caught up
// on the log's tail equals a fold of the whole log, folding only the
// tail; a damaged or another service's snapshot is ignored and the whole
// log folded. This is what the submitter and every agent (their own
// buckets) and the scheduler (with its predictor) restart on.
func TestSnapshotPlusTail(t *testing.T) {
	tests := map[string]struct {
		damage   func(t *testing.T, store *snapshot.Store, l events.Log)
		restart  string // the restarted fold's name (default svc)
		fromSnap bool
	}{
		"restored":                 {fromSnap: true},
		"garbage":                  {damage: saveGarbage},
		"another service's bucket": {restart: "other"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			srv := embeddedtest.Server(t)
			nc := embeddedtest.Connect(t, srv, "test")
			l, err := evjs.Open(ctx, nc, evjs.StreamConfig{MemoryStorage: true})
			if err != nil {
				t.Fatal(err)
			}
			bucket := events.SnapshotBucketOf("svc")
			appendEvent(t, l, dt.Node("n1").GPUs(4).Available())
			for i := range 20 {
				appendEvent(t, l, dt.Task().ID(taskID(i)).GPUs(1).Submitted())
			}
			// A fold that snapshots every 5 events, stopped after the head.
			snaps := service.OpenSnapshotsIn(ctx, l.JetStream(), bucket, 1, "svc", 5, zerolog.Nop())
			st, _ := snaps.Restore(ctx, l, 0)
			f := service.New("svc", l, zerolog.Nop(), st)
			// The runtime keeps the snapshots registered with it (Hooks):
			// stopped once caught up, it writes the last one.
			runCtx, stop := context.WithCancel(ctx)
			caught, done := make(chan struct{}), make(chan error, 1)
			go func() {
				done <- f.Run(runCtx, service.Hooks{Snapshots: snaps,
					CaughtUp: func(context.Context) error { close(caught); return nil }})
			}()
			<-caught
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			head := f.Seq()
			// The tail, then the damage.
			for i := 20; i < 30; i++ {
				appendEvent(t, l, dt.Task().ID(taskID(i)).GPUs(1).Submitted())
			}
			appendEvent(t, l, events.Cancelled{TaskID: taskID(3), By: "test"})
			if tc.damage != nil {
				store, err := snapshot.OpenBucket(ctx, l.JetStream(), bucket, 1)
				if err != nil {
					t.Fatal(err)
				}
				tc.damage(t, store, l)
			}
			// The restart.
			name := "svc"
			if tc.restart != "" {
				name = tc.restart
			}
			snaps2 := service.OpenSnapshotsIn(ctx, l.JetStream(), events.SnapshotBucketOf(name), 1, name, 5, zerolog.Nop())
			st2, _ := snaps2.Restore(ctx, l, 0)
			g := service.New("svc", l, zerolog.Nop(), st2)
			if err := g.CatchUp(ctx, nil); err != nil {
				t.Fatal(err)
			}
			full := service.New("full", l, zerolog.Nop(), nil)
			if err := full.CatchUp(ctx, nil); err != nil {
				t.Fatal(err)
			}
			var got, want *domain.State
			g.Read(func(st *domain.State) { got = st.Clone() })
			full.Read(func(st *domain.State) { want = st.Clone() })
			if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(domain.State{}, domain.Task{}, domain.Node{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("snapshot + tail differs from the full fold (-full +restored):\n%s", diff)
			}
			applied := g.Counters.Applied.Load()
			if tc.fromSnap && applied != uint64(got.Seq-head) {
				t.Errorf("restored from the snapshot at %d, it folded %d records, want the tail's %d", head, applied, got.Seq-head)
			}
			if !tc.fromSnap && applied != uint64(got.Seq) {
				t.Errorf("without a usable snapshot it folded %d records, want all %d", applied, got.Seq)
			}
		})
	}
}

func taskID(i int) string { return "t" + string(rune('a'+i/26)) + string(rune('a'+i%26)) }

func saveGarbage(t *testing.T, store *snapshot.Store, l events.Log) {
	t.Helper()
	at, _, err := store.Load(context.Background(), "svc", l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Save(context.Background(), "svc", at, []byte("not a state")); err != nil {
		t.Fatal(err)
	}
}

// TestFinalAfterUnsavedTake: a snapshot that Take could not store (its
// context ended, as when a service stops right after catching up) is
// written by Final, not taken as covered.
func TestFinalAfterUnsavedTake(t *testing.T) {
	ctx := context.Background()
	srv := embeddedtest.Server(t)
	nc := embeddedtest.Connect(t, srv, "test")
	l, err := evjs.Open(ctx, nc, evjs.StreamConfig{MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		appendEvent(t, l, dt.Task().ID(taskID(i)).GPUs(1).Submitted())
	}
	bucket := events.SnapshotBucketOf("svc")
	snaps := service.OpenSnapshotsIn(ctx, l.JetStream(), bucket, 1, "svc", 5, zerolog.Nop())
	st, _ := snaps.Restore(ctx, l, 0)
	f := service.New("svc", l, zerolog.Nop(), st)
	if err := f.CatchUp(ctx, &service.Hooks{Applied: func(_ *domain.State, r events.Record, _ string) { snaps.Saw(r) }}); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	f.Read(func(st *domain.State) { snaps.Take(ended, st, nil) })
	f.Read(func(st *domain.State) { snaps.Final(st, nil) })
	store, err := snapshot.OpenBucket(ctx, l.JetStream(), bucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	at, _, err := store.Load(ctx, "svc", l)
	if err != nil {
		t.Fatalf("no snapshot after Final: %v", err)
	}
	if at.Seq != 10 {
		t.Errorf("snapshot at %d, want 10", at.Seq)
	}
}

// TestSnapshotBudget: with a budget, a snapshot is due once the fold has
// spent it on the records since the last one, however few they were;
// without one, only by count.
func TestSnapshotBudget(t *testing.T) {
	tests := []struct {
		name   string
		budget time.Duration
		spent  time.Duration // per record
		want   uint64        // the snapshot's sequence after 3 records and a Take each
	}{
		{name: "no budget: count only (every 1,000)", budget: 0, spent: time.Hour, want: 0},
		{name: "budget not spent", budget: time.Second, spent: 100 * time.Millisecond, want: 0},
		{name: "budget spent on the second record", budget: time.Second, spent: 600 * time.Millisecond, want: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			srv := embeddedtest.Server(t)
			l, err := evjs.Open(ctx, embeddedtest.Connect(t, srv, "test"), evjs.StreamConfig{MemoryStorage: true})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				appendEvent(t, l, dt.Task().ID(taskID(i)).GPUs(1).Submitted())
			}
			bucket := events.SnapshotBucketOf("svc")
			snaps := service.OpenSnapshotsIn(ctx, l.JetStream(), bucket, 1, "svc", 1000, zerolog.Nop()).WithBudget(tc.budget)
			st, _ := snaps.Restore(ctx, l, 0)
			f := service.New("svc", l, zerolog.Nop(), st)
			taken := uint64(0)
			if err := f.CatchUp(ctx, &service.Hooks{Applied: func(st *domain.State, r events.Record, _ string) {
				snaps.Saw(r)
				snaps.Spent(tc.spent)
				if taken == 0 {
					snaps.Take(ctx, st, nil)
					if snaps.Seq() != 0 {
						taken = snaps.Seq()
					}
				}
			}}); err != nil {
				t.Fatal(err)
			}
			if taken != tc.want {
				t.Errorf("snapshot taken at %d, want %d (0: none)", taken, tc.want)
			}
		})
	}
}
