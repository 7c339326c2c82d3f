package submitter

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/auth"
)

// tokenHarness is a harness whose HTTP API wants the tokens of `gpuq auth
// init --teams vision,nlp`; it returns the tokens by name.
func tokenHarness(t testing.TB) (*harness, map[string]string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "auth")
	if _, err := auth.Init(dir, []string{"vision", "nlp"}, nil); err != nil {
		t.Fatal(err)
	}
	toks, err := auth.LoadTokens(filepath.Join(dir, auth.TokensDir))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, nil)
	h.s.tokens = toks
	h.h = h.s.handler()
	byName := map[string]string{}
	for _, n := range []string{"vision", "nlp", "admin"} {
		b, err := os.ReadFile(filepath.Join(dir, auth.TokensDir, n))
		if err != nil {
			t.Fatal(err)
		}
		byName[n] = strings.TrimSpace(string(b))
	}
	return h, byName
}

func (h *harness) httpAs(token, method, path, body string) (int, string) {
	h.t.Helper()
	r, _ := http.NewRequest(method, path, strings.NewReader(body))
	r.Host = testHost
	r.Header.Set("Content-Type", "application/json")
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func TestHTTPTokens(t *testing.T) {
	h, tok := tokenHarness(t)
	req := validReq()
	req.Team = "vision"
	req.Env = map[string]string{"PATH": "/usr/bin", "WANDB_PROJECT": "vision-secret-project"}
	id := h.submit(req).TaskID
	task := "/v1/tasks/" + id

	cases := map[string]struct {
		token, method, path, body string
		want                      int
	}{
		"no token":                      {"", "GET", "/v1/tasks", "", 401},
		"unknown token":                 {"gpuq_not-a-token-of-ours-at-all", "GET", "/v1/tasks", "", 401},
		"healthz stays open":            {"", "GET", "/healthz", "", 200},
		"own team reads":                {tok["vision"], "GET", task, "", 200},
		"own team history":              {tok["vision"], "GET", task + "/history", "", 200},
		"other team reads":              {tok["nlp"], "GET", task, "", 403},
		"other team history (env)":      {tok["nlp"], "GET", task + "/history", "", 403},
		"other team amends":             {tok["nlp"], "POST", task + "/amend", `{"gpus":1}`, 403},
		"other team checklist":          {tok["nlp"], "POST", task + "/checklist", `{"item":"code_review","done":true}`, 403},
		"other team checkpoint":         {tok["nlp"], "POST", task + "/checkpoint", `{"ref":"x"}`, 403},
		"other team logs":               {tok["nlp"], "GET", task + "/logs", "", 403},
		"other team cancels":            {tok["nlp"], "POST", task + "/cancel", `{}`, 403},
		"admin reads":                   {tok["admin"], "GET", task, "", 200},
		"a team lists the queue":        {tok["nlp"], "GET", "/v1/tasks", "", 200},
		"a team may not drain":          {tok["nlp"], "POST", "/v1/nodes/node-1/drain", `{}`, 403},
		"a team submits for another":    {tok["nlp"], "POST", "/v1/tasks", mustJSON(t, req), 403},
		"a team submits for itself":     {tok["vision"], "POST", "/v1/tasks", strings.Replace(mustJSON(t, req), `"bert-base"`, `"second"`, 1), 201},
		"a team submits without a team": {tok["nlp"], "POST", "/v1/tasks", `{"name":"n","priority":"low","gpus":1,"hours":1,"hypothesis":"h","command":"true"}`, 201},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, body := h.httpAs(tc.token, tc.method, tc.path, tc.body)
			if got != tc.want {
				t.Fatalf("%s %s: status %d, want %d: %s", tc.method, tc.path, got, tc.want, body)
			}
			if got == 403 && strings.Contains(body, "vision-secret-project") {
				t.Fatalf("a 403 carries the task's env: %s", body)
			}
		})
	}
	// The other team never sees the env; the own team and the admin do.
	for who, want := range map[string]bool{"vision": true, "admin": true, "nlp": false} {
		_, body := h.httpAs(tok[who], "GET", task+"/history", "")
		if got := strings.Contains(body, "vision-secret-project"); got != want {
			t.Errorf("%s: env in the history %v, want %v", who, got, want)
		}
	}
	// The queue shows another team's task without its command.
	_, body := h.httpAs(tok["nlp"], "GET", "/v1/tasks", "")
	if !strings.Contains(body, id) || strings.Contains(body, req.Command) {
		t.Errorf("nlp's queue: want vision's task without its command: %s", body)
	}
	if _, body := h.httpAs(tok["vision"], "GET", "/v1/tasks", ""); !strings.Contains(body, req.Command) {
		t.Errorf("vision's queue lacks its own command: %s", body)
	}
	// A 401 says how to authenticate.
	r, _ := http.NewRequest("GET", "/v1/tasks", nil)
	r.Host = testHost
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	if w.Header().Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
}

func TestNATSTeamScope(t *testing.T) {
	h := newHarness(t, nil)
	req := validReq()
	req.Team = "vision"
	id := h.submit(req).TaskID
	call := func(subject string, body any) api.Reply {
		ctx, op := natsCaller(h.ctx, subject)
		b, _ := json.Marshal(body)
		return h.s.handleNATS(ctx, op, b)
	}
	cases := map[string]struct {
		subject string
		body    any
		denied  bool
	}{
		"own team shows":          {api.Subject("vision", api.OpShow), api.IDRequest{TaskID: id}, false},
		"other team shows":        {api.Subject("nlp", api.OpShow), api.IDRequest{TaskID: id}, true},
		"other team cancels":      {api.Subject("nlp", api.OpCancel), api.IDRequest{TaskID: id}, true},
		"other team history":      {api.Subject("nlp", api.OpHistory), api.IDRequest{TaskID: id}, true},
		"other team submits":      {api.Subject("nlp", api.OpSubmit), req, true},
		"a team drains":           {api.Subject("nlp", api.OpDrain), api.DrainRequest{Node: "node-1"}, true},
		"unscoped (trusted) show": {api.Subject("", api.OpShow), api.IDRequest{TaskID: id}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := call(tc.subject, tc.body)
			denied := strings.Contains(r.Error, "the caller acts for team")
			if denied != tc.denied {
				t.Fatalf("%s: reply %+v, denied %v want %v", tc.subject, r, denied, tc.denied)
			}
		})
	}
}

// The NATS permissions of the submitter role name every operation it
// answers (auth.Roles), and the advisor's likewise.
func TestRoleOpsMatch(t *testing.T) {
	a, b := slices.Clone(ops), slices.Clone(auth.SubmitterOps)
	slices.Sort(a)
	slices.Sort(b)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("auth.SubmitterOps differs from the submitter's ops (-ops +auth):\n%s", diff)
	}
}
