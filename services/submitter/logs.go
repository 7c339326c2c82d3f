package submitter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/events"
)

// lastStart is the node and log directory of the task's latest started
// event (ok false when it never started). The fold keeps neither: they are
// read from the task's started subject.
func (s *server) lastStart(ctx context.Context, id string) (node, dir string, ok bool, err error) {
	subject := events.TaskPrefix + id + "." + string(events.TypeStarted)
	decode := func(m events.Stored) {
		var env events.Envelope
		var st events.Started
		if json.Unmarshal(m.Data, &env) != nil || json.Unmarshal(env.Data, &st) != nil || st.Node == "" {
			return // skipped, as the fold skips it
		}
		node, dir, ok = st.Node, st.LogDir, true
	}
	// One direct get of the subject's last message: no consumer, nothing
	// left on the server, however many ask.
	if lg, isLG := s.reads.(events.LastGetter); isLG {
		m, found, err := lg.Last(ctx, subject)
		if err != nil || !found {
			return "", "", false, err
		}
		decode(m)
		return node, dir, ok, nil
	}
	_, err = s.reads.Read(ctx, 0, subject, func(m events.Stored) error {
		decode(m)
		return nil
	})
	return node, dir, ok, err
}

// withLog fills the view's log location from the task's latest start.
func (s *server) withLog(ctx context.Context, v *api.TaskView) error {
	node, dir, ok, err := s.lastStart(ctx, v.TaskID)
	if err != nil || !ok {
		return err
	}
	setLog(v, node, dir)
	return nil
}

// setLog fills the view's log location from a start's node and directory.
func setLog(v *api.TaskView, node, dir string) {
	v.LogNode = node
	if dir != "" {
		v.LogPath = filepath.Join(dir, "output.log")
	}
}

// httpLogs answers GET /v1/tasks/{id}/logs[?offset=N|tail=N][&max_bytes=N]:
// a piece of the task's output, asked of the agent of the node it last
// started on (api.LogsReply).
func (s *server) httpLogs(w http.ResponseWriter, r *http.Request) {
	req := api.LogsRequest{TaskID: r.PathValue("id")}
	q := r.URL.Query()
	for key, p := range map[string]*int64{"offset": &req.Offset} {
		if v := q.Get(key); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				s.fail(w, "logs", invalid(key, fmt.Sprintf("must be a whole number ≥ 0 (got %q)", v)))
				return
			}
			*p = n
		}
	}
	for key, p := range map[string]*int{"tail": &req.Tail, "max_bytes": &req.MaxBytes} {
		if v := q.Get(key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				s.fail(w, "logs", invalid(key, fmt.Sprintf("must be a whole number ≥ 0 (got %q)", v)))
				return
			}
			*p = n
		}
	}
	res, err := s.logs(r.Context(), req)
	s.respond(w, "logs", res, err)
}

// teamOps are the NATS operations answered on the team-scoped subjects
// only (gpuq.api.v1.team.<team>.<op>): logs, which a team's credential
// may not ask of the agents itself; the unscoped gpuq.api.v1.logs.<node>
// is the agents' own.
var teamOps = []string{api.OpLogs}

// logs asks the agent of the task's node for a piece of its output.
func (s *server) logs(ctx context.Context, req api.LogsRequest) (api.LogsReply, error) {
	v, err := s.show(ctx, req.TaskID)
	if err != nil {
		return api.LogsReply{}, err
	}
	if v.LogNode == "" {
		return api.LogsReply{}, &opError{Status: http.StatusConflict, Field: "task_id",
			Msg: fmt.Sprintf("task %s is %s and has not started: no output yet", v.TaskID, v.State)}
	}
	if s.nc == nil {
		return api.LogsReply{}, &opError{Status: http.StatusServiceUnavailable, Msg: "this submitter has no NATS connection to ask the agents"}
	}
	cl := &api.Client{NC: s.nc, Timeout: requestTimeout / 2}
	out, err := cl.Logs(v.LogNode, req)
	var e *api.Error
	switch {
	case err == nil:
		return out, nil
	case errors.As(err, &e) && e.NotFound:
		return out, &opError{Status: http.StatusNotFound, NotFound: true, Msg: e.Msg}
	case errors.As(err, &e) && e.Field != "":
		return out, invalid(e.Field, e.Msg)
	}
	return out, &opError{Status: http.StatusBadGateway, Msg: err.Error()}
}
