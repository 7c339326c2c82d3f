package submitter

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/api"
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
		if r.Method != "HEAD" && !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s %s: not JSON: %q", r.Method, path, w.Body)
		}
		known := token != "" && token != tokens[4]
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
