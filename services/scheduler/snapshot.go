package scheduler

import (
	"context"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/service"
	"github.com/gpuq/gpuq/pkg/snapshot"
)

// Snapshots (service.Snapshots over pkg/snapshot). A new leader loads the
// scheduler's snapshot, if there is a usable one, and folds only the log
// after it; it writes a snapshot every SnapshotEvery applied events and
// once more when it stops. The scheduler's snapshot holds the fold and the
// run-time predictor (estimate.Predictor.MarshalBinary) at one sequence.

// DefaultSnapshotEvery is how many applied events separate two snapshots
// unless Config.SnapshotEvery says otherwise: a restart folds at most
// this many events after the snapshot.
const DefaultSnapshotEvery = snapshot.DefaultEvery

// snapshotName is the scheduler's object in the snapshot bucket.
const snapshotName = "scheduler"

// snapshots is the scheduler's use of service.Snapshots: the predictor is
// its one part of its own.
type snapshots struct{ *service.Snapshots }

// openSnapshots opens the bucket; without it the scheduler runs without
// snapshots, with a warning.
func (s *Scheduler) openSnapshots(ctx context.Context) snapshots {
	return snapshots{service.OpenSnapshots(ctx, s.cfg.JS, s.cfg.Replicas, snapshotName, s.cfg.SnapshotEvery, s.cfg.Logger)}
}

// restore returns the state and predictor to fold the log onto.
func (sn snapshots) restore(ctx context.Context, l events.Log) (*domain.State, *estimate.Predictor) {
	st, parts := sn.Restore(ctx, l, 1)
	pred := estimate.NewPredictor(0)
	if parts != nil {
		if err := pred.UnmarshalBinary(parts[0]); err != nil {
			// The state is good, the predictor is not: fold from the
			// start so that the predictor learns again.
			return domain.NewState(), estimate.NewPredictor(0)
		}
	}
	return st, pred
}

// own encodes the scheduler's own part of a snapshot, the predictor
// (service.Hooks.Own).
func own(pred *estimate.Predictor) func() [][]byte {
	return func() [][]byte {
		p, _ := pred.MarshalBinary()
		return [][]byte{p}
	}
}
