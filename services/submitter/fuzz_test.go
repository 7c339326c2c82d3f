package submitter

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/jsonguard"
)

// FuzzHTTP: any request to the HTTP API (method, path, body, and a token
// of no one, team vision, team nlp, the admin or a made-up one) is
// answered without a panic or a 500, in JSON; without a known token with
// 401 (but /healthz); never with another team's environment.
func FuzzHTTP(f *testing.F) {
	f.Add(uint8(0), "/v1/tasks", []byte(`{"name":"n","team":"vision","priority":"low","gpus":1,"hours":1,"hypothesis":"h","command":"c"}`), uint8(1))
	f.Add(uint8(1), "/v1/tasks", []byte(nil), uint8(2))
	f.Add(uint8(1), "/v1/tasks/TASK", []byte(nil), uint8(2))
	f.Add(uint8(1), "/v1/tasks/TASK/history", []byte(nil), uint8(3))
	f.Add(uint8(0), "/v1/tasks/TASK/amend", []byte(`{"gpus":2,"gpus":3}`), uint8(1))
	f.Add(uint8(0), "/v1/tasks/TASK/cancel", []byte(`{"by":"x\u001b"}`), uint8(2))
	f.Add(uint8(0), "/v1/nodes/node-1/drain", []byte(`{"reason":"r"}`), uint8(3))
	f.Add(uint8(1), "/healthz", []byte(nil), uint8(0))
	f.Add(uint8(2), "/v1/tasks/TASK/checkpoint", []byte(`{"ref":"/ckpt/1"}`), uint8(4))
	h, tok := tokenHarness(f)
	req := validReq()
	req.Team = "vision"
	req.Env = map[string]string{"SEED": "vision-secret-env"}
	id := h.submit(req).TaskID
	tokens := []string{"", tok["vision"], tok["nlp"], tok["admin"], "gpuq_0123456789abcdef0123"}
	methods := []string{"POST", "GET", "PUT", "DELETE", "HEAD", "PATCH"}
	f.Fuzz(func(t *testing.T, method uint8, path string, body []byte, who uint8) {
		path = strings.ReplaceAll(path, "TASK", id)
		r, err := http.NewRequest(methods[int(method)%len(methods)], "http://gpuq"+path, strings.NewReader(string(body)))
		if err != nil || !strings.HasPrefix(r.URL.Path, "/") {
			return
		}
		r.Host = testHost // the browser checks are TestBrowserSafety's
		r.Header.Set("Content-Type", "application/json")
		token := tokens[int(who)%len(tokens)]
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.h.ServeHTTP(w, r)
		if w.Code >= 500 && w.Code != http.StatusServiceUnavailable && w.Code != http.StatusBadGateway {
			t.Fatalf("%s %s: %d %s", r.Method, path, w.Code, w.Body)
		}
		if w.Code >= 300 && w.Code < 400 {
			return // ServeMux's redirect to the clean path ("/." → "/"), no data
		}
		// The page and its assets (/, /ui/...) need no token and hold no
		// data: without a known token they never show a task.
		page := r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/ui/")
		known := token != "" && token != tokens[4]
		if page && w.Code < 300 {
			if !known && (strings.Contains(w.Body.String(), id) || strings.Contains(w.Body.String(), "vision-secret-env")) {
				t.Fatalf("%s %s without a known token shows a task: %s", r.Method, path, w.Body)
			}
			return
		}
		if r.Method != "HEAD" && !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s %s: not JSON: %q", r.Method, path, w.Body)
		}
		if !known && r.URL.Path != "/healthz" && w.Code != http.StatusUnauthorized && w.Code != http.StatusNotFound && w.Code != http.StatusMethodNotAllowed {
			// ServeMux answers 404/405 for routes that do not exist before
			// the guard sees them only when no route matches; every route
			// of ours is behind the guard.
			t.Fatalf("%s %s without a known token: %d %s", r.Method, path, w.Code, w.Body)
		}
		if token == tok["nlp"] && strings.Contains(w.Body.String(), "vision-secret-env") {
			t.Fatalf("%s %s: team nlp got vision's environment: %s", r.Method, path, w.Body)
		}
		if token == tok["admin"] && w.Code == http.StatusForbidden {
			t.Fatalf("%s %s: the admin forbidden: %s", r.Method, path, w.Body)
		}
		var rep api.Reply
		if w.Code >= 400 && r.Method != "HEAD" && (json.Unmarshal(w.Body.Bytes(), &rep) != nil || rep.Error == "") {
			t.Fatalf("%s %s: %d without an error message: %s", r.Method, path, w.Code, w.Body)
		}
	})
}

// FuzzNATS: any request to the NATS API (an operation, known or not, and
// any body) is answered without a panic, with a result or an error, and
// an error the caller caused names its field; a body the bounded pass
// refuses never reaches an operation.
func FuzzNATS(f *testing.F) {
	f.Add(uint8(0), []byte(`{"name":"n","team":"vision","priority":"low","gpus":1,"hours":1,"hypothesis":"h","command":"c"}`))
	f.Add(uint8(0), []byte(`{"name":"n","team":"vision","priority":"low","hypothesis":"h","command":"c"}`))
	f.Add(uint8(0), []byte(`{"name":"\ud800","hours":1e309}`))
	f.Add(uint8(1), []byte(`{"task_id":"TASK"}`))
	f.Add(uint8(1), []byte(`{"task_id":"x/y/z"}`))
	f.Add(uint8(2), []byte(`{"all":true}`))
	f.Add(uint8(3), []byte(`{"task_id":"TASK","by":"x"}`))
	f.Add(uint8(4), []byte(`{"task_id":"TASK","gpus":2,"gpus":3}`))
	f.Add(uint8(5), []byte(`{"task_id":"TASK","item":"documentation","done":true}`))
	f.Add(uint8(6), []byte(`{"task_id":"TASK"}`))
	f.Add(uint8(7), []byte(`{"task_id":"TASK","ref":"/ckpt/1"}`))
	f.Add(uint8(9), []byte(`{"node":"node-1","reason":"r"}`))
	f.Add(uint8(11), []byte(strings.Repeat("[", 100)))
	h := newHarness(f, nil)
	id := h.submit(validReq()).TaskID
	names := append(append([]string(nil), ops...), "explode")
	f.Fuzz(func(t *testing.T, op uint8, body []byte) {
		name := names[int(op)%len(names)]
		body = bytes.ReplaceAll(body, []byte("TASK"), []byte(id))
		r := h.s.handleNATS(h.ctx, name, body)
		if (r.Error == "") == (r.Result == nil) {
			t.Fatalf("%s %q: reply %+v: want a result or an error", name, body, r)
		}
		if r.Error != "" && r.Field == "" && !r.NotFound && !strings.Contains(r.Error, "not ready") {
			t.Fatalf("%s %q: %q: an error without a field", name, body, r.Error)
		}
		if r.Error == "" && !json.Valid(r.Result) {
			t.Fatalf("%s %q: result not JSON: %q", name, body, r.Result)
		}
		if _, err := jsonguard.Check(body); err != nil && len(bytes.TrimSpace(body)) > 0 && r.Error == "" {
			t.Fatalf("%s %q: accepted what the bounded pass refuses (%v)", name, body, err)
		}
	})
}
