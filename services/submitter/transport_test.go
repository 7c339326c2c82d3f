package submitter

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
)

func TestHTTP(t *testing.T) {
	h := newHarness(t, nil)
	id := h.submit(validReq()).TaskID
	keyed := func(key string) string {
		r := validReq()
		r.IdempotencyKey = key
		return mustJSON(t, r)
	}
	big := `{"name": "` + strings.Repeat("x", maxBody) + `"}`

	cases := map[string]struct {
		method, path, body string
		wantStatus         int
		wantField          string // for errors
		wantNF             bool
		wantAllow          string
		setup              func(h *harness)
		check              func(t *testing.T, body []byte)
	}{
		"submit": {method: "POST", path: "/v1/tasks", body: mustJSON(t, validReq()), wantStatus: 201,
			check: func(t *testing.T, b []byte) {
				var r api.SubmitReply
				if err := json.Unmarshal(b, &r); err != nil || r.TaskID == "" || r.Duplicate {
					t.Errorf("reply %s: %v", b, err)
				}
			}},
		"submit keyed": {method: "POST", path: "/v1/tasks", body: keyed("ci-0"), wantStatus: 201},
		"submit keyed again": {method: "POST", path: "/v1/tasks", body: keyed("ci-1"), wantStatus: 200,
			setup: func(h *harness) { h.httpCall("POST", "/v1/tasks", keyed("ci-1")) }},
		"submit unknown field":    {method: "POST", path: "/v1/tasks", body: `{"name":"x","gpu":2}`, wantStatus: 400, wantField: "body"},
		"submit malformed":        {method: "POST", path: "/v1/tasks", body: `{"name":`, wantStatus: 400, wantField: "body"},
		"submit trailing data":    {method: "POST", path: "/v1/tasks", body: mustJSON(t, validReq()) + ` {}`, wantStatus: 400, wantField: "body"},
		"submit not an object":    {method: "POST", path: "/v1/tasks", body: `[1]`, wantStatus: 400, wantField: "body"},
		"submit gpus as a string": {method: "POST", path: "/v1/tasks", body: `{"gpus":"two"}`, wantStatus: 400, wantField: "gpus"},
		"submit empty body":       {method: "POST", path: "/v1/tasks", wantStatus: 400, wantField: "name"},
		"submit too large":        {method: "POST", path: "/v1/tasks", body: big, wantStatus: 413, wantField: "body"},
		"show": {method: "GET", path: "/v1/tasks/" + id, wantStatus: 200,
			check: func(t *testing.T, b []byte) {
				var v api.TaskView
				if err := json.Unmarshal(b, &v); err != nil || v.TaskID != id || v.State != "queued" {
					t.Errorf("view %s: %v", b, err)
				}
			}},
		"show unknown":         {method: "GET", path: "/v1/tasks/" + unknownID, wantStatus: 404, wantNF: true},
		"queue bad all":        {method: "GET", path: "/v1/tasks?all=maybe", wantStatus: 400, wantField: "all"},
		"amend":                {method: "POST", path: "/v1/tasks/" + id + "/amend", body: `{"gpus": 3}`, wantStatus: 200},
		"amend id mismatch":    {method: "POST", path: "/v1/tasks/" + id + "/amend", body: `{"task_id":"other","gpus": 3}`, wantStatus: 400, wantField: "task_id"},
		"amend unknown":        {method: "POST", path: "/v1/tasks/" + unknownID + "/amend", body: `{"gpus": 3}`, wantStatus: 404, wantNF: true},
		"amend invalid":        {method: "POST", path: "/v1/tasks/" + id + "/amend", body: `{"hours": -1}`, wantStatus: 400, wantField: "hours"},
		"checklist":            {method: "POST", path: "/v1/tasks/" + id + "/checklist", body: `{"item":"documentation","done":true}`, wantStatus: 200},
		"checklist bad item":   {method: "POST", path: "/v1/tasks/" + id + "/checklist", body: `{"item":"nap","done":true}`, wantStatus: 400, wantField: "item"},
		"cancel unknown":       {method: "POST", path: "/v1/tasks/" + unknownID + "/cancel", wantStatus: 404, wantNF: true},
		"history unknown":      {method: "GET", path: "/v1/tasks/" + unknownID + "/history", wantStatus: 404, wantNF: true},
		"healthz":              {method: "GET", path: "/healthz", wantStatus: 200},
		"wrong method":         {method: "DELETE", path: "/v1/tasks/" + id, wantStatus: 405, wantAllow: "GET, HEAD"},
		"wrong method cancel":  {method: "GET", path: "/v1/tasks/" + id + "/cancel", wantStatus: 405, wantAllow: "POST"},
		"wrong method healthz": {method: "POST", path: "/healthz", wantStatus: 405, wantAllow: "GET, HEAD"},
		"no such route":        {method: "GET", path: "/v2/tasks", wantStatus: 404},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup(h)
			}
			w := h.httpCall(tc.method, tc.path, tc.body)
			if w.Code != tc.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", w.Code, tc.wantStatus, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
			if got := w.Header().Get("Allow"); got != tc.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tc.wantAllow)
			}
			if tc.wantStatus >= 400 {
				r := errReply(t, w)
				if r.Error == "" || r.Field != tc.wantField || r.NotFound != tc.wantNF {
					t.Errorf("error body %s, want field %q not_found %v", w.Body, tc.wantField, tc.wantNF)
				}
			}
			if tc.check != nil {
				tc.check(t, w.Body.Bytes())
			}
		})
	}
}

