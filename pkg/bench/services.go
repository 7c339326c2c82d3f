package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/service"
)

// Each service's restart, as the services restart: service.Snapshots in
// the service's own bucket (Restore: load, check against the log,
// decode, the service's own parts), then service.Fold's catch-up on the
// tail with the service's own fold hook. The server stays up (in
// production NATS is a process of its own); the scheduler's cold restart
// with the server's start is restart_1m_s.

// Services are the services whose restarts History measures, in order.
var Services = []string{"scheduler", "submitter", "advisor", "agent"}

// advisorWarm is how many events before its snapshot the advisor's
// estimator is fed when History builds that snapshot: a forward
// simulation per submission makes a full fold of a 1M-event log take
// many minutes, and what the estimator keeps is bounded (2,000
// residuals, the last 4,096 arrivals, an estimate per queued task, the
// predictor's windows), all of it full after this many events of the
// history (about 5,000 submissions, 3,000 starts, 2,000 queued); at most
// a tenth of a short log (warmOf). The predictor alone is the
// scheduler's, learnt from the whole log.
const advisorWarm = 20_000

// advisorEvery is services/advisor's DefaultSnapshotEvery (pkg/bench
// cannot import services): the advisor snapshots ten times as often as
// the others, so its tail after a crash is at most advisorEvery − 1.
const advisorEvery = 1_000

// advisorBudget is services/advisor's DefaultSnapshotBudget: a snapshot
// is also due once the advisor has spent this long folding the records
// since the last one, so the worst tail a crash leaves is the records
// after a snapshot up to the one before the next: at most advisorEvery −
// 1 records, and at most about advisorBudget of folding.
const advisorBudget = time.Second

// serviceTail is how many events svc's restart folds after its snapshot:
// the most it folds after a crash with its default snapshot interval, at
// most a fifth of a short log.
// (The advisor's, at most a fiftieth: its tail costs a forward
// simulation per submission, and a short log's is extrapolated anyway.)
func serviceTail(svc string, total int) int {
	if svc == "advisor" {
		return min(advisorEvery-1, total/50)
	}
	return restartTail(total)
}

// warmOf is how many events before its snapshot the advisor's estimator
// is fed: advisorWarm, at most a tenth of a short log.
func warmOf(total int) uint64 { return uint64(min(advisorWarm, total/10)) }

// ServiceRestart is one service's restart from its snapshot.
type ServiceRestart struct {
	Service    string        `json:"service"`
	Seq        uint64        `json:"snapshot_seq"`
	TailEvents int           `json:"tail_events"`
	Restart    time.Duration `json:"restart_ns"` // Restore + the tail's fold
	Restore    time.Duration `json:"restore_ns"` // load, check, decode (state and own parts)
	TailFold   time.Duration `json:"tail_fold_ns"`
	RestartCPU time.Duration `json:"restart_cpu_ns"`
	// BudgetCut: the tail ended where the advisor's snapshot budget was
	// spent, before its count (advisorBudget).
	BudgetCut bool `json:"budget_cut,omitempty"`
}

// serviceFold is what a service folds beside the state, and how its
// snapshot's own parts are written and read.
type serviceFold struct {
	name    string // the object in the bucket, and its bucket (events.SnapshotBucketOf)
	parts   int
	applied func(st *domain.State, r events.Record, skipped string)
	own     func() [][]byte
	load    func(parts [][]byte) error
}

// newServiceFold is a fresh fold of service svc: the scheduler's
// predictor, the advisor's estimator, nothing more for the submitter and
// the agent (their state is the fold).
func newServiceFold(svc string) *serviceFold {
	f := &serviceFold{name: svc}
	switch svc {
	case "scheduler":
		pred := estimate.NewPredictor(0)
		f.parts = 1
		f.applied = func(st *domain.State, r events.Record, skipped string) {
			if skipped == "" {
				pred.Learn(st, r)
			}
		}
		f.own = func() [][]byte { b, _ := pred.MarshalBinary(); return [][]byte{b} }
		f.load = func(p [][]byte) error { return pred.UnmarshalBinary(p[0]) }
	case "advisor":
		est := estimate.NewEstimator(policy.New(policy.DefaultOptions()))
		f.parts = 1
		f.applied = func(st *domain.State, r events.Record, skipped string) {
			if skipped == "" {
				est.Observe(st, r)
			}
		}
		f.own = func() [][]byte { b, _ := est.MarshalBinary(); return [][]byte{b} }
		f.load = func(p [][]byte) error { return est.UnmarshalBinary(p[0]) }
	}
	return f
}

