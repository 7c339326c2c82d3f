package tasksock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/gpuq/gpuq/pkg/jsonguard"
)

// MaxRef bounds a checkpoint's ref, in bytes (Linux's PATH_MAX, as
// gpuq checkpoint).
const MaxRef = 4096

// apiError is a refused request: its status, the field at fault (the wire
// name) and why.
type apiError struct {
	Status int
	Field  string
	Msg    string
}

func (e *apiError) Error() string { return e.Msg }

func bad(field, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Field: field, Msg: field + ": " + fmt.Sprintf(format, args...)}
}

func (k *Socket) handler() http.Handler {
	mux := http.NewServeMux()
	route := func(path, method string, h func(r *http.Request) (int, any, error)) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if err := k.admit(peerOf(r.Context())); err != nil {
				writeErr(w, &apiError{Status: http.StatusForbidden, Field: "peer", Msg: err.Error()})
				return
			}
			if r.Method != method {
				w.Header().Set("Allow", method)
				writeErr(w, &apiError{Status: http.StatusMethodNotAllowed, Field: "method",
					Msg: fmt.Sprintf("method: %s takes %s (got %s)", path, method, r.Method)})
				return
			}
			status, v, err := h(r)
			if err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, status, v)
		})
	}
	route("/v1/task", http.MethodGet, func(r *http.Request) (int, any, error) {
		if err := noQuery(r); err != nil {
			return 0, nil, err
		}
		return http.StatusOK, k.run.Task, nil
	})
	route("/v1/preemption", http.MethodGet, k.preemption)
	route("/v1/checkpoint", http.MethodPost, k.checkpoint)
	route("/v1/progress", http.MethodPost, k.reportProgress)
	mux.HandleFunc("GET /v1/progress", func(w http.ResponseWriter, r *http.Request) {
		if err := k.admit(peerOf(r.Context())); err != nil {
			writeErr(w, &apiError{Status: http.StatusForbidden, Field: "peer", Msg: err.Error()})
			return
		}
		p, ok := k.Progress()
		if !ok {
			writeJSON(w, http.StatusOK, map[string]any{"reported": false})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"reported": true, "step": p.Step, "total": p.Total, "fraction": p.Fraction, "at": p.At})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, &apiError{Status: http.StatusNotFound, Field: "path",
			Msg: fmt.Sprintf("path: no %s here (GET /v1/task, GET /v1/preemption, POST /v1/checkpoint, POST|GET /v1/progress)", r.URL.Path)})
	})
	return mux
}

func peerOf(ctx context.Context) int {
	pid, _ := ctx.Value(peerKey{}).(int)
	return pid
}

// noQuery refuses query parameters on a path that takes none.
func noQuery(r *http.Request, allowed ...string) error {
	for name := range r.URL.Query() {
		ok := false
		for _, a := range allowed {
			ok = ok || name == a
		}
		if !ok {
			return bad(name, "unknown query parameter")
		}
	}
	return nil
}

// parseWait reads ?wait: a Go duration (30s, 2m) or a number of seconds,
// between 0 and MaxWait.
func parseWait(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, bad("wait", "must be a duration such as 30s or a number of seconds (got %q)", s)
		}
		if f < 0 || f > MaxWait.Seconds() {
			return 0, bad("wait", "must be between 0s and %s (got %q)", MaxWait, s)
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d < 0 || d > MaxWait {
		return 0, bad("wait", "must be between 0s and %s (got %q)", MaxWait, s)
	}
	return d, nil
}

// preemption answers GET /v1/preemption[?wait=D]: at once when the request
// is known or no wait is given, else when it comes or the wait ends.
func (k *Socket) preemption(r *http.Request) (int, any, error) {
	if err := noQuery(r, "wait"); err != nil {
		return 0, nil, err
	}
	if len(r.URL.Query()["wait"]) > 1 {
		return 0, nil, bad("wait", "give it once")
	}
	wait, err := parseWait(r.URL.Query().Get("wait"))
	if err != nil {
		return 0, nil, err
	}
	k.mu.Lock()
	p, changed := k.pre, k.changed
	if p.Requested || wait == 0 {
		k.mu.Unlock()
		return http.StatusOK, p, nil
	}
	if k.waiting >= MaxWaiting {
		k.mu.Unlock()
		return 0, nil, &apiError{Status: http.StatusTooManyRequests, Field: "wait",
			Msg: fmt.Sprintf("wait: at most %d long-polls wait at once on a task's socket; poll without wait, or share one", MaxWaiting)}
	}
	k.waiting++
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.waiting--
		k.mu.Unlock()
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-r.Context().Done():
	}
	return http.StatusOK, k.Preemption(), nil
}

