package submitter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rs/zerolog"

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
	// pred learns run times from the tasks completed in the fold, as the
	// scheduler's does (estimate.Predictor.Observe); the dashboard's plan
	// and teams predict with it. Written by the Applied hook (the fold's
	// lock held), read under read; its reads change nothing. After a
	// restored snapshot it knows only the tasks completed since.
	pred *estimate.Predictor
}

// predictor is the run-time predictor (read it with the state locked).
func (m *model) predictor() *estimate.Predictor { return m.pred }

// observe teaches the predictor a completed task (called with the fold's
// lock held).
func (m *model) observe(st *domain.State, r events.Record, skipped string) {
	if c, ok := r.Event.(events.Completed); ok && skipped == "" {
		if t := st.Tasks[c.TaskID]; t != nil {
			m.pred.Observe(t)
		}
	}
}

// startAt is a task's latest start.
type startAt struct{ node, dir string }

// saw keeps a folded record's start (called with the fold's lock held).
func (m *model) saw(r events.Record, skipped string) {
	st, ok := r.Event.(events.Started)
	if !ok || skipped != "" || st.Node == "" {
		return
	}
	if m.starts == nil {
		m.starts = map[string]startAt{}
	}
	m.starts[st.TaskID] = startAt{node: st.Node, dir: st.LogDir}
}

func newModel(log events.Log, logger zerolog.Logger) *model {
	return &model{f: service.New("submitter", log, logger, nil), pred: estimate.NewPredictor(0)}
}

// seq is the last sequence folded.
func (m *model) seq() uint64 { return m.f.Seq() }

// skipped is the number of records the fold skipped.
func (m *model) skipped() uint64 { return m.f.Counters.Skipped.Load() }

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
