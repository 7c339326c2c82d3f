package submitter

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
)

// TestIdempotencyKeyReuse: a key reused with another payload is refused
// (409, field idempotency_key) on every transport; before, the first task
// was answered as if it were what the caller asked for.
func TestIdempotencyKeyReuse(t *testing.T) {
	first := validReq()
	first.IdempotencyKey = "ci-7"
	first.Env = map[string]string{"SEED": "1"}
	first.Dir = "/srv/exp/a"
	cases := map[string]struct {
		edit      func(r *domain.Request)
		amend     bool // the first task was amended before the retry
		wantDup   bool
		wantDiffs string // the field the 409 names as differing
	}{
		"the same request":              {edit: func(*domain.Request) {}, wantDup: true},
		"the same, priority spelt HIGH": {edit: func(r *domain.Request) { r.Priority = "HIGH" }, wantDup: true},
		"the same, name with blanks":    {edit: func(r *domain.Request) { r.Name = "  " + r.Name + " " }, wantDup: true},
		"the same after an amend":       {edit: func(*domain.Request) {}, amend: true, wantDup: true},
		"the same, allow_unplaceable":   {edit: func(r *domain.Request) { r.AllowUnplaceable = true }, wantDup: true},
		"another command":               {edit: func(r *domain.Request) { r.Command = "rm -rf /" }, wantDiffs: "command"},
		"more gpus":                     {edit: func(r *domain.Request) { r.GPUs = 4 }, wantDiffs: "gpus"},
		"another name":                  {edit: func(r *domain.Request) { r.Name = "other" }, wantDiffs: "name"},
		"another priority":              {edit: func(r *domain.Request) { r.Priority = "critical" }, wantDiffs: "priority"},
		"another estimate":              {edit: func(r *domain.Request) { r.Hours = 3.5 }, wantDiffs: "hours"},
		"another hypothesis":            {edit: func(r *domain.Request) { r.Hypothesis = "x" }, wantDiffs: "hypothesis"},
		"not preemptible":               {edit: func(r *domain.Request) { r.NoPreempt = true }, wantDiffs: "no_preempt"},
		"another env value":             {edit: func(r *domain.Request) { r.Env = map[string]string{"SEED": "2"} }, wantDiffs: "env"},
		"no env":                        {edit: func(r *domain.Request) { r.Env = nil }, wantDiffs: "env"},
		"another dir":                   {edit: func(r *domain.Request) { r.Dir = "/srv/exp/b" }, wantDiffs: "dir"},
		"another gpu model":             {edit: func(r *domain.Request) { r.GPUModel = "H100" }, wantDiffs: "gpu_model"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			orig := h.submit(first)
			if tc.amend {
				if _, err := h.s.amend(h.ctx, api.AmendRequest{TaskID: orig.TaskID, GPUs: 1, Hypothesis: "amended"}); err != nil {
					t.Fatal(err)
				}
			}
			again := first
			again.Env = map[string]string{"SEED": "1"}
			tc.edit(&again)

			check := func(how string, code int, field, msg string, rep api.SubmitReply) {
				t.Helper()
				if tc.wantDup {
					if code != http.StatusOK || rep.TaskID != orig.TaskID || !rep.Duplicate {
						t.Errorf("%s: %d %+v %s, want the original task %s as a duplicate", how, code, rep, msg, orig.TaskID)
					}
					return
				}
				if code != http.StatusConflict || field != "idempotency_key" || !strings.Contains(msg, "("+tc.wantDiffs+" differs)") || !strings.Contains(msg, orig.TaskID) {
					t.Errorf("%s: %d field %q %q, want 409 naming idempotency_key, %s and the task", how, code, field, msg, tc.wantDiffs)
				}
			}

			rep, err := h.s.submit(h.ctx, again)
			oe := &opError{Status: http.StatusOK}
			if err != nil {
				oe = asOpError(err)
			}
			check("internal", oe.Status, oe.Field, oe.Msg, rep)

			r := h.natsCall(api.OpSubmit, again)
			var nrep api.SubmitReply
			code := http.StatusOK
			if r.Error != "" {
				code = http.StatusConflict // NATS has no status; the field says it
				if r.Field != "idempotency_key" {
					code = 0
				}
			} else if err := jsonDecode(r.Result, &nrep); err != nil {
				t.Fatal(err)
			}
			check("nats", code, r.Field, r.Error, nrep)

			w := h.httpCall("POST", "/v1/tasks", mustJSON(t, again))
			var hrep api.SubmitReply
			var hr api.Reply
			if w.Code == http.StatusOK {
				_ = jsonDecode(w.Body.Bytes(), &hrep)
			} else {
				hr = errReply(t, w)
			}
			check("http", w.Code, hr.Field, hr.Error, hrep)

			if n := len(mustQueue(t, h)); n != 1 {
				t.Errorf("%d tasks, want 1", n)
			}
		})
	}
}

