package submitter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
)

// ops are the NATS operations this service answers, each on
// api.SubjectPrefix + op.
var ops = []string{api.OpSubmit, api.OpShow, api.OpQueue, api.OpCancel, api.OpAmend, api.OpChecklist, api.OpHistory, api.OpCheckpoint, api.OpNodes, api.OpDrain, api.OpUndrain}

// decodeBody reads one JSON value into v, rejecting unknown fields and
// trailing data. An empty body leaves v as it is (the zero request).
// Errors name the field when a value has the wrong type, else "body".
func decodeBody(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return invalid(te.Field, fmt.Sprintf("must be a JSON %s (got %s)", jsonKind(te.Type.Kind().String()), te.Value))
		}
		return invalid("body", "invalid JSON: "+strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("body", "invalid JSON: unexpected data after the value")
	}
	return nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		return "number"
	case "bool":
		return "boolean"
	case "struct", "map":
		return "object"
	case "slice", "array":
		return "array"
	}
	return goKind
}

// call decodes a request of type Req and runs op on it.
func call[Req, Res any](data []byte, op func(Req) (Res, error)) (any, error) {
	var req Req
	if err := decodeBody(data, &req); err != nil {
		return nil, err
	}
	return op(req)
}

// dispatch runs one NATS operation on a request body.
func (s *server) dispatch(ctx context.Context, op string, data []byte) (res any, err error) {
	if len(data) > maxBody {
		return nil, &opError{Status: http.StatusRequestEntityTooLarge, Field: "body", Msg: fmt.Sprintf("is larger than %d bytes", maxBody)}
	}
	switch op {
	case api.OpSubmit:
		return call(data, func(r domain.Request) (api.SubmitReply, error) { return s.submit(ctx, r) })
	case api.OpShow:
		return call(data, func(r api.IDRequest) (api.TaskView, error) { return s.show(ctx, r.TaskID) })
	case api.OpQueue:
		return call(data, func(r api.QueueRequest) ([]api.TaskView, error) { return s.queue(ctx, r.All) })
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
	case api.OpUndrain:
		return call(data, func(r api.DrainRequest) (api.NodeView, error) { return s.drain(ctx, r, true) })
	}
	return nil, &opError{Status: http.StatusNotFound, Field: "op", Msg: fmt.Sprintf("unknown operation %q", op)}
}

// reply builds the api.Reply of a result or an error.
func reply(res any, err error) api.Reply {
	if err == nil {
		b, merr := json.Marshal(res)
		if merr == nil {
			return api.Reply{Result: b}
		}
		err = merr
	}
	oe := asOpError(err)
	return api.Reply{Error: oe.Msg, Field: oe.Field, NotFound: oe.NotFound}
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
	op := strings.TrimPrefix(msg.Subject, api.SubjectPrefix)
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