func TestHTTPCancelAndHistory(t *testing.T) {
	h := newHarness(t, nil)
	id := h.submit(validReq()).TaskID
	w := h.httpCall("POST", "/v1/tasks/"+id+"/checklist", `{"item":"code_review","done":true}`)
	if w.Code != 200 {
		t.Fatalf("checklist: %d %s", w.Code, w.Body)
	}
	w = h.httpCall("POST", "/v1/tasks/"+id+"/cancel", `{"by":"ci"}`)
	var v api.TaskView
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || w.Code != 200 || v.State != "cancelled" || v.Reason != "cancelled by ci" {
		t.Fatalf("cancel: %d %s: %v", w.Code, w.Body, err)
	}
	w = h.httpCall("POST", "/v1/tasks/"+id+"/cancel", "")
	if r := errReply(t, w); w.Code != 400 || r.Field != "task_id" || r.Error != "task is already cancelled" {
		t.Errorf("second cancel: %d %s", w.Code, w.Body)
	}

	w = h.httpCall("GET", "/v1/tasks/"+id+"/history", "")
	var hist []api.HistoryEntry
	if err := json.Unmarshal(w.Body.Bytes(), &hist); err != nil || w.Code != 200 {
		t.Fatalf("history: %d %s: %v", w.Code, w.Body, err)
	}
	type entry struct {
		Seq  uint64
		Type string
	}
	var got []entry
	for _, e := range hist {
		got = append(got, entry{e.Seq, e.Type})
		if e.ID == "" || e.Time.IsZero() || len(e.Data) == 0 {
			t.Errorf("entry %+v lacks id, time or data", e)
		}
	}
	want := []entry{{1, "submitted"}, {2, "checklist_updated"}, {3, "cancelled"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	var c events.Cancelled
	if err := json.Unmarshal(hist[2].Data, &c); err != nil || c.TaskID != id || c.By != "ci" {
		t.Errorf("cancelled data %s: %v", hist[2].Data, err)
	}
}

func TestHTTPNotReady(t *testing.T) {
	s := newServer(Config{Log: memlog.New(), Logger: testLogger(t)})
	hd := s.handler()
	cases := map[string]struct {
		path       string
		wantStatus int
		wantBody   string
	}{
		"healthz": {"/healthz", 503, `{"error":"submitter is still catching up with the log","status":"starting"}`},
		"queue":   {"/v1/tasks", 503, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := &harness{t: t, h: hd}
			w := h.httpCall("GET", tc.path, "")
			if w.Code != tc.wantStatus {
				t.Errorf("status %d, want %d", w.Code, tc.wantStatus)
			}
			if tc.wantBody != "" && strings.TrimSpace(w.Body.String()) != tc.wantBody {
				t.Errorf("body %s, want %s", w.Body, tc.wantBody)
			}
		})
	}
}

func TestHealthz(t *testing.T) {
	cases := map[string]struct {
		ready      bool
		health     func() error
		wantStatus int
		wantBody   string
	}{
		"starting":          {false, nil, 503, `{"error":"submitter is still catching up with the log","status":"starting"}`},
		"ready":             {true, nil, 200, `{"status":"ok"}`},
		"ready and healthy": {true, func() error { return nil }, 200, `{"status":"ok"}`},
		"ready, unhealthy":  {true, func() error { return errors.New("agents starting") }, 503, `{"error":"agents starting","status":"unavailable"}`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := newServer(Config{Log: memlog.New(), Logger: testLogger(t), Health: tc.health})
			s.ready.Store(tc.ready)
			h := &harness{t: t, h: s.handler()}
			w := h.httpCall("GET", "/healthz", "")
			if w.Code != tc.wantStatus || strings.TrimSpace(w.Body.String()) != tc.wantBody {
				t.Errorf("got %d %s, want %d %s", w.Code, w.Body, tc.wantStatus, tc.wantBody)
			}
		})
	}
}

