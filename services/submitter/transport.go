package submitter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
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

// decodeBody reads one JSON object into v, strictly: first one bounded
// pass (jsonguard: nesting at most 64 deep, no repeated keys — the last
// would win silently —, no invalid UTF-8 or lone surrogate, no number
// beyond a float64, no trailing data), then encoding/json with no unknown
// fields and a whole number where the field is an integer. An empty body
// leaves v as it is (the zero request). Errors name the field and the
// rule, never a Go type; "body" when the body as a whole is at fault. The
// document (nil for an empty body) tells which top-level keys were given.
func decodeBody(data []byte, v any) (*jsonguard.Doc, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	doc, err := jsonguard.Check(data)
	if err != nil {
		var ge *jsonguard.Error
		if errors.As(err, &ge) {
			field := ge.Path
			if field == "" {
				field = "body"
			}
			return nil, invalid(field, ge.Rule)
		}
		return nil, invalid("body", err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te) && te.Field != "":
			return nil, invalid(te.Field, jsonRule(te.Type.Kind(), te.Value))
		case errors.As(err, &te):
			return nil, invalid("body", fmt.Sprintf("must be a JSON object (got %s)", jsonValueKind(te.Value)))
		case errors.As(err, &se):
			return nil, invalid("body", fmt.Sprintf("invalid JSON at byte %d: %s", se.Offset, se.Error()))
		}
		msg := strings.TrimPrefix(err.Error(), "json: ")
		if f, ok := strings.CutPrefix(msg, "unknown field "); ok {
			return nil, invalid("body", "unknown field "+f+": not a field of this request")
		}
		return nil, invalid("body", "invalid JSON: "+msg)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, invalid("body", "invalid JSON: unexpected data after the value")
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

// jsonRule states what a field of kind k must be; got is the decoder's
// description of the value ("number 2.5", "string", "array").
func jsonRule(k reflect.Kind, got string) string {
	var rule string
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		rule = "must be a whole number"
		if n, ok := strings.CutPrefix(got, "number "); ok {
			return fmt.Sprintf("%s (got %s)", rule, n)
		}
	case reflect.Float32, reflect.Float64:
		rule = "must be a number"
	case reflect.Bool:
		rule = "must be true or false"
	case reflect.String:
		rule = "must be a JSON string"
	case reflect.Struct, reflect.Map:
		rule = "must be a JSON object"
	case reflect.Slice, reflect.Array:
		rule = "must be a JSON array"
	default:
		rule = "has the wrong type"
	}
	return fmt.Sprintf("%s (got %s)", rule, jsonValueKind(got))
}

// jsonValueKind is the decoder's description of a value without its text:
// "number 2.5" is a number.
func jsonValueKind(got string) string {
	k, _, _ := strings.Cut(got, " ")
	if k == "" {
		return "another kind of value"
	}
	return k
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
