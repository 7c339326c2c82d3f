package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	js "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/snapshot"
)

// Snapshots keeps a service's fold in the snapshot store (pkg/snapshot)
// under its name: Restore gives the state to fold the log onto, Saw and
// Take (from the runtime's Applied and React hooks) write a snapshot every
// Every applied events, Final one more when the service stops. A snapshot
// holds the fold (domain.EncodeSnapshot) and the service's own parts
// (the scheduler's predictor, say) at one sequence. It is a cache: one that
// is missing, damaged, of another format, beyond the log's end or of
// another log is logged and the log is folded in full. A nil *Snapshots
// does nothing (Restore gives an empty state).
type Snapshots struct {
	store  *snapshot.Store
	name   string
	every  uint64
	logger zerolog.Logger
	seq    uint64        // the sequence of the last snapshot loaded or taken
	at     snapshot.Mark // the last record folded
	busy   chan struct{} // holds a token while a snapshot is being stored
	next   time.Time     // no snapshot before (see Take)
	// budget, when set (WithBudget): a snapshot is also due once the fold
	// has spent this long on the records since the last one (spent, as
	// the service reports it with Spent), however few they were.
	budget, spent time.Duration
	// unsaved: the last snapshot Take handed to its goroutine was not
	// stored (its context ended, say): Final writes one even if seq
	// covers what was folded. Written by that goroutine before it gives
	// busy back, read by Final after it took busy.
	unsaved bool
}

// SaveTimeout bounds the snapshot written when a service stops.
const SaveTimeout = 10 * time.Second

// OpenSnapshots opens the snapshot store for the named service; every < 0
// turns snapshots off, 0 means snapshot.DefaultEvery. Without the store
// the service runs without snapshots (nil), with a warning.
func OpenSnapshots(ctx context.Context, j js.JetStream, replicas int, name string, every int, logger zerolog.Logger) *Snapshots {
	return OpenSnapshotsIn(ctx, j, events.SnapshotBucket, replicas, name, every, logger)
}

// OpenSnapshotsIn is OpenSnapshots with the service's own bucket
// (events.SnapshotBucketOf).
func OpenSnapshotsIn(ctx context.Context, j js.JetStream, bucket string, replicas int, name string, every int, logger zerolog.Logger) *Snapshots {
	if every < 0 || j == nil {
		return nil
	}
	if every == 0 {
		every = snapshot.DefaultEvery
	}
	store, err := snapshot.OpenBucket(ctx, j, bucket, replicas)
	if err != nil {
		logger.Warn().Err(err).Msg(name + ": no snapshot bucket; running without snapshots")
		return nil
	}
	return &Snapshots{store: store, name: name, every: uint64(every), logger: logger, busy: make(chan struct{}, 1)}
}

// Restore returns the state to fold the log onto, and the service's own
// parts of the snapshot (nil when there is none): the snapshot's if there
// is a usable one with want parts of its own, else an empty state.
func (s *Snapshots) Restore(ctx context.Context, l events.Log, want int) (*domain.State, [][]byte) {
	if s == nil {
		return domain.NewState(), nil
	}
	start := time.Now()
	st, parts, err := s.load(ctx, l, want)
	switch {
	case errors.Is(err, snapshot.ErrNone):
		s.logger.Info().Msg(s.name + ": no snapshot; folding the whole log")
	case err != nil:
		s.logger.Warn().Err(err).Msg(s.name + ": snapshot ignored; folding the whole log")
	default:
		s.seq = st.Seq
		s.logger.Info().Uint64("seq", st.Seq).Int("tasks", len(st.Tasks)).Str("took", time.Since(start).Round(time.Millisecond).String()).
			Msg(s.name + ": state from snapshot")
		return st, parts
	}
	return domain.NewState(), nil
}

func (s *Snapshots) load(ctx context.Context, l events.Log, want int) (*domain.State, [][]byte, error) {
	at, parts, err := s.store.Load(ctx, s.name, l)
	if err != nil {
		return nil, nil, err
	}
	if len(parts) != 1+want {
		return nil, nil, fmt.Errorf("%s: snapshot of %d parts, want %d", s.name, len(parts), 1+want)
	}
	st, err := domain.DecodeSnapshot(parts[0])
	if err != nil {
		return nil, nil, err
	}
	if st.Seq != at.Seq {
		return nil, nil, fmt.Errorf("%s: the snapshot's state is not at the snapshot's sequence", s.name)
	}
	s.at = at
	return st, parts[1:], nil
}