// TestIdempotencyKeyReuseRace: the same check where a concurrent request
// with the same key but another payload won the append (the stream's
// de-duplication answers with its sequence).
func TestIdempotencyKeyReuseRace(t *testing.T) {
	il := &interceptLog{Log: memlog.New()}
	h := newHarness(t, il)
	req := validReq()
	req.IdempotencyKey = "ci-8"
	if err := req.Validate(testLimits); err != nil {
		t.Fatal(err)
	}
	other := req
	other.Command = "python other.py"
	il.set(func(m events.Msg) bool { return m.MsgID != "" }, func(ctx context.Context, inner events.Log, m events.Msg) {
		if _, err := events.Append(ctx, inner, submittedOf(other, "01a23c92-0000-7000-8000-000000000001", t0), events.Meta{Time: t0}, m.MsgID, nil); err != nil {
			t.Errorf("competitor: %v", err)
		}
	})
	_, err := h.s.submit(h.ctx, req)
	if oe := asOpError(err); err == nil || oe.Status != http.StatusConflict || oe.Field != "idempotency_key" || !strings.Contains(oe.Msg, "command differs") {
		t.Fatalf("submit: %v, want 409 idempotency_key (command differs)", err)
	}
}

// TestIdempotencyKeyHeader: the Idempotency-Key header (the IETF draft's,
// Stripe's) keys a submission like the body's idempotency_key; before, it
// was ignored and every retry made a new task.
func TestIdempotencyKeyHeader(t *testing.T) {
	body := func(key string) string {
		r := validReq()
		r.IdempotencyKey = key
		return mustJSON(t, r)
	}
	type try struct {
		key, body string // header (none when "-"), body
		want      int
		wantField string
	}
	cases := map[string]struct {
		tries     []try
		wantTasks int
	}{
		"header only, retried":  {tries: []try{{"k1", body(""), 201, ""}, {"k1", body(""), 200, ""}}, wantTasks: 1},
		"header, then the body": {tries: []try{{"k1", body(""), 201, ""}, {"-", body("k1"), 200, ""}}, wantTasks: 1},
		"both, the same":        {tries: []try{{"k1", body("k1"), 201, ""}, {"k1", body(""), 200, ""}}, wantTasks: 1},
		"both, different":       {tries: []try{{"k1", body("k2"), 400, "Idempotency-Key"}}, wantTasks: 0},
		"empty header":          {tries: []try{{"", body(""), 400, "Idempotency-Key"}}, wantTasks: 0},
		"a header key too long": {tries: []try{{strings.Repeat("k", 257), body(""), 400, "Idempotency-Key"}}, wantTasks: 0},
		"a body key too long":   {tries: []try{{"-", body(strings.Repeat("k", 257)), 400, "idempotency_key"}}, wantTasks: 0},
		"header reused, another payload": {tries: []try{{"k1", body(""), 201, ""},
			{"k1", strings.Replace(body(""), "python train.py", "python other.py", 1), 409, "idempotency_key"}}, wantTasks: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			for i, tr := range tc.tries {
				hdr := http.Header{"Content-Type": {"application/json"}}
				if tr.key != "-" {
					hdr["Idempotency-Key"] = []string{tr.key}
				}
				w := h.httpCallHeader("POST", "/v1/tasks", tr.body, hdr)
				if w.Code != tr.want {
					t.Fatalf("try %d: %d, want %d: %s", i, w.Code, tr.want, w.Body)
				}
				if tr.wantField != "" {
					if got := errReply(t, w).Field; got != tr.wantField {
						t.Errorf("try %d: field %q, want %q", i, got, tr.wantField)
					}
				}
			}
			if n := len(mustQueue(t, h)); n != tc.wantTasks {
				t.Errorf("%d tasks, want %d", n, tc.wantTasks)
			}
		})
	}
	// The header twice is refused.
	h := newHarness(t, nil)
	w := h.httpCallHeader("POST", "/v1/tasks", body(""), http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {"a", "b"}})
	if w.Code != 400 || errReply(t, w).Field != "Idempotency-Key" {
		t.Errorf("two headers: %d %s", w.Code, w.Body)
	}
}

func mustQueue(t *testing.T, h *harness) []api.TaskView {
	t.Helper()
	all, err := h.s.queue(h.ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func jsonDecode(b []byte, v any) error { return json.Unmarshal(b, v) }
