package advisor

import (
	"bytes"
	"context"
	"errors"
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
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	evjs "github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/service"
	"github.com/gpuq/gpuq/pkg/snapshot"
)

// syncBuffer is a log sink the advisor's goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// work appends tasks from..to-1 on n1: each submitted, dispatched,
// started and completed, every third one left queued behind the others,
// so the estimator learns residuals, run times, arrivals and keeps
// estimates at submission.
func work(t *testing.T, l events.Log, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		id := fmt.Sprintf("t%03d", i)
		appendEv(t, l, dt.Task().ID(id).Name("train-"+id).GPUs(1).Hours(1).Priority(domain.Priorities[i%4]).Submitted())
		if i%3 == 2 {
			continue
		}
		appendEv(t, l, dt.Dispatch(id, dt.On("n1", i%8)))
		appendEv(t, l, events.Started{TaskID: id, Node: "n1"})
		appendEv(t, l, events.Completed{TaskID: id, Node: "n1"})
	}
}

func appendEv(t *testing.T, l events.Log, e events.Event) {
	t.Helper()
	if _, err := events.Append(context.Background(), l, e, events.Meta{Time: time.Now()}, "", nil); err != nil {
		t.Fatalf("append %s: %v", e.EventType(), err)
	}
}

// runUntilCaughtUp runs an advisor on l until it has folded the log, then
// stops it (its last snapshot written) and returns it.
func runUntilCaughtUp(t *testing.T, l *evjs.Log, logs *syncBuffer) *Advisor {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	a := newAdvisor(Config{Log: l, JS: l.JetStream(), Policy: policy.New(policy.Options{}), SnapshotEvery: 7,
		Logger: zerolog.New(logs), Tick: time.Hour, Ready: func() { close(ready) }})
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("advisor returned before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("advisor not ready after 30 s")
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("advisor: %v", err)
	}
	return a
}

// fullFold is the advisor's fold of the whole log without any snapshot:
// the state and the estimator, as Run's Applied hook feeds it.
func fullFold(t *testing.T, l events.Log) (*domain.State, *estimate.Estimator) {
	t.Helper()
	est := estimate.NewEstimator(policy.New(policy.Options{}))
	f := service.New("full", l, zerolog.Nop(), nil)
	if err := f.CatchUp(context.Background(), &service.Hooks{Applied: func(st *domain.State, r events.Record, skipped string) {
		if skipped == "" {
			est.Observe(st, r)
		}
	}}); err != nil {
		t.Fatal(err)
	}
	var st *domain.State
	f.Read(func(s *domain.State) { st = s.Clone() })
	return st, est
}

// TestSnapshotPlusTail: an advisor restarted on its snapshot folds only
// the log's tail and ends with the state and the estimator (calibration
// residuals, estimates at submission, recent arrivals, predictor, self-
// measurement) of a fold of the whole log; a corrupt or incompatible
// snapshot is skipped with a warning and the whole log folded, to the
// same result.
func TestSnapshotPlusTail(t *testing.T) {
	resave := func(f func(parts [][]byte) [][]byte) func(*testing.T, *snapshot.Store, events.Log) {
		return func(t *testing.T, store *snapshot.Store, l events.Log) {
			at, parts, err := store.Load(context.Background(), SnapshotName, l)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.Save(context.Background(), SnapshotName, at, f(parts)...); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := map[string]struct {
		damage   func(*testing.T, *snapshot.Store, events.Log)
		fromSnap bool
		warning  string
	}{
		"restored": {fromSnap: true},
		"state part corrupt": {damage: resave(func(p [][]byte) [][]byte { return [][]byte{[]byte("not a state"), p[1]} }),
			warning: "snapshot ignored"},
		"estimator part corrupt": {damage: resave(func(p [][]byte) [][]byte { return [][]byte{p[0], []byte(`{"format":1,"res":`)} }),
			warning: "snapshot's estimator ignored"},
		"estimator of another format": {damage: resave(func(p [][]byte) [][]byte { return [][]byte{p[0], []byte(`{"format":2}`)} }),
			warning: "snapshot's estimator ignored"},
		"no estimator part (another layout)": {damage: resave(func(p [][]byte) [][]byte { return p[:1] }),
			warning: "snapshot ignored"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			srv := embeddedtest.Server(t)
			nc := embeddedtest.Connect(t, srv, "advisor")
			l, err := evjs.Open(ctx, nc, evjs.StreamConfig{MemoryStorage: true})
			if err != nil {
				t.Fatal(err)
			}
			appendEv(t, l, dt.Node("n1").GPUs(8).Available())
			work(t, l, 0, 30)
			var logs syncBuffer
			runUntilCaughtUp(t, l, &logs)
			store, err := snapshot.OpenBucket(ctx, l.JetStream(), SnapshotBucket, 1)
			if err != nil {
				t.Fatal(err)
			}
			at, _, err := store.Load(ctx, SnapshotName, l)
			if err != nil {
				t.Fatalf("no snapshot after the first run: %v\n%s", err, logs.String())
			}
			head := at.Seq
			work(t, l, 30, 45)
			appendEv(t, l, events.Cancelled{TaskID: "t002", By: "test"})
			if tc.damage != nil {
				tc.damage(t, store, l)
			}

			logs = syncBuffer{}
			a := runUntilCaughtUp(t, l, &logs)
			wantSt, wantEst := fullFold(t, l)
			var gotSt *domain.State
			var gotEst []byte
			a.fold.Read(func(st *domain.State) {
				gotSt = st.Clone()
				gotEst, _ = a.est.MarshalBinary()
			})
			if diff := cmp.Diff(wantSt, gotSt, cmpopts.IgnoreUnexported(domain.State{}, domain.Task{}, domain.Node{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("state: snapshot + tail differs from the full fold (-full +restarted):\n%s", diff)
			}
			want, _ := wantEst.MarshalBinary()
			if diff := cmp.Diff(string(want), string(gotEst)); diff != "" {
				t.Errorf("estimator: snapshot + tail differs from the full fold (-full +restarted):\n%s", diff)
			}
			if diff := cmp.Diff(wantEst.Stats(), a.est.Stats(), cmpopts.IgnoreUnexported(estimate.Stats{})); diff != "" {
				t.Errorf("stats (-full +restarted):\n%s", diff)
			}
			applied := a.fold.Counters.Applied.Load()
			if tc.fromSnap && applied != gotSt.Seq-head {
				t.Errorf("restored from the snapshot at %d, it folded %d records, want the tail's %d", head, applied, gotSt.Seq-head)
			}
			if !tc.fromSnap && applied != gotSt.Seq {
				t.Errorf("without a usable snapshot it folded %d records, want all %d", applied, gotSt.Seq)
			}
			if tc.warning != "" && !strings.Contains(logs.String(), tc.warning) {
				t.Errorf("no warning %q in the log:\n%s", tc.warning, logs.String())
			}
		})
	}
}