func TestNATSHandler(t *testing.T) {
	h := newHarness(t, nil)
	id := h.submit(validReq()).TaskID
	cases := map[string]struct {
		op        string
		body      any
		wantField string
		wantNF    bool
		wantOK    bool
	}{
		"malformed json":        {op: api.OpSubmit, body: `{"name": `, wantField: "body"},
		"unknown field":         {op: api.OpShow, body: `{"task_id": "x", "extra": 1}`, wantField: "body"},
		"wrong type":            {op: api.OpShow, body: `{"task_id": 7}`, wantField: "task_id"},
		"not an object":         {op: api.OpCancel, body: `"cancel it"`, wantField: "body"},
		"unknown op":            {op: "explode", body: `{}`, wantField: "op"},
		"show missing id":       {op: api.OpShow, body: `{}`, wantField: "task_id"},
		"show unknown":          {op: api.OpShow, body: api.IDRequest{TaskID: unknownID}, wantNF: true},
		"show":                  {op: api.OpShow, body: api.IDRequest{TaskID: id}, wantOK: true},
		"queue with empty body": {op: api.OpQueue, body: ``, wantOK: true},
		"checklist bad item":    {op: api.OpChecklist, body: api.ChecklistRequest{TaskID: id, Item: "x"}, wantField: "item"},
		"amend not found":       {op: api.OpAmend, body: api.AmendRequest{TaskID: unknownID, GPUs: 2}, wantNF: true},
		"history":               {op: api.OpHistory, body: api.IDRequest{TaskID: id}, wantOK: true},
		"submit":                {op: api.OpSubmit, body: domain.Request{Name: "n", Team: "t", GPUs: 1, Hours: 1, Hypothesis: "h", Command: "c"}, wantOK: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := h.natsCall(tc.op, tc.body)
			if tc.wantOK {
				if r.Error != "" || len(r.Result) == 0 {
					t.Errorf("reply %+v, want a result", r)
				}
				return
			}
			if r.Error == "" || r.Field != tc.wantField || r.NotFound != tc.wantNF || r.Result != nil {
				t.Errorf("reply %+v, want field %q not_found %v", r, tc.wantField, tc.wantNF)
			}
		})
	}
}

// checkpointCase is one checkpoint request, run through each transport on a
// fresh harness whose one task setup has put in some state.
type checkpointCase struct {
	setup      func(h *harness, id string)
	id         string // default: the task's
	body       string // the request body; %s is the task id
	wantStatus int    // HTTP status; 200 for a success
	wantField  string
	wantNF     bool
	wantState  string // for a success
	wantEvents int    // checkpointed events afterwards
}

func checkpointCases() map[string]checkpointCase {
	const body = `{"ref": "/ckpt/step-7"}`
	return map[string]checkpointCase{
		"running ok":    {setup: toRunning, body: body, wantStatus: 200, wantState: "running", wantEvents: 1},
		"preempting ok": {setup: toPreempting, body: body, wantStatus: 200, wantState: "preempting", wantEvents: 1},
		"duplicate retry": {
			setup: func(h *harness, id string) {
				toRunning(h, id)
				if _, err := h.s.checkpoint(h.ctx, api.CheckpointRequest{TaskID: id, Ref: "/ckpt/step-7"}); err != nil {
					h.t.Fatal(err)
				}
			},
			body: body, wantStatus: 200, wantState: "running", wantEvents: 2,
		},
		"queued rejected":    {body: body, wantStatus: 409, wantField: "task_id"},
		"completed rejected": {setup: toCompleted, body: body, wantStatus: 409, wantField: "task_id"},
		"unknown task":       {id: unknownID, body: body, wantStatus: 404, wantNF: true},
		"empty ref":          {setup: toRunning, body: `{"ref": ""}`, wantStatus: 400, wantField: "ref"},
		"no ref":             {setup: toRunning, body: `{}`, wantStatus: 400, wantField: "ref"},
		"ref not a string":   {setup: toRunning, body: `{"ref": 7}`, wantStatus: 400, wantField: "ref"},
		"unknown field":      {setup: toRunning, body: `{"ref": "/c", "steps": 7}`, wantStatus: 400, wantField: "body"},
		"with its step":      {setup: toRunning, body: `{"ref": "/ckpt/step-7", "step": 7}`, wantStatus: 200, wantState: "running", wantEvents: 1},
		"negative step":      {setup: toRunning, body: `{"ref": "/c", "step": -1}`, wantStatus: 400, wantField: "step"},
	}
}

