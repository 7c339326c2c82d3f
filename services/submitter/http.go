package submitter

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/metrics"
)

// handler is the HTTP API. Every route calls the same operations as the
// NATS API.
func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("POST /v1/tasks", s.httpSubmit)
	mux.HandleFunc("GET /v1/tasks", s.httpQueue)
	mux.HandleFunc("GET /v1/tasks/{id}", s.httpShow)
	mux.HandleFunc("POST /v1/tasks/{id}/cancel", s.httpCancel)
	mux.HandleFunc("POST /v1/tasks/{id}/amend", s.httpAmend)
	mux.HandleFunc("POST /v1/tasks/{id}/checklist", s.httpChecklist)
	mux.HandleFunc("POST /v1/tasks/{id}/checkpoint", s.httpCheckpoint)
	mux.HandleFunc("GET /v1/tasks/{id}/history", s.httpHistory)
	mux.HandleFunc("GET /v1/nodes", s.httpNodes)
	mux.HandleFunc("POST /v1/nodes/{node}/drain", s.httpDrain(false))
	mux.HandleFunc("POST /v1/nodes/{node}/undrain", s.httpDrain(true))
	mux.HandleFunc("GET /v1/tasks/{id}/logs", s.httpLogs)
	mux.HandleFunc("GET /v1/tasks/{id}/explain", s.httpExplain)
	mux.HandleFunc("GET /v1/tasks/{id}/estimates", s.httpEstimates)
	mux.HandleFunc("GET /v1/plan", s.httpPlan)
	mux.HandleFunc("GET /v1/teams", s.httpTeams)
	mux.HandleFunc("GET /v1/stats", s.httpStats)
	s.streamRoutes(mux) // GET /v1/events, the dashboard at / (stream.go, web.go)
	// The same paths without a method answer 405 in JSON (ServeMux's own
	// 405 is plain text); anything else is a JSON 404.
	for path, allow := range map[string]string{
		"/healthz":                  "GET, HEAD",
		"/v1/tasks":                 "GET, HEAD, POST",
		"/v1/tasks/{id}":            "GET, HEAD",
		"/v1/tasks/{id}/cancel":     "POST",
		"/v1/tasks/{id}/amend":      "POST",
		"/v1/tasks/{id}/checklist":  "POST",
		"/v1/tasks/{id}/checkpoint": "POST",
		"/v1/tasks/{id}/history":    "GET, HEAD",
		"/v1/nodes":                 "GET, HEAD",
		"/v1/nodes/{node}/drain":    "POST",
		"/v1/nodes/{node}/undrain":  "POST",
		"/v1/tasks/{id}/logs":       "GET, HEAD",
		"/v1/events":                "GET",
		"/v1/tasks/{id}/explain":    "GET, HEAD",
		"/v1/tasks/{id}/estimates":  "GET, HEAD",
		"/v1/plan":                  "GET, HEAD",
		"/v1/teams":                 "GET, HEAD",
		"/v1/stats":                 "GET, HEAD",
	} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, &opError{Status: http.StatusMethodNotAllowed, Msg: fmt.Sprintf("method %s not allowed; use %s", r.Method, allow)})
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &opError{Status: http.StatusNotFound, Msg: "no such route: " + r.URL.Path})
	})
	top := http.NewServeMux()
	if s.metrics != nil {
		top.Handle("GET "+metrics.Path, s.adminOnly(metrics.Handler(s.metrics)))
	}
	top.Handle("/", s.guard(mux))
	return s.browser(top)
}

