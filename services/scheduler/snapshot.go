package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/snapshot"
)

// Snapshots (pkg/snapshot). A new leader loads the scheduler's snapshot,
// if there is a usable one, and folds only the log after it; it writes a
// snapshot every SnapshotEvery applied events and once more when it
// stops. A snapshot holds the fold (domain.EncodeSnapshot) and the
// run-time predictor (estimate.Predictor.MarshalBinary) at one sequence.
// It is a cache: one that is missing, damaged, of another format, beyond
// the log's end or of another log is logged and the leader folds the
// whole log.

// DefaultSnapshotEvery is how many applied events separate two snapshots
// unless Config.SnapshotEvery says otherwise: a restart folds at most
// this many events after the snapshot.
const DefaultSnapshotEvery = snapshot.DefaultEvery

// snapshotName is the scheduler's object in the snapshot bucket.
const snapshotName = "scheduler"

// saveTimeout bounds the snapshot written when the leader stops.
const saveTimeout = 10 * time.Second

type snapshots struct {
	store  *snapshot.Store
	every  uint64
	logger zerolog.Logger
	seq    uint64        // the sequence of the last snapshot loaded or taken
	at     snapshot.Mark // the last record folded
	busy   chan struct{} // holds a token while a snapshot is being stored
	next   time.Time     // no snapshot before (see take)
}

// openSnapshots opens the bucket; without it the scheduler runs without
// snapshots (nil), with a warning.
func (s *Scheduler) openSnapshots(ctx context.Context) *snapshots {
	if s.cfg.SnapshotEvery < 0 {
		return nil
	}
	store, err := snapshot.Open(ctx, s.cfg.JS, s.cfg.Replicas)
	if err != nil {
		s.cfg.Logger.Warn().Err(err).Msg("scheduler: no snapshot bucket; running without snapshots")
		return nil
	}
	return &snapshots{store: store, every: uint64(s.cfg.SnapshotEvery), logger: s.cfg.Logger, busy: make(chan struct{}, 1)}
}

// restore returns the state and predictor to fold the log onto, and the
// sequence to fold from: the snapshot's, or empty ones from 1.
func (sn *snapshots) restore(ctx context.Context, l events.Log) (*domain.State, *estimate.Predictor, uint64) {
	if sn == nil {
		return domain.NewState(), estimate.NewPredictor(0), 1
	}
	start := time.Now()
	st, pred, err := sn.load(ctx, l)
	switch {
	case errors.Is(err, snapshot.ErrNone):
		sn.logger.Info().Msg("scheduler: no snapshot; folding the whole log")
	case err != nil:
		sn.logger.Warn().Err(err).Msg("scheduler: snapshot ignored; folding the whole log")
	default:
		sn.seq = st.Seq
		sn.logger.Info().Uint64("seq", st.Seq).Int("tasks", len(st.Tasks)).Str("took", time.Since(start).Round(time.Millisecond).String()).Msg("scheduler: state from snapshot")
		return st, pred, st.Seq + 1
	}
	return domain.NewState(), estimate.NewPredictor(0), 1
}

func (sn *snapshots) load(ctx context.Context, l events.Log) (*domain.State, *estimate.Predictor, error) {
	at, parts, err := sn.store.Load(ctx, snapshotName, l)
	if err != nil {
		return nil, nil, err
	}
	if len(parts) != 2 {
		return nil, nil, fmt.Errorf("scheduler: snapshot of %d parts, want 2", len(parts))
	}
	st, err := domain.DecodeSnapshot(parts[0])
	if err != nil {
		return nil, nil, err
	}
	if st.Seq != at.Seq {
		return nil, nil, errors.New("scheduler: snapshot's state is not at the snapshot's sequence")
	}
	pred := estimate.NewPredictor(0)
	if err := pred.UnmarshalBinary(parts[1]); err != nil {
		return nil, nil, err
	}
	sn.at = at
	return st, pred, nil
}

// saw notes the record just folded: a snapshot taken now stands there.
func (sn *snapshots) saw(r events.Record) {
	if sn != nil {
		sn.at = snapshot.MarkOf(r)
	}
}

// take writes a snapshot when SnapshotEvery events were applied since the
// last one, unless one is still being stored. The encoding runs on the
// caller's loop (it reads the state the loop changes), the compression and
// the write on their own goroutine. Encoding a large state takes a while
// (about 0.3–0.8 s for 250,000 tasks on a busy 2-core machine), so after
// one the next waits 9 times as long: snapshots take at most a tenth of
// the loop's time.
func (sn *snapshots) take(ctx context.Context, st *domain.State, pred *estimate.Predictor) {
	if sn == nil || st.Seq < sn.seq+sn.every || time.Now().Before(sn.next) || sn.at.Seq != st.Seq {
		return // (the last record did not decode: no mark for a snapshot)
	}
	select {
	case sn.busy <- struct{}{}:
	default:
		return
	}
	start := time.Now()
	state := domain.EncodeSnapshot(st)
	p, _ := pred.MarshalBinary()
	took := time.Since(start)
	sn.next = time.Now().Add(9 * took)
	at := sn.at
	sn.seq = at.Seq
	go func() {
		defer func() { <-sn.busy }()
		sn.save(ctx, at, took, state, p)
	}()
}

// final writes a snapshot of what the leader folded when it stops, after
// any snapshot still being stored, unless the last one covers it.
func (sn *snapshots) final(st *domain.State, pred *estimate.Predictor) {
	if sn == nil {
		return
	}
	sn.busy <- struct{}{}
	defer func() { <-sn.busy }()
	if st.Seq <= sn.seq || sn.at.Seq != st.Seq {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), saveTimeout)
	defer cancel()
	start := time.Now()
	state := domain.EncodeSnapshot(st)
	p, _ := pred.MarshalBinary()
	sn.seq = st.Seq
	sn.save(ctx, sn.at, time.Since(start), state, p)
}

func (sn *snapshots) save(ctx context.Context, at snapshot.Mark, encode time.Duration, state, pred []byte) {
	start := time.Now()
	n, err := sn.store.Save(ctx, snapshotName, at, state, pred)
	if err != nil {
		sn.logger.Warn().Err(err).Uint64("seq", at.Seq).Msg("scheduler: snapshot not stored")
		return
	}
	sn.logger.Info().Uint64("seq", at.Seq).Int("bytes", n).Str("encode", encode.Round(time.Microsecond).String()).Str("store", time.Since(start).Round(time.Microsecond).String()).Msg("scheduler: snapshot stored")
}
