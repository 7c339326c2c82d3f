package submitter

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/jsonguard/jsonguardtest"
)

// submitBody is a valid submission as JSON with edit applied to its
// fields (a nil value removes the field; a json.RawMessage goes in as
// is).
func submitBody(t *testing.T, edit map[string]any) string {
	t.Helper()
	m := map[string]any{"name": "bert-base", "team": "nlp", "priority": "high", "gpus": 2, "hours": 3,
		"hypothesis": "warmup 10k beats 2k", "command": "python train.py"}
	for k, v := range edit {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSubmitValidOrRefused: every submission is either valid, and
// recorded as given (or with the documented defaults), or refused naming
// the wire field and the rule — the same over HTTP and NATS. Each case
// was accepted, repaired or misnamed before.
func TestSubmitValidOrRefused(t *testing.T) {
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	nested := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	type want struct {
		status int    // HTTP
		field  string // "" for a success
		msg    string // part of the error
		gpus   int    // for a success
		hours  float64
	}
	cases := map[string]struct {
		body string
		want want
	}{
		"valid": {body: submitBody(t, nil), want: want{status: 201, gpus: 2, hours: 3}},
		"gpus and hours omitted take the defaults": {body: submitBody(t, map[string]any{"gpus": nil, "hours": nil}),
			want: want{status: 201, gpus: domain.DefaultGPUs, hours: domain.DefaultHours}},
		"gpus omitted":      {body: submitBody(t, map[string]any{"gpus": nil}), want: want{status: 201, gpus: 1, hours: 3}},
		"hours omitted":     {body: submitBody(t, map[string]any{"hours": nil}), want: want{status: 201, gpus: 2, hours: 4}},
		"gpus explicitly 0": {body: submitBody(t, map[string]any{"gpus": 0}), want: want{status: 400, field: "gpus", msg: "must be between 1 and 8 (got 0)"}},
		"hours explicitly 0": {body: submitBody(t, map[string]any{"hours": 0}),
			want: want{status: 400, field: "hours", msg: "must be between 1 s (0.000278) and 48 hours (got 0)"}},
		"hours overflowing": {body: submitBody(t, map[string]any{"hours": raw("1e309")}),
			want: want{status: 400, field: "hours", msg: "must be a finite number (got 1e309)"}},
		"hours under a second": {body: submitBody(t, map[string]any{"hours": raw("1e-300")}),
			want: want{status: 400, field: "hours", msg: "must be between 1 s"}},
		"hours a second": {body: submitBody(t, map[string]any{"hours": 1.0 / 3600}), want: want{status: 201, gpus: 2, hours: 1.0 / 3600}},
		"grace_s negative": {body: submitBody(t, map[string]any{"grace_s": -1}),
			want: want{status: 400, field: "grace_s", msg: "must be between 0 and 3600 seconds"}},
		"grace_s over an hour": {body: submitBody(t, map[string]any{"grace_s": 3601}), want: want{status: 400, field: "grace_s"}},
		"min_gpu_mem_mib negative": {body: submitBody(t, map[string]any{"min_gpu_mem_mib": -1}),
			want: want{status: 400, field: "min_gpu_mem_mib", msg: "must be ≥ 0"}},
		"name with invalid UTF-8": {body: `{"name":"a` + "\xff" + `b","team":"nlp"}`,
			want: want{status: 400, field: "name", msg: "must be valid UTF-8"}},
		"name with a lone surrogate": {body: submitBody(t, map[string]any{"name": raw(`"a\ud800b"`)}),
			want: want{status: 400, field: "name", msg: "lone surrogate"}},
		"command with a lone surrogate": {body: submitBody(t, map[string]any{"command": raw(`"echo \udfff"`)}),
			want: want{status: 400, field: "command", msg: "lone surrogate"}},
		"env value with invalid UTF-8": {body: submitBody(t, map[string]any{"env": raw(`{"SEED":"` + "\xc3" + `"}`)}),
			want: want{status: 400, field: "env.SEED", msg: "must be valid UTF-8"}},
		"env value with NUL": {body: submitBody(t, map[string]any{"env": map[string]string{"SEED": "1\x002"}}),
			want: want{status: 400, field: "env.SEED", msg: "NUL"}},
		"name with a zero-width space": {body: submitBody(t, map[string]any{"name": "bert\u200b"}),
			want: want{status: 400, field: "name", msg: "U+200B"}},
		"team with a zero-width joiner": {body: submitBody(t, map[string]any{"team": "n\u200dlp"}),
			want: want{status: 400, field: "team", msg: "U+200D"}},
		"command longer than Linux execs": {body: submitBody(t, map[string]any{"command": strings.Repeat("x", domain.MaxArgBytes+1)}),
			want: want{status: 400, field: "command", msg: fmt.Sprintf("must be at most %d bytes", domain.MaxArgBytes)}},
		"nested 64 deep": {body: submitBody(t, map[string]any{"env": raw(nested(63))}), want: want{status: 400, field: "env", msg: "must be a JSON object"}},
		"nested 65 deep": {body: submitBody(t, map[string]any{"env": raw(nested(64))}),
			want: want{status: 400, field: "body", msg: "must not nest arrays and objects deeper than 64 levels"}},
		"nested a million deep": {body: strings.Repeat("[", 1<<20),
			want: want{status: 413, field: "body", msg: fmt.Sprintf("larger than the limit of %d bytes", events.MaxRecordBytes)}},
		"body over the log's record limit": {body: submitBody(t, map[string]any{"hypothesis": strings.Repeat("h", events.MaxRecordBytes)}),
			want: want{status: 413, field: "body", msg: fmt.Sprintf("larger than the limit of %d bytes", events.MaxRecordBytes)}},
		// json.Marshal writes '<' as \u003c: a body within the limit can make
		// a record beyond it.
		"record over the log's record limit": {body: strings.Replace(strings.Replace(submitBody(t, map[string]any{"command": "C", "hypothesis": "H"}),
			`"C"`, `"`+strings.Repeat("<", domain.MaxArgBytes)+`"`, 1), `"H"`, `"`+strings.Repeat(">", domain.MaxArgBytes)+`"`, 1),
			want: want{status: 413, field: "body", msg: fmt.Sprintf("larger than the log's limit of %d bytes", events.MaxRecordBytes)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			check := func(transport string, status int, field, msg string, result []byte) {
				t.Helper()
				if tc.want.field == "" {
					var rep api.SubmitReply
					if status != tc.want.status || json.Unmarshal(result, &rep) != nil || rep.TaskID == "" {
						t.Fatalf("%s: %d %s %s, want %d and a task", transport, status, field, msg, tc.want.status)
					}
					v, err := h.s.show(h.ctx, rep.TaskID)
					if err != nil || v.GPUs != tc.want.gpus || v.Hours != tc.want.hours {
						t.Fatalf("%s: recorded gpus %d hours %g (%v), want %d and %g", transport, v.GPUs, v.Hours, err, tc.want.gpus, tc.want.hours)
					}
					return
				}
				if status != tc.want.status || field != tc.want.field || !strings.Contains(msg, tc.want.msg) {
					t.Fatalf("%s: %d %q %q, want %d %q …%s…", transport, status, field, msg, tc.want.status, tc.want.field, tc.want.msg)
				}
			}
			w := h.httpCall("POST", "/v1/tasks", tc.body)
			var hr api.Reply
			_ = json.Unmarshal(w.Body.Bytes(), &hr)
			check("HTTP", w.Code, hr.Field, hr.Error, w.Body.Bytes())

			r := h.natsCall(api.OpSubmit, tc.body)
			status := http.StatusCreated
			if r.Error != "" {
				_, err := h.s.dispatch(h.ctx, api.OpSubmit, []byte(tc.body))
				status = asOpError(err).Status
			}
			check("NATS", status, r.Field, r.Error, r.Result)

			// Nothing refused reached the log.
			if tc.want.field != "" {
				if q, err := h.s.queue(h.ctx, true); err != nil || len(q) != 0 {
					t.Fatalf("%d tasks after a refusal (%v)", len(q), err)
				}
			}
		})
	}
}

// TestRequestTaskIDShape: a task id that submit could not have given is
// refused naming task_id, in every request that carries one, on both
// transports; an id of the right shape that names no task is not found.
func TestRequestTaskIDShape(t *testing.T) {
	h := newHarness(t, nil)
	for name, tc := range map[string]struct {
		id         string
		wantStatus int
		wantField  string
	}{
		"a path":             {id: "x/y/z", wantStatus: 400, wantField: "task_id"},
		"dots":               {id: "..", wantStatus: 400, wantField: "task_id"},
		"a word":             {id: "nope", wantStatus: 400, wantField: "task_id"},
		"upper case":         {id: strings.ToUpper(earlyID), wantStatus: 400, wantField: "task_id"},
		"a UUID of no task":  {id: unknownID, wantStatus: 404},
		"36 chars, no UUID":  {id: strings.Repeat("a", 36), wantStatus: 400, wantField: "task_id"},
		"a UUID and a space": {id: unknownID + " ", wantStatus: 400, wantField: "task_id"},
	} {
		t.Run(name, func(t *testing.T) {
			for _, op := range []struct {
				op   string
				body any
			}{
				{api.OpShow, api.IDRequest{TaskID: tc.id}},
				{api.OpHistory, api.IDRequest{TaskID: tc.id}},
				{api.OpCancel, api.IDRequest{TaskID: tc.id}},
				{api.OpAmend, api.AmendRequest{TaskID: tc.id, GPUs: 2}},
				{api.OpChecklist, api.ChecklistRequest{TaskID: tc.id, Item: "documentation", Done: true}},
				{api.OpCheckpoint, api.CheckpointRequest{TaskID: tc.id, Ref: "/ckpt/1"}},
			} {
				r := h.natsCall(op.op, op.body)
				if r.Field != tc.wantField || r.NotFound != (tc.wantStatus == 404) || r.Error == "" {
					t.Errorf("%s: reply %+v, want field %q not_found %v", op.op, r, tc.wantField, tc.wantStatus == 404)
				}
			}
			if strings.ContainsAny(tc.id, "/. ") {
				return // not one clean path segment
			}
			w := h.httpCall("GET", "/v1/tasks/"+tc.id, "")
			var rep api.Reply
			if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil || w.Code != tc.wantStatus || rep.Field != tc.wantField {
				t.Errorf("GET /v1/tasks/%s: %d %s, want %d field %q", tc.id, w.Code, w.Body, tc.wantStatus, tc.wantField)
			}
		})
	}
}

// TestDecodeMemory: decoding a request of 1 MiB of any adversarial shape
// (deep nesting of [ and {, many keys, long strings, many tiny arrays)
// allocates at most 32 times its size in all — the whole allocation
// (TotalAlloc) bounds the peak. Before the bounded pass a 40 KB body of
// nested arrays used 660 MB.
func TestDecodeMemory(t *testing.T) {
	const n, k = 1 << 20, 32
	docs := jsonguardtest.Adversarial(n)
	var env strings.Builder
	env.WriteString(`{"env":{`)
	for i := 0; env.Len() < n-32; i++ {
		if i > 0 {
			env.WriteByte(',')
		}
		fmt.Fprintf(&env, `"K%d":""`, i)
	}
	env.WriteString(`}}`)
	docs["many variables"] = []byte(env.String())
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			for _, into := range []struct {
				name string
				v    func() any
			}{
				{"submit", func() any { return new(domain.Request) }},
				{"amend", func() any { return new(api.AmendRequest) }},
			} {
				got := jsonguardtest.Allocated(func() { _, _ = decodeBody(doc, into.v()) })
				t.Logf("%s: %d bytes: %d bytes allocated (%.1f x)", into.name, len(doc), got, float64(got)/float64(len(doc)))
				if got > uint64(k*len(doc)) {
					t.Errorf("%s: decoding %d bytes allocated %d, more than %d x", into.name, len(doc), got, k)
				}
			}
		})
	}
}