// browser refuses what a web page may have made a browser send
// (browser.go), on every route.
func (s *server) browser(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.browserCheck(r); err != nil {
			s.fail(w, "http", err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// adminOnly lets only the admin's token through when tokens are
// configured (401 without a known token, 403 with a team's); served
// before the read model is ready too.
func (s *server) adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.tokens != nil {
			c, err := s.tokens.Caller(r.Header.Get("Authorization"))
			if err != nil {
				w.Header().Set("WWW-Authenticate", `Bearer realm="gpuq"`)
				writeError(w, &opError{Status: http.StatusUnauthorized, Field: "authorization", Msg: err.Error()})
				return
			}
			if !c.Admin {
				writeError(w, forbidden("authorization", fmt.Sprintf("%s is for the admin token (or the --metrics listener); the caller acts for team %s", r.URL.Path, c.Team)))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// guard recovers panics and answers 503 until the service is ready.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.logger.Error().Interface("panic", p).Str("path", r.URL.Path).Msg("http handler panicked")
				writeError(w, fmt.Errorf("handler panicked: %v", p))
			}
		}()
		r, ok := s.authenticate(w, r)
		if !ok {
			return
		}
		if !s.ready.Load() && r.URL.Path != "/healthz" {
			writeError(w, &opError{Status: http.StatusServiceUnavailable, Msg: "submitter is not ready (catching up with the log or stopping)"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, starting(s.m.problem()))
		return
	}
	if err := s.m.problem(); err != nil { // e.g. the server refused its consumer
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": err.Error()})
		return
	}
	if s.health != nil {
		if err := s.health(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readBody decodes the request body (at most maxBody bytes) into v.
func readBody(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := bodyOf(w, r)
	if err != nil {
		return err
	}
	_, err = decodeBody(data, v)
	return err
}

// bodyOf reads the request body, at most maxBody bytes.
func bodyOf(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(-1)
		}
		return nil, invalid("body", "could not be read: "+err.Error())
	}
	return data, nil
}

// pathID puts the path's task id into a body's task_id, which may be empty
// or the same.
func pathID(r *http.Request, bodyID *string) error {
	id := r.PathValue("id")
	if *bodyID != "" && *bodyID != id {
		return invalid("task_id", fmt.Sprintf("%q does not match the task %q in the path", *bodyID, id))
	}
	*bodyID = id
	return nil
}

func (s *server) httpSubmit(w http.ResponseWriter, r *http.Request) {
	data, err := bodyOf(w, r)
	var req domain.Request
	fromHeader := false
	if err == nil {
		req, err = decodeSubmit(data)
	}
	if err == nil {
		fromHeader, err = idempotencyHeader(r, &req)
	}
	if err != nil {
		s.fail(w, "submit", err)
		return
	}
	rep, err := s.submit(r.Context(), req)
	if err != nil {
		// A key from the header that is not a valid key is named as sent.
		var fe *domain.FieldError
		if fromHeader && errors.As(err, &fe) && fe.Field == "idempotency_key" {
			err = invalid(idempotencyKeyHeader, fe.Rule)
		}
		s.fail(w, "submit", err)
		return
	}
	status := http.StatusCreated
	if rep.Duplicate {
		status = http.StatusOK
	}
	w.Header().Set("Location", "/v1/tasks/"+rep.TaskID)
	writeJSON(w, status, rep)
}

// idempotencyKeyHeader carries a submission's idempotency key as the IETF
// draft (draft-ietf-httpapi-idempotency-key-header) and Stripe send it.
const idempotencyKeyHeader = "Idempotency-Key"

// idempotencyHeader takes the Idempotency-Key header into the request: it
// may stand alone or repeat the body's idempotency_key; two different keys
// (or the header twice) are refused. fromHeader: the key came from it.
func idempotencyHeader(r *http.Request, req *domain.Request) (fromHeader bool, err error) {
	vs := r.Header.Values(idempotencyKeyHeader)
	switch {
	case len(vs) == 0:
		return false, nil
	case len(vs) > 1:
		return false, invalid(idempotencyKeyHeader, fmt.Sprintf("must be given once (got %d)", len(vs)))
	}
	key := vs[0]
	if key == "" {
		return false, invalid(idempotencyKeyHeader, "must not be empty")
	}
	if req.IdempotencyKey != "" && req.IdempotencyKey != key {
		return false, invalid(idempotencyKeyHeader, fmt.Sprintf("%q differs from the body's idempotency_key %q; send one key", key, req.IdempotencyKey))
	}
	fromHeader = req.IdempotencyKey == ""
	req.IdempotencyKey = key
	return fromHeader, nil
}

func (s *server) httpQueue(w http.ResponseWriter, r *http.Request) {
	all := false
	if v := r.URL.Query().Get("all"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			s.fail(w, "queue", invalid("all", fmt.Sprintf("must be true or false (got %q)", v)))
			return
		}
		all = b
	}
	if q := r.URL.Query(); q.Has("limit") || q.Has("after") {
		s.httpQueuePage(w, r, all)
		return
	}
	res, err := s.queue(r.Context(), all)
	s.respond(w, "queue", res, err)
}

func (s *server) httpShow(w http.ResponseWriter, r *http.Request) {
	res, err := s.show(r.Context(), r.PathValue("id"))
	s.respond(w, "show", res, err)
}

func (s *server) httpCancel(w http.ResponseWriter, r *http.Request) {
	var req api.IDRequest
	err := readBody(w, r, &req)
	if err == nil {
		err = pathID(r, &req.TaskID)
	}
	if err != nil {
		s.fail(w, "cancel", err)
		return
	}
	res, err := s.cancel(r.Context(), req)
	s.respond(w, "cancel", res, err)
}

func (s *server) httpAmend(w http.ResponseWriter, r *http.Request) {
	var req api.AmendRequest
	err := readBody(w, r, &req)
	if err == nil {
		err = pathID(r, &req.TaskID)
	}
	if err != nil {
		s.fail(w, "amend", err)
		return
	}
	res, err := s.amend(r.Context(), req)
	s.respond(w, "amend", res, err)
}

func (s *server) httpChecklist(w http.ResponseWriter, r *http.Request) {
	var req api.ChecklistRequest
	err := readBody(w, r, &req)
	if err == nil {
		err = pathID(r, &req.TaskID)
	}
	if err != nil {
		s.fail(w, "checklist", err)
		return
	}
	res, err := s.checklist(r.Context(), req)
	s.respond(w, "checklist", res, err)
}

func (s *server) httpCheckpoint(w http.ResponseWriter, r *http.Request) {
	var req api.CheckpointRequest
	err := readBody(w, r, &req)
	if err == nil {
		err = pathID(r, &req.TaskID)
	}
	if err != nil {
		s.fail(w, "checkpoint", err)
		return
	}
	res, err := s.checkpoint(r.Context(), req)
	s.respond(w, "checkpoint", res, err)
}

func (s *server) httpHistory(w http.ResponseWriter, r *http.Request) {
	res, err := s.history(r.Context(), r.PathValue("id"))
	s.respond(w, "history", res, err)
}

// respond writes res with 200, or the error.
func (s *server) respond(w http.ResponseWriter, op string, res any, err error) {
	if err != nil {
		s.fail(w, op, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *server) fail(w http.ResponseWriter, op string, err error) {
	s.logErr(op, err)
	writeError(w, err)
}

// writeError writes {"error": ..., "field": ..., "not_found": ...} with the
// error's status.
func writeError(w http.ResponseWriter, err error) {
	oe := asOpError(err)
	writeJSON(w, oe.Status, api.Reply{Error: oe.Msg, Field: oe.Field, NotFound: oe.NotFound})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(api.Reply{Error: "internal error: encoding the answer: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