// WithBudget makes a snapshot due also once the service has spent d
// (Spent) folding the records since the last one, however few they
// were, and returns s: what bounds a restart's tail by its cost where a
// record's cost varies (the advisor's forward simulations grow with the
// queue). Call it before the fold starts.
func (s *Snapshots) WithBudget(d time.Duration) *Snapshots {
	if s != nil {
		s.budget = d
	}
	return s
}

// Spent adds d to the time spent folding since the last snapshot (see
// WithBudget). Call it where the records are folded (the Applied hook).
func (s *Snapshots) Spent(d time.Duration) {
	if s != nil {
		s.spent += d
	}
}

// Seq is the sequence of the last snapshot loaded or taken (0: none).
// Read it where Take is called (under the fold's lock).
func (s *Snapshots) Seq() uint64 {
	if s == nil {
		return 0
	}
	return s.seq
}

// due reports whether a snapshot at seq is due by count or by budget.
func (s *Snapshots) due(seq uint64) bool {
	return seq >= s.seq+s.every || s.budget > 0 && s.spent >= s.budget && seq > s.seq
}

// Saw notes the record just folded: a snapshot taken now stands there.
func (s *Snapshots) Saw(r events.Record) {
	if s != nil {
		s.at = snapshot.MarkOf(r)
	}
}

// Take writes a snapshot when Every events were applied since the last
// one, or the budget was spent on them (WithBudget), unless one is still
// being stored. The encoding runs on the
// caller's loop, under the fold's lock (it reads the state the loop
// changes); the compression and the write on their own goroutine.
// Encoding a large state takes a while (about 0.3–0.8 s for 250,000 tasks
// on a busy 2-core machine), so after one the next waits 9 times as long:
// snapshots take at most a tenth of the loop's time. own encodes the
// service's own parts.
func (s *Snapshots) Take(ctx context.Context, st *domain.State, own func() [][]byte) {
	if s == nil || !s.due(st.Seq) || time.Now().Before(s.next) || s.at.Seq != st.Seq {
		return // (the last record did not decode: no mark for a snapshot)
	}
	select {
	case s.busy <- struct{}{}:
	default:
		return
	}
	start := time.Now()
	parts := s.encode(st, own)
	took := time.Since(start)
	s.next = time.Now().Add(9 * took)
	at := s.at
	s.seq, s.spent = at.Seq, 0
	go func() {
		defer func() { <-s.busy }()
		s.unsaved = !s.save(ctx, at, took, parts)
	}()
}

// Final writes a snapshot of what was folded when the service stops,
// after any snapshot still being stored, unless the last one covers it.
func (s *Snapshots) Final(st *domain.State, own func() [][]byte) {
	if s == nil {
		return
	}
	s.busy <- struct{}{}
	defer func() { <-s.busy }()
	if st.Seq <= s.seq && !s.unsaved || s.at.Seq != st.Seq {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), SaveTimeout)
	defer cancel()
	start := time.Now()
	parts := s.encode(st, own)
	s.seq, s.spent = st.Seq, 0
	s.unsaved = !s.save(ctx, s.at, time.Since(start), parts)
}

func (s *Snapshots) encode(st *domain.State, own func() [][]byte) [][]byte {
	parts := [][]byte{domain.EncodeSnapshot(st)}
	if own != nil {
		parts = append(parts, own()...)
	}
	return parts
}

// save stores a snapshot and reports whether it was stored.
func (s *Snapshots) save(ctx context.Context, at snapshot.Mark, encode time.Duration, parts [][]byte) bool {
	start := time.Now()
	n, err := s.store.Save(ctx, s.name, at, parts...)
	if err != nil {
		s.logger.Warn().Err(err).Uint64("seq", at.Seq).Msg(s.name + ": snapshot not stored")
		return false
	}
	s.logger.Info().Uint64("seq", at.Seq).Int("bytes", n).Str("encode", encode.Round(time.Microsecond).String()).
		Str("store", time.Since(start).Round(time.Microsecond).String()).Msg(s.name + ": snapshot stored")
	return true
}
