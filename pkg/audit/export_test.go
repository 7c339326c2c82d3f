package audit

import (
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// Fold is the state after the records up to and including sequence upto
// (0: all of them), as Replay folds it.
func Fold(recs []events.Record, upto uint64) *domain.State { return foldTo(recs, upto).st }
