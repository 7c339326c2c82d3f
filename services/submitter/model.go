package submitter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/service"
)

// model is the read model: the runtime's fold of the log (pkg/service),
// which skips, logs and counts every record the fold cannot apply exactly
// as every other service does, with a way to wait until the fold has
// reached a sequence.
type model struct {
	f *service.Fold
	// starts is where each task last started (node, log directory), from
	// the started records folded since this process began; guarded by the
	// fold's lock (written by the Applied hook, read in read). The fold's
	// state does not keep it; a task that started before a restored
	// snapshot is looked up in the log (lastStart).
	starts map[string]startAt
	// pred is the run-time predictor the scheduler keeps (learning from
	// every completion), for a running task's predicted end in show;
	// guarded by the fold's lock like starts, and kept in the
	// submitter's snapshot.
	pred *estimate.Predictor
}

// startAt is a task's latest start.
type startAt struct{ node, dir string }

// saw keeps a folded record's start, and learns a completed task's run
// time (called with the fold's lock held; state has applied r).
func (m *model) saw(state *domain.State, r events.Record, skipped string) {
	if _, ok := r.Event.(events.Completed); ok && skipped == "" {
		m.predictor().Learn(state, r) // as the scheduler's fold learns
		return
	}
	st, ok := r.Event.(events.Started)
	if !ok || skipped != "" || st.Node == "" {
		return
	}
	if m.starts == nil {
		m.starts = map[string]startAt{}
	}
	m.starts[st.TaskID] = startAt{node: st.Node, dir: st.LogDir}
}

// predictor is m.pred (made when first needed, for a model made
// without newModel: only under the fold's write lock then).
func (m *model) predictor() *estimate.Predictor {
	if m.pred == nil {
		m.pred = estimate.NewPredictor(0)
	}
	return m.pred
}

// predictedEnd sets v's predicted end from t, running at now (called with
// the fold's lock held; a task not running is left as it is).
func (m *model) predictedEnd(v *api.TaskView, t *domain.Task, now time.Time) {
	if t.State != domain.Running || t.StartedAt.IsZero() {
		return
	}
	p := m.predictor()
	end := t.StartedAt.Add(p.PolicyRun(t, now))
	if end.Before(now) { // a start later than this clock's now
		end = now
	}
	v.PredictedEnd, v.PredictedBasis = &end, p.Basis(t)
}

func newModel(log events.Log, logger zerolog.Logger) *model {
	return &model{f: service.New("submitter", log, logger, nil), pred: estimate.NewPredictor(0)}
}

// seq is the last sequence folded.
func (m *model) seq() uint64 { return m.f.Seq() }

// waitFor blocks until the fold has reached seq, ctx ends, or bound passes
// (an *opError with status 503).
func (m *model) waitFor(ctx context.Context, seq uint64, bound time.Duration) error {
	err := m.f.WaitFor(ctx, seq, bound)
	if errors.Is(err, service.ErrBehind) {
		return &opError{Status: http.StatusServiceUnavailable,
			Msg: fmt.Sprintf("read model is behind the log (folded up to %d, log at %d); try again", m.seq(), seq)}
	}
	return err
}

// read runs fn with the state locked. fn must not block and must not keep
// pointers into the state after it returns.
func (m *model) read(fn func(st *domain.State)) { m.f.Read(fn) }

// problem is why the fold cannot read or follow the log now, or another
// fold of this process (gpuq dev runs every service in one): nil when
// they can. /healthz reports it.
func (m *model) problem() error {
	if err := m.f.Problem(); err != nil {
		return err
	}
	return errors.Join(service.Problems()...)
}

// starting is /healthz's answer before the fold is ready, with why it is
// not getting there when it knows.
func starting(problem error) map[string]string {
	out := map[string]string{"status": "starting"}
	if problem != nil {
		out["error"] = problem.Error()
	} else {
		out["error"] = "submitter is still catching up with the log"
	}
	return out
}

// own is the submitter's part of its snapshot beside the state: the
// predictor (called with the fold's lock held).
func (m *model) own() [][]byte {
	p, _ := m.predictor().MarshalBinary()
	return [][]byte{p}
}