// decodeBody reads a JSON object body into v: at most MaxBody bytes, with
// no unknown field and nothing after it; the content type, when given,
// must be JSON.
func decodeBody(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return &apiError{Status: http.StatusUnsupportedMediaType, Field: "Content-Type",
				Msg: fmt.Sprintf("Content-Type: must be application/json (got %q)", ct)}
		}
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		return bad("body", "could not be read: %v", err)
	}
	if len(b) > MaxBody {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Field: "body", Msg: fmt.Sprintf("body: must be at most %d bytes", MaxBody)}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return bad("body", "is empty: send a JSON object")
	}
	if e := jsonguard.Strict(b, v); e != nil {
		switch e.Kind {
		case jsonguard.KindType:
			return bad(e.Field, "must be a %s (got %s)", e.Type, e.Value)
		case jsonguard.KindNotObject:
			return bad("body", "must be a JSON object (got %s)", e.Value)
		case jsonguard.KindSyntax:
			return bad("body", "is not JSON: %v", e.Err)
		case jsonguard.KindUnknownField:
			return bad(e.Field, "unknown field")
		case jsonguard.KindTrailing:
			return bad("body", "must hold one JSON object")
		}
		return bad("body", "is not a JSON object: %v", e.Err)
	}
	return nil
}

// checkpointRequest is POST /v1/checkpoint's body; pointers tell an
// absent field from a zero.
type checkpointRequest struct {
	Ref  *string `json:"ref"`
	Step *int64  `json:"step"`
}

func (k *Socket) checkpoint(r *http.Request) (int, any, error) {
	if err := noQuery(r); err != nil {
		return 0, nil, err
	}
	var req checkpointRequest
	if err := decodeBody(r, &req); err != nil {
		return 0, nil, err
	}
	if req.Ref == nil || strings.TrimSpace(*req.Ref) == "" {
		return 0, nil, bad("ref", "is required: say where the committed checkpoint is (a path or URI)")
	}
	ref := *req.Ref
	if len(ref) > MaxRef {
		return 0, nil, bad("ref", "must be at most %d bytes (got %d)", MaxRef, len(ref))
	}
	for i, c := range ref {
		if c == unicode.ReplacementChar || unicode.IsControl(c) {
			return 0, nil, bad("ref", "must be valid UTF-8 without control characters (got %q at byte %d)", c, i)
		}
	}
	c := Checkpoint{Ref: ref}
	if req.Step != nil {
		if *req.Step < 0 {
			return 0, nil, bad("step", "must be at least 0 (got %d)", *req.Step)
		}
		c.Step = *req.Step
	}
	if k.srv.backend == nil {
		return 0, nil, &apiError{Status: http.StatusServiceUnavailable, Field: "", Msg: "the node records no checkpoints"}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	out, err := k.srv.backend.Checkpoint(ctx, k.run.Task, c)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return 0, nil, ae
		}
		return 0, nil, &apiError{Status: http.StatusServiceUnavailable, Msg: "the checkpoint was not recorded: " + err.Error()}
	}
	if out.Spooled {
		return http.StatusAccepted, out, nil
	}
	return http.StatusCreated, out, nil
}

// progressRequest is POST /v1/progress's body.
type progressRequest struct {
	Step     *int64   `json:"step"`
	Total    *int64   `json:"total"`
	Fraction *float64 `json:"fraction"`
}

func (k *Socket) reportProgress(r *http.Request) (int, any, error) {
	if err := noQuery(r); err != nil {
		return 0, nil, err
	}
	var req progressRequest
	if err := decodeBody(r, &req); err != nil {
		return 0, nil, err
	}
	var p Progress
	switch {
	case req.Fraction != nil && (req.Step != nil || req.Total != nil):
		return 0, nil, bad("fraction", "give either step and total, or fraction, not both")
	case req.Fraction != nil:
		f := *req.Fraction
		if !(f >= 0 && f <= 1) {
			return 0, nil, bad("fraction", "must be between 0 and 1 (got %v)", f)
		}
		p.Fraction = f
	case req.Step == nil:
		return 0, nil, bad("step", "is required with total (or give fraction)")
	case req.Total == nil:
		return 0, nil, bad("total", "is required with step (or give fraction)")
	case *req.Total <= 0:
		return 0, nil, bad("total", "must be at least 1 (got %d)", *req.Total)
	case *req.Step < 0 || *req.Step > *req.Total:
		return 0, nil, bad("step", "must be between 0 and total %d (got %d)", *req.Total, *req.Step)
	default:
		p.Step, p.Total = *req.Step, *req.Total
		p.Fraction = float64(p.Step) / float64(p.Total)
	}
	p.At = k.srv.now().UTC()
	k.mu.Lock()
	k.progress = &p
	k.mu.Unlock()
	return http.StatusOK, p, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(v)
	_, _ = w.Write(append(b, '\n'))
}

func writeErr(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{Status: http.StatusInternalServerError, Msg: err.Error()}
	}
	body := map[string]string{"error": ae.Msg}
	if ae.Field != "" {
		body["field"] = ae.Field
	}
	writeJSON(w, ae.Status, body)
}

// Refuse makes an error the socket answers with status and field (a
// Backend's refusal, say 409 when the task no longer runs here).
func Refuse(status int, field, msg string) error {
	return &apiError{Status: status, Field: field, Msg: msg}
}
