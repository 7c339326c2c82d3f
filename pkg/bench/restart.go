package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/snapshot"
)

// snapshotName is the object the restart measurement stores, as the
// scheduler stores "scheduler".
const snapshotName = "bench"

// SnapshotResult is the snapshot the restart starts from and what it
// cost.
type SnapshotResult struct {
	Seq        uint64 `json:"seq"`         // the sequence it covers
	TailEvents int    `json:"tail_events"` // events after it, folded by the restart
	Tasks      int    `json:"tasks"`
	// StateBytes is domain.EncodeSnapshot's output; StoredBytes the
	// object stored (state and predictor, framed, S2-compressed).
	StateBytes  int `json:"state_bytes"`
	StoredBytes int `json:"stored_bytes"`
	// Encode: domain.EncodeSnapshot and the predictor (on the
	// scheduler's loop); Store: compression and the object store put (on a
	// goroutine of its own in the scheduler).
	Encode time.Duration `json:"encode_ns"`
	Store  time.Duration `json:"store_ns"`
	// The restart's parts after the server's start: Load (object store
	// get, decompression, frame check), Decode (domain.DecodeSnapshot with
	// the indexes rebuilt, and the predictor), TailFold (ReadAll + Apply
	// from the snapshot's next sequence).
	Load     time.Duration `json:"load_ns"`
	Decode   time.Duration `json:"decode_ns"`
	TailFold time.Duration `json:"tail_fold_ns"`
}

// restartTail is how many events the restart folds after its snapshot:
// the most a scheduler folds after a crash (snapshot.DefaultEvery − 1;
// none after a clean stop), at most a fifth of a short log.
func restartTail(total int) int { return min(snapshot.DefaultEvery-1, total/5) }

// takeSnapshot folds nd's log up to at, with the run-time predictor the
// scheduler keeps, and stores a snapshot of both as the scheduler does.
func takeSnapshot(ctx context.Context, nd *node, at uint64) (SnapshotResult, error) {
	res := SnapshotResult{Seq: at}
	f := estimate.NewFold()
	st, pred := f.State, f.Pred
	var mark snapshot.Mark
	if _, err := events.ReadAll(ctx, nd.log, 1, "", func(r events.Record) error {
		if r.Seq <= at {
			f.Apply(r)
			mark = snapshot.MarkOf(r)
		}
		return nil
	}); err != nil {
		return res, err
	}
	if st.Seq != at {
		return res, fmt.Errorf("bench: folded up to %d for a snapshot at %d", st.Seq, at)
	}
	start := time.Now()
	state := domain.EncodeSnapshot(st)
	p, err := pred.MarshalBinary()
	if err != nil {
		return res, err
	}
	res.Encode = time.Since(start)
	store, err := snapshot.Open(ctx, nd.log.JetStream(), 1)
	if err != nil {
		return res, err
	}
	start = time.Now()
	if res.StoredBytes, err = store.Save(ctx, snapshotName, mark, state, p); err != nil {
		return res, err
	}
	res.Store = time.Since(start)
	res.StateBytes, res.Tasks = len(state), len(st.Tasks)
	return res, nil
}

// restartFromSnapshot is what a restarted scheduler does once its server
// is up: the snapshot (checked against the log), the fold of the tail. It
// returns the state and how many events the tail held.
func restartFromSnapshot(ctx context.Context, l *jetstream.Log, res *SnapshotResult) (*domain.State, int, error) {
	start := time.Now()
	store, err := snapshot.Open(ctx, l.JetStream(), 1)
	if err != nil {
		return nil, 0, err
	}
	at, parts, err := store.Load(ctx, snapshotName, l)
	if err != nil {
		return nil, 0, err
	}
	if len(parts) != 2 {
		return nil, 0, fmt.Errorf("bench: snapshot of %d parts", len(parts))
	}
	res.Seq, res.Load = at.Seq, time.Since(start)
	start = time.Now()
	st, err := domain.DecodeSnapshot(parts[0])
	if err != nil {
		return nil, 0, err
	}
	pred := estimate.NewPredictor(0)
	if err := pred.UnmarshalBinary(parts[1]); err != nil {
		return nil, 0, err
	}
	res.Decode = time.Since(start)
	start = time.Now()
	n := 0
	if _, err := events.ReadAll(ctx, l, at.Seq+1, "", func(r events.Record) error {
		(&estimate.Fold{State: st, Pred: pred}).Apply(r)
		n++
		return nil
	}); err != nil {
		return nil, 0, err
	}
	res.TailFold = time.Since(start)
	return st, n, nil
}