// checkpointed lists the refs of the task's checkpointed events.
func (h *harness) checkpointed(id string) []string {
	h.t.Helper()
	refs := []string{}
	if _, err := events.ReadAll(h.ctx, h.log, 1, events.TaskSubjects(id), func(r events.Record) error {
		if c, ok := r.Event.(events.Checkpointed); ok {
			refs = append(refs, c.Ref)
		}
		return nil
	}); err != nil {
		h.t.Fatal(err)
	}
	return refs
}

// check checks a checkpoint's answer, from either transport.
func (tc checkpointCase) check(t *testing.T, h *harness, id string, res []byte, field string, notFound bool, msg string) {
	t.Helper()
	if n := len(h.checkpointed(id)); n != tc.wantEvents {
		t.Errorf("%d checkpointed events, want %d", n, tc.wantEvents)
	}
	if tc.wantStatus != 200 {
		if msg == "" || field != tc.wantField || notFound != tc.wantNF {
			t.Errorf("error %q field %q not_found %v, want field %q not_found %v", msg, field, notFound, tc.wantField, tc.wantNF)
		}
		return
	}
	var r api.CheckpointReply
	if err := json.Unmarshal(res, &r); err != nil {
		t.Fatalf("result %s: %v", res, err)
	}
	want := api.CheckpointReply{TaskID: id, Ref: "/ckpt/step-7", Seq: h.lastSeq(), State: tc.wantState}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
}

func TestNATSCheckpoint(t *testing.T) {
	for name, tc := range checkpointCases() {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			id := h.submit(validReq()).TaskID
			if tc.setup != nil {
				tc.setup(h, id)
			}
			target := id
			if tc.id != "" {
				target = tc.id
			}
			// The NATS request carries the id in the body.
			var body map[string]any
			if err := json.Unmarshal([]byte(tc.body), &body); err != nil {
				t.Fatal(err)
			}
			body["task_id"] = target
			r := h.natsCall(api.OpCheckpoint, mustJSON(t, body))
			if (r.Error == "") != (tc.wantStatus == 200) {
				t.Fatalf("reply %+v, want status %d", r, tc.wantStatus)
			}
			tc.check(t, h, id, r.Result, r.Field, r.NotFound, r.Error)
			if tc.wantStatus == 409 && !strings.Contains(r.Error, "a checkpoint is accepted only while it runs or is being preempted") {
				t.Errorf("error %q does not say when a checkpoint is accepted", r.Error)
			}
		})
	}
}

func TestHTTPCheckpoint(t *testing.T) {
	cases := checkpointCases()
	cases["id mismatch"] = checkpointCase{setup: toRunning, body: `{"task_id": "other", "ref": "/c"}`, wantStatus: 400, wantField: "task_id"}
	cases["id in the body too"] = checkpointCase{setup: toRunning, body: `{"task_id": "%s", "ref": "/ckpt/step-7"}`,
		wantStatus: 200, wantState: "running", wantEvents: 1}
	cases["empty body"] = checkpointCase{setup: toRunning, wantStatus: 400, wantField: "ref"}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			id := h.submit(validReq()).TaskID
			if tc.setup != nil {
				tc.setup(h, id)
			}
			target := id
			if tc.id != "" {
				target = tc.id
			}
			w := h.httpCall("POST", "/v1/tasks/"+target+"/checkpoint", strings.ReplaceAll(tc.body, "%s", id))
			if w.Code != tc.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", w.Code, tc.wantStatus, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
			var r api.Reply
			if tc.wantStatus != 200 {
				r = errReply(t, w)
			}
			tc.check(t, h, id, w.Body.Bytes(), r.Field, r.NotFound, r.Error)
		})
	}
	t.Run("wrong method", func(t *testing.T) {
		h := newHarness(t, nil)
		w := h.httpCall("GET", "/v1/tasks/x/checkpoint", "")
		if w.Code != 405 || w.Header().Get("Allow") != "POST" {
			t.Errorf("got %d Allow %q, want 405 Allow POST", w.Code, w.Header().Get("Allow"))
		}
	})
}
