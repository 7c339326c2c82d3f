package submitter

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/jsonguard"
)

// ops are the NATS operations this service answers, each on
// api.SubjectPrefix + op.
var ops = []string{api.OpSubmit, api.OpShow, api.OpQueue, api.OpCancel, api.OpAmend, api.OpChecklist, api.OpHistory, api.OpCheckpoint, api.OpNodes, api.OpDrain, api.OpUndrain}

// decodeBody is api.Decode, its error the submitter's.
func decodeBody(data []byte, v any) (*jsonguard.Doc, error) {
	doc, err := api.Decode(data, v)
	if err != nil {
		return nil, invalid(err.Field, err.Msg)
	}
	return doc, nil
}

// decodeSubmit decodes a submission: gpus and hours a caller leaves out
// are domain.DefaultGPUs and domain.DefaultHours, as with `gpuq submit`;
// given, they must be valid (an explicit 0 is refused).
func decodeSubmit(data []byte) (domain.Request, error) {
	var req domain.Request
	doc, err := decodeBody(data, &req)
	if err != nil {
		if oe := asOpError(err); oe.Field == "body" {
			// encoding/json does not name a time that does not parse.
			var probe struct {
				Deadline json.RawMessage `json:"deadline"`
			}
			var tm time.Time
			if json.Unmarshal(data, &probe) == nil && len(probe.Deadline) > 0 && tm.UnmarshalJSON(probe.Deadline) != nil {
				return req, invalid("deadline", fmt.Sprintf("must be an RFC 3339 time as a JSON string, e.g. \"2026-12-03T18:00:00Z\" (got %.40s)", probe.Deadline))
			}
		}
		return req, err
	}
	if doc == nil || !doc.Has("gpus") {
		req.GPUs = domain.DefaultGPUs
	}
	if doc == nil || !doc.Has("hours") {
		req.Hours = domain.DefaultHours
	}
	return req, nil
}

// call decodes a request of type Req and runs op on it.
func call[Req, Res any](data []byte, op func(Req) (Res, error)) (any, error) {
	var req Req
	if _, err := decodeBody(data, &req); err != nil {
		return nil, err
	}
	return op(req)
}

// dispatch runs one NATS operation on a request body.
func (s *server) dispatch(ctx context.Context, op string, data []byte) (res any, err error) {
	if len(data) > maxBody {
		return nil, tooLarge(len(data))
	}
	if jobOf(ctx) != nil && !slices.Contains(api.JobOps, op) {
		return nil, forbidden("op", fmt.Sprintf("a job's credential may ask only for %s, not %q", strings.Join(api.JobOps, " and "), op))
	}
	switch op {
	case api.OpSubmit:
		req, err := decodeSubmit(data)
		if err != nil {
			return nil, err
		}
		return s.submit(ctx, req)
	case api.OpShow:
		return call(data, func(r api.IDRequest) (api.TaskView, error) { return s.show(ctx, r.TaskID) })
	case api.OpQueue:
		return call(data, func(r api.QueueRequest) (queuePage, error) { return s.queuePaged(ctx, r) })
	case api.OpCancel:
		return call(data, func(r api.IDRequest) (api.TaskView, error) { return s.cancel(ctx, r) })
	case api.OpAmend:
		return call(data, func(r api.AmendRequest) (api.TaskView, error) { return s.amend(ctx, r) })
	case api.OpChecklist:
		return call(data, func(r api.ChecklistRequest) (api.TaskView, error) { return s.checklist(ctx, r) })
	case api.OpCheckpoint:
		return call(data, func(r api.CheckpointRequest) (api.CheckpointReply, error) { return s.checkpoint(ctx, r) })
	case api.OpHistory:
		return call(data, func(r api.IDRequest) ([]api.HistoryEntry, error) { return s.history(ctx, r.TaskID) })
	case api.OpNodes:
		return call(data, func(struct{}) ([]api.NodeView, error) { return s.nodes(ctx) })
	case api.OpDrain:
		return call(data, func(r api.DrainRequest) (api.NodeView, error) { return s.drain(ctx, r, false) })
	case api.OpLogs: // team-scoped only (teamOps)
		return call(data, func(r api.LogsRequest) (api.LogsReply, error) { return s.logs(ctx, r) })
	case api.OpUndrain:
		return call(data, func(r api.DrainRequest) (api.NodeView, error) { return s.drain(ctx, r, true) })
	}
	return nil, &opError{Status: http.StatusNotFound, Field: "op", Msg: fmt.Sprintf("unknown operation %q", op)}
}

// reply builds the api.Reply of a result or an error.
func reply(res any, err error) api.Reply {
	next := ""
	if p, ok := res.(queuePage); ok { // a page: its tasks, and the next's cursor
		res, next = p.Tasks, p.Next
	}
	if err == nil {
		b, merr := json.Marshal(res)
		if merr == nil {
			return api.Reply{Result: b, Next: next}
		}
		err = merr
	}
	oe := asOpError(err)
	return api.Reply{Error: oe.Msg, Field: oe.Field, NotFound: oe.NotFound, Status: oe.Status}
}

// handleNATS answers one request body for op; it never panics.
func (s *server) handleNATS(ctx context.Context, op string, data []byte) (r api.Reply) {
	defer func() {
		if p := recover(); p != nil {
			s.logger.Error().Interface("panic", p).Str("op", op).Msg("handler panicked")
			r = reply(nil, fmt.Errorf("handler panicked: %v", p))
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	res, err := s.dispatch(ctx, op, data)
	if err != nil {
		s.logErr(op, err)
	}
	return reply(res, err)
}

// serveNATS answers one NATS request.
func (s *server) serveNATS(ctx context.Context, msg *nats.Msg) {
	ctx, op := s.natsContext(ctx, msg.Subject)
	r := s.handleNATS(ctx, op, msg.Data)
	if msg.Reply == "" {
		return
	}
	b, err := json.Marshal(r)
	if err != nil {
		s.logger.Error().Err(err).Str("op", op).Msg("encoding a reply")
		return
	}
	if err := msg.Respond(b); err != nil {
		s.logger.Warn().Err(err).Str("op", op).Msg("sending a reply")
	}
}

func (s *server) logErr(op string, err error) {
	oe := asOpError(err)
	ev := s.logger.Debug()
	if oe.Status >= 500 {
		ev = s.logger.Error()
	}
	ev.Str("op", op).Int("status", oe.Status).Str("field", oe.Field).Msg(oe.Msg)
}
