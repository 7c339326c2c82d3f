//go:build hostile

package hostile

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBrowser: what a web page (or DNS rebinding) can make a browser
// send to gpuq dev is refused before it does anything: a cross-site POST
// without Content-Type application/json (415, field Content-Type), a
// foreign Origin (403, field Origin), a Host that is not a listen name
// (421, field Host); the same requests with the right headers work, and
// nothing refused was submitted or cancelled.
func TestBrowser(t *testing.T) {
	for _, auth := range []bool{false, true} {
		t.Run(mode(auth), func(t *testing.T) {
			d := sharedDev(t, auth)
			_, port, _ := strings.Cut(d.httpAddr, ":")
			victim := d.submit(t, with2(task(uniq("victim")), "command", "sleep 600", "hours", 1))
			t.Cleanup(func() { d.req("POST", "/v1/tasks/"+victim+"/cancel", d.admin(t), []byte(`{}`)) })
			authz := d.auth(t, "vision")
			var refused []string
			cases := map[string]struct {
				method, path string
				hdr          map[string]string
				body         func(name string) []byte
				status       int
				field        string
			}{
				"POST text/plain (a form or fetch without preflight)": {"POST", "/v1/tasks", with(authz, "Content-Type", "text/plain"), submission, 415, "Content-Type"},
				"POST application/x-www-form-urlencoded":              {"POST", "/v1/tasks", with(authz, "Content-Type", "application/x-www-form-urlencoded"), submission, 415, "Content-Type"},
				"POST multipart/form-data":                            {"POST", "/v1/tasks", with(authz, "Content-Type", "multipart/form-data; boundary=x"), submission, 415, "Content-Type"},
				"POST without Content-Type":                           {"POST", "/v1/tasks", with(authz, "Content-Type", ""), submission, 415, "Content-Type"},
				"cancel text/plain with an empty body":                {"POST", "/v1/tasks/" + victim + "/cancel", with(authz, "Content-Type", "text/plain"), nil, 415, "Content-Type"},
				"cancel without Content-Type, no body":                {"POST", "/v1/tasks/" + victim + "/cancel", with(authz, "Content-Type", ""), nil, 415, "Content-Type"},
				"POST from a foreign Origin":                          {"POST", "/v1/tasks", with(authz, "Origin", "https://evil.example"), submission, 403, "Origin"},
				"POST from Origin null":                               {"POST", "/v1/tasks", with(authz, "Origin", "null"), submission, 403, "Origin"},
				"cancel from a foreign Origin":                        {"POST", "/v1/tasks/" + victim + "/cancel", with(authz, "Origin", "http://evil.example:"+port), empty, 403, "Origin"},
				"POST with a rebinding Host":                          {"POST", "/v1/tasks", with(authz, "Host", "evil.example:"+port), submission, 421, "Host"},
				"GET with a rebinding Host":                           {"GET", "/v1/tasks", with(authz, "Host", "evil.example:"+port), nil, 421, "Host"},
				"POST with a rebinding Host, no port":                 {"POST", "/v1/tasks", with(authz, "Host", "attacker.test"), submission, 421, "Host"},
				"cancel with a rebinding Host":                        {"POST", "/v1/tasks/" + victim + "/cancel", with(authz, "Host", "evil.example:"+port), empty, 421, "Host"},
			}
			for name, c := range cases {
				t.Run(name, func(t *testing.T) {
					n := uniq("browser")
					var b []byte
					if c.body != nil {
						b = c.body(n)
						refused = append(refused, n)
					}
					r := d.req(c.method, c.path, c.hdr, b)
					if r.Status != c.status || r.errBody().Field != c.field {
						t.Errorf("answered %s, want %d field %s", r, c.status, c.field)
					}
				})
			}
			// The same requests with what a CLI or a same-origin page sends work.
			for name, h := range map[string]map[string]string{
				"Content-Type with charset": with(authz, "Content-Type", "application/json; charset=utf-8"),
				"its own Origin":            with(authz, "Origin", "http://"+d.httpAddr),
				"Host localhost:port":       with(authz, "Host", "localhost:"+port),
				"Host 127.0.0.1":            with(authz, "Host", "127.0.0.1"),
			} {
				t.Run("accepted: "+name, func(t *testing.T) {
					if r := d.req("POST", "/v1/tasks", h, submission(uniq("browser-ok"))); r.Status != http.StatusCreated {
						t.Errorf("answered %s, want 201", r)
					}
				})
			}
			time.Sleep(300 * time.Millisecond)
			q := d.everything(t)
			for _, n := range refused {
				if strings.Contains(q, n) {
					t.Errorf("refused request's task %s was submitted", n)
				}
			}
			if v := d.show(t, victim); v.State == "cancelled" {
				t.Errorf("a refused cancel cancelled %s", victim)
			}
		})
	}
}