// takeServiceSnapshots folds l once and stores each service's snapshot
// at total − serviceTail(svc, total), as each service's Snapshots.Final
// does: the same state for all, the scheduler's predictor learnt on the
// whole log, the advisor's estimator on its last advisorWarm events.
func takeServiceSnapshots(ctx context.Context, l *jetstream.Log, total int) error {
	st := domain.NewState()
	folds := map[string]*serviceFold{}
	at := map[string]uint64{}
	for _, svc := range Services {
		folds[svc], at[svc] = newServiceFold(svc), uint64(total-serviceTail(svc, total))
	}
	last := uint64(0)
	for _, a := range at {
		last = max(last, a)
	}
	save := func(svc string, r events.Record) error {
		snaps := service.OpenSnapshotsIn(ctx, l.JetStream(), events.SnapshotBucketOf("bench_"+svc), 1, svc, 0, zerolog.Nop())
		if snaps == nil {
			return fmt.Errorf("bench: no snapshot bucket for %s", svc)
		}
		snaps.Saw(r)
		snaps.Final(st, folds[svc].own)
		return nil
	}
	seen := uint64(0)
	if _, err := events.ReadAll(ctx, l, 1, "", func(r events.Record) error {
		if r.Seq > last {
			return nil
		}
		why := st.Apply(r)
		for _, svc := range Services {
			if f := folds[svc]; f.applied != nil && r.Seq <= at[svc] && (svc != "advisor" || r.Seq+warmOf(total) > at[svc]) {
				f.applied(st, r, why)
			}
		}
		for _, svc := range Services {
			if r.Seq == at[svc] {
				if err := save(svc, r); err != nil {
					return err
				}
			}
		}
		seen = r.Seq
		return nil
	}); err != nil {
		return err
	}
	if seen != last {
		return fmt.Errorf("bench: folded up to %d for snapshots up to %d", seen, last)
	}
	return nil
}

// restartService restarts svc on l from its snapshot, as the service
// does, and checks that it folded exactly the tail up to the log's end.
func restartService(ctx context.Context, l *jetstream.Log, svc string, total int) (ServiceRestart, error) {
	res := ServiceRestart{Service: svc}
	tail := serviceTail(svc, total)
	f := newServiceFold(svc)
	runtime.GC()
	start, cpu := time.Now(), cpuTime()
	snaps := service.OpenSnapshotsIn(ctx, l.JetStream(), events.SnapshotBucketOf("bench_"+svc), 1, svc, 0, zerolog.Nop())
	st, parts := snaps.Restore(ctx, l, f.parts)
	if st.Seq == 0 {
		return res, fmt.Errorf("bench: %s found no usable snapshot", svc)
	}
	if f.load != nil {
		if err := f.load(parts); err != nil {
			return res, fmt.Errorf("bench: %s's snapshot: %w", svc, err)
		}
	}
	res.Restore, res.Seq = time.Since(start), st.Seq
	tailStart := time.Now()
	fold := service.New(svc, l, zerolog.Nop(), st)
	applied := f.applied
	// The advisor's worst tail is cut by its budget as well as by its
	// count: the restart it leaves ends where the fold of the tail had
	// spent advisorBudget in the hook, the advisor's next snapshot (the
	// rest is folded too, not counted).
	var (
		spent  time.Duration // in the hook, until the cut
		n      int           // records folded, until the cut
		cutN   int           // records before the cut (0: no cut)
		cutAt  time.Time
		cutCPU time.Duration
	)
	if inner := f.applied; svc == "advisor" && inner != nil {
		applied = func(st *domain.State, r events.Record, skipped string) {
			if cutN > 0 {
				inner(st, r, skipped)
				return
			}
			t := time.Now()
			inner(st, r, skipped)
			spent += time.Since(t)
			if n++; spent >= advisorBudget {
				cutN, cutAt, cutCPU = n, time.Now(), cpuTime()
			}
		}
	}
	if err := fold.CatchUp(ctx, &service.Hooks{Applied: applied}); err != nil {
		return res, err
	}
	res.TailFold = time.Since(tailStart)
	res.Restart, res.RestartCPU = time.Since(start), cpuTime()-cpu
	res.TailEvents = int(fold.Counters.Applied.Load())
	if fold.Seq() != uint64(total) || res.TailEvents != tail {
		return res, fmt.Errorf("bench: %s restarted up to %d (want %d), folding %d events (want the tail's %d)", svc, fold.Seq(), total, res.TailEvents, tail)
	}
	if cutN > 0 {
		res.TailFold, res.Restart, res.RestartCPU, res.TailEvents = cutAt.Sub(tailStart), cutAt.Sub(start), cutCPU-cpu, cutN
		res.BudgetCut = true
	}
	return res, nil
}