func submission(name string) []byte { return mustJSON(task(name)) }

// TestMetricsNeedToken: under --auth, /metrics answers 401 without a
// token (and not to a team's), 200 to the admin's.
func TestMetricsNeedToken(t *testing.T) {
	d := sharedDev(t, true)
	for name, c := range map[string]struct {
		hdr  map[string]string
		want []int
	}{
		"no token":       {nil, []int{401}},
		"a wrong token":  {map[string]string{"Authorization": "Bearer not-a-token"}, []int{401}},
		"a team's token": {d.auth(t, "vision"), []int{401, 403}},
		"the admin's":    {d.admin(t), []int{200}},
	} {
		t.Run(name, func(t *testing.T) {
			r := d.req("GET", "/metrics", c.hdr, nil)
			ok := false
			for _, w := range c.want {
				ok = ok || r.Status == w
			}
			if !ok {
				t.Errorf("/metrics answered %d, want %v", r.Status, c.want)
			}
		})
	}
}

// TestBearerCaseInsensitive: the scheme of Authorization is
// case-insensitive (RFC 9110): bearer and BEARER are accepted.
func TestBearerCaseInsensitive(t *testing.T) {
	d := sharedDev(t, true)
	tok := d.token(t, "vision")
	for _, scheme := range []string{"Bearer", "bearer", "BEARER", "bEaReR"} {
		t.Run(scheme, func(t *testing.T) {
			if r := d.req("GET", "/v1/tasks", map[string]string{"Authorization": scheme + " " + tok}, nil); r.Status != http.StatusOK {
				t.Errorf("Authorization: %s …: %s", scheme, r)
			}
		})
	}
	if r := d.req("GET", "/v1/tasks", map[string]string{"Authorization": "Basic " + tok}, nil); r.Status != http.StatusUnauthorized {
		t.Errorf("Authorization: Basic …: %s, want 401", r)
	}
}

// TestCancelByFromCredential: under --auth the cancelled event's `by`
// is who the credential is (team vision), over HTTP and NATS; what the
// caller wrote is kept apart, as the note.
func TestCancelByFromCredential(t *testing.T) {
	d := sharedDev(t, true)
	const claim = "admin (security team)"
	cancel := map[string]func(t *testing.T, id string){
		"http with the team's token": func(t *testing.T, id string) {
			if r := d.req("POST", "/v1/tasks/"+id+"/cancel", d.auth(t, "vision"), mustJSON(map[string]string{"by": claim})); r.Status != http.StatusOK {
				t.Fatalf("cancel: %s", r)
			}
		},
		"nats with the team's credentials": func(t *testing.T, id string) {
			rep, err := call(d.connect(t, "ci-vision"), "gpuq.api.v1.team.vision.cancel", mustJSON(map[string]string{"task_id": id, "by": claim}), 20*time.Second)
			if err != nil || rep.Error != "" {
				t.Fatalf("cancel: %v %s", err, rep.Error)
			}
		},
	}
	for name, do := range cancel {
		t.Run(name, func(t *testing.T) {
			id := d.submit(t, with2(task(uniq("cancel-by")), "command", "sleep 600", "hours", 1))
			do(t, id)
			d.waitState(t, id, "cancelled")
			r := d.req("GET", "/v1/tasks/"+id+"/history", d.auth(t, "vision"), nil)
			var hist []struct {
				Type string          `json:"type"`
				Data json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal(r.Body, &hist); err != nil {
				t.Fatalf("history: %v: %s", err, r)
			}
			found := false
			for _, e := range hist {
				if e.Type != "cancelled" {
					continue
				}
				found = true
				var c struct {
					By   string `json:"by"`
					Note string `json:"note"`
				}
				_ = json.Unmarshal(e.Data, &c)
				if c.By == claim || !strings.Contains(c.By, "vision") {
					t.Errorf("cancelled by %q, want the credential's (team vision)", c.By)
				}
				if c.Note != claim {
					t.Errorf("note %q, want what the caller wrote, %q", c.Note, claim)
				}
			}
			if !found {
				t.Fatalf("no cancelled event in %s", r)
			}
			if v := d.show(t, id); strings.Contains(v.Reason, "by "+claim) {
				t.Errorf("show says %q", v.Reason)
			}
		})
	}
}

func empty(string) []byte { return []byte(`{}`) }
