package submitter

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/events/memlog"
	"github.com/gpuq/gpuq/pkg/metrics"
)

// TestBrowserSafety: a web page must not act through the HTTP API. Before,
// a cross-site POST with Content-Type text/plain (which a browser sends
// without a preflight) or with a DNS-rebinding Host was accepted and the
// task ran its command.
func TestBrowserSafety(t *testing.T) {
	h := newHarness(t, nil)
	body := mustJSON(t, validReq())
	ctJSON := "application/json"
	cases := map[string]struct {
		method, path string
		hdr          http.Header
		body         string
		want         int
		wantField    string
	}{
		"curl: json, own host":            {"POST", "/v1/tasks", http.Header{"Content-Type": {ctJSON}}, body, 201, ""},
		"json with charset":               {"POST", "/v1/tasks", http.Header{"Content-Type": {"application/json; charset=utf-8"}}, body, 201, ""},
		"JSON type in upper case":         {"POST", "/v1/tasks", http.Header{"Content-Type": {"Application/JSON"}}, body, 201, ""},
		"text/plain from a page":          {"POST", "/v1/tasks", http.Header{"Content-Type": {"text/plain"}}, body, 415, "Content-Type"},
		"form from a page":                {"POST", "/v1/tasks", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, body, 415, "Content-Type"},
		"multipart from a page":           {"POST", "/v1/tasks", http.Header{"Content-Type": {"multipart/form-data; boundary=x"}}, body, 415, "Content-Type"},
		"no content type":                 {"POST", "/v1/tasks", http.Header{}, body, 415, "Content-Type"},
		"no content type, empty body":     {"POST", "/v1/tasks/x/cancel", http.Header{}, "", 415, "Content-Type"},
		"a json look-alike":               {"POST", "/v1/tasks", http.Header{"Content-Type": {"application/jsonx"}}, body, 415, "Content-Type"},
		"unparsable content type":         {"POST", "/v1/tasks", http.Header{"Content-Type": {"application/json; ="}}, body, 415, "Content-Type"},
		"a drain as text/plain":           {"POST", "/v1/nodes/n1/drain", http.Header{"Content-Type": {"text/plain"}}, `{}`, 415, "Content-Type"},
		"DELETE without json":             {"DELETE", "/v1/tasks", http.Header{}, "", 415, "Content-Type"},
		"GET needs no content type":       {"GET", "/v1/tasks", http.Header{}, "", 200, ""},
		"rebinding host":                  {"POST", "/v1/tasks", http.Header{"Content-Type": {ctJSON}, "Host": {"evil.example:8080"}}, body, 421, "Host"},
		"rebinding host reads":            {"GET", "/v1/tasks", http.Header{"Host": {"evil.example"}}, "", 421, "Host"},
		"rebinding host, healthz":         {"GET", "/healthz", http.Header{"Host": {"evil.example"}}, "", 421, "Host"},
		"a subdomain of localhost":        {"GET", "/v1/tasks", http.Header{"Host": {"localhost.evil.example"}}, "", 421, "Host"},
		"no host":                         {"GET", "/v1/tasks", http.Header{"Host": {""}}, "", 421, "Host"},
		"127.0.0.1 with port":             {"GET", "/v1/tasks", http.Header{"Host": {"127.0.0.1:8080"}}, "", 200, ""},
		"[::1] with port":                 {"GET", "/v1/tasks", http.Header{"Host": {"[::1]:8080"}}, "", 200, ""},
		"LOCALHOST without port":          {"GET", "/v1/tasks", http.Header{"Host": {"LOCALHOST"}}, "", 200, ""},
		"localhost. (trailing dot)":       {"GET", "/v1/tasks", http.Header{"Host": {"localhost.:8080"}}, "", 200, ""},
		"another IP on loopback listener": {"GET", "/v1/tasks", http.Header{"Host": {"10.1.2.3:8080"}}, "", 421, "Host"},
		"same origin":                     {"POST", "/v1/tasks", http.Header{"Content-Type": {ctJSON}, "Origin": {"http://" + testHost}}, body, 201, ""},
		"same origin, GET":                {"GET", "/v1/tasks", http.Header{"Origin": {"http://" + testHost}}, "", 200, ""},
		"cross-site origin":               {"POST", "/v1/tasks", http.Header{"Content-Type": {ctJSON}, "Origin": {"https://evil.example"}}, body, 403, "Origin"},
		"cross-site origin, GET":          {"GET", "/v1/tasks", http.Header{"Origin": {"https://evil.example"}}, "", 403, "Origin"},
		"origin on another port":          {"POST", "/v1/tasks", http.Header{"Content-Type": {ctJSON}, "Origin": {"http://localhost:3000"}}, body, 403, "Origin"},
		"origin of another scheme":        {"POST", "/v1/tasks", http.Header{"Content-Type": {ctJSON}, "Origin": {"https://" + testHost}}, body, 403, "Origin"},
		"null origin (sandboxed page)":    {"POST", "/v1/tasks", http.Header{"Content-Type": {ctJSON}, "Origin": {"null"}}, body, 403, "Origin"},
		"two origins":                     {"GET", "/v1/tasks", http.Header{"Origin": {"http://" + testHost, "https://evil.example"}}, "", 403, "Origin"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := tc.body
			if tc.want == 201 {
				b = strings.Replace(b, `"bert-base"`, `"`+strings.ReplaceAll(name, " ", "-")+`"`, 1)
				b = strings.ReplaceAll(b, "(", "")
				b = strings.ReplaceAll(b, ")", "")
			}
			w := h.httpCallHeader(tc.method, tc.path, b, tc.hdr)
			if w.Code != tc.want {
				t.Fatalf("%s %s: %d, want %d: %s", tc.method, tc.path, w.Code, tc.want, w.Body)
			}
			if tc.wantField != "" {
				if got := errReply(t, w).Field; got != tc.wantField {
					t.Errorf("field %q, want %q: %s", got, tc.wantField, w.Body)
				}
			}
		})
	}
	// Nothing refused reached the log.
	all, err := h.s.queue(h.ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 {
		t.Errorf("%d tasks in the log, want the 4 accepted submissions", len(all))
	}
}

// TestHostPolicy: the Host names each kind of listener answers to.
func TestHostPolicy(t *testing.T) {
	cases := map[string]struct {
		listen  string
		extra   []string
		allowed []string
		refused []string
	}{
		"loopback IP": {listen: "127.0.0.1:8080",
			allowed: []string{"localhost", "localhost:8080", "127.0.0.1", "127.0.0.1:9", "[::1]:8080", "::1"},
			refused: []string{"evil.example", "10.0.0.1", "", "127.0.0.2", "localhost.evil.example"}},
		"localhost by name": {listen: "localhost:8080",
			allowed: []string{"localhost:8080", "127.0.0.1:8080"},
			refused: []string{"evil.example"}},
		"a specific IP": {listen: "10.0.0.5:8080",
			allowed: []string{"10.0.0.5:8080", "10.0.0.5"},
			refused: []string{"localhost", "10.0.0.6", "evil.example"}},
		"wildcard": {listen: ":8080",
			allowed: []string{"localhost", "10.9.8.7:8080", "[fe80::1]:8080", "127.0.0.1"},
			refused: []string{"evil.example", "submitter:8080"}},
		"wildcard with a configured name": {listen: "0.0.0.0:8080", extra: []string{"submitter", "GPUQ.Example.COM"},
			allowed: []string{"submitter:8080", "gpuq.example.com", "gpuq.example.com.:443", "192.168.1.1"},
			refused: []string{"evil.example"}},
		"any host (a proxy checks it)": {listen: "127.0.0.1:8080", extra: []string{"*"},
			allowed: []string{"evil.example", "whatever"}},
		"no listener: loopback names": {listen: "",
			allowed: []string{"localhost:8080"},
			refused: []string{"evil.example", "10.0.0.1"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := newHostPolicy(tc.listen, tc.extra)
			for _, h := range tc.allowed {
				if !p.allows(h) {
					t.Errorf("Host %q refused, want allowed (names: %s)", h, p)
				}
			}
			for _, h := range tc.refused {
				if p.allows(h) {
					t.Errorf("Host %q allowed, want refused (names: %s)", h, p)
				}
			}
		})
	}
}

// TestAllowedOrigins: an operator may allow a page's origin on purpose.
func TestAllowedOrigins(t *testing.T) {
	h := newHarness(t, nil)
	var err error
	if h.s.origins, err = originSet([]string{"https://Dash.Example:443"}); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		origin string
		want   int
	}{
		"the allowed origin":       {"https://dash.example", 200},
		"with its default port":    {"https://dash.example:443", 200},
		"the allowed one, on http": {"http://dash.example", 403},
		"another":                  {"https://evil.example", 403},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := h.httpCallHeader("GET", "/v1/tasks", "", http.Header{"Origin": {tc.origin}})
			if w.Code != tc.want {
				t.Fatalf("Origin %s: %d, want %d: %s", tc.origin, w.Code, tc.want, w.Body)
			}
		})
	}
	for _, bad := range []string{"dash.example", "https://dash.example/path", "ftp://dash.example", "null"} {
		if _, err := originSet([]string{bad}); err == nil {
			t.Errorf("originSet(%q): no error", bad)
		}
	}
}

// TestOriginOverTLS: the request's own origin has the scheme it came in by.
func TestOriginOverTLS(t *testing.T) {
	h := newHarness(t, nil)
	r, _ := http.NewRequest("GET", "/v1/tasks", nil)
	r.Host, r.TLS = testHost, &tls.ConnectionState{}
	for origin, want := range map[string]int{"https://" + testHost: 200, "http://" + testHost: 403} {
		r.Header.Set("Origin", origin)
		w := httptest.NewRecorder()
		h.h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("over TLS, Origin %s: %d, want %d: %s", origin, w.Code, want, w.Body)
		}
	}
}

// TestMetricsAuth: under tokens /metrics needs the admin's token; before,
// it answered without one.
func TestMetricsAuth(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "gpuq_test_total", Help: "a test counter"}))
	h, tok := tokenHarness(t)
	h.s.metrics = reg
	h.h = h.s.handler()
	open := newHarness(t, nil)
	open.s.metrics = reg
	open.h = open.s.handler()
	cases := map[string]struct {
		h         *harness
		token     string
		scheme    string
		want      int
		wantField string
	}{
		"tokens: none":                {h, "", "Bearer ", 401, "authorization"},
		"tokens: unknown":             {h, "gpuq_not-a-token-of-ours-at-all", "Bearer ", 401, "authorization"},
		"tokens: a team's":            {h, tok["vision"], "Bearer ", 403, "authorization"},
		"tokens: the admin's":         {h, tok["admin"], "Bearer ", 200, ""},
		"tokens: the admin's, bearer": {h, tok["admin"], "bearer ", 200, ""},
		"no tokens: open":             {open, "", "", 200, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			hdr := http.Header{}
			if tc.token != "" {
				hdr.Set("Authorization", tc.scheme+tc.token)
			}
			w := tc.h.httpCallHeader("GET", metrics.Path, "", hdr)
			if w.Code != tc.want {
				t.Fatalf("GET /metrics: %d, want %d: %s", w.Code, tc.want, w.Body)
			}
			if tc.want == 200 && !strings.Contains(w.Body.String(), "gpuq_test_total") {
				t.Errorf("GET /metrics: no metrics: %s", w.Body)
			}
			if tc.wantField != "" {
				if got := errReply(t, w).Field; got != tc.wantField {
					t.Errorf("field %q, want %q", got, tc.wantField)
				}
			}
		})
	}
	// The rest of the API takes a lower-case scheme too (RFC 9110).
	w := h.httpCallHeader("GET", "/v1/tasks", "", http.Header{"Authorization": {"bearer " + tok["vision"]}})
	if w.Code != 200 {
		t.Errorf("GET /v1/tasks with \"bearer\": %d: %s", w.Code, w.Body)
	}
}

// TestCancelBy: who cancelled is the credential when callers are
// authenticated; what the caller wrote is kept apart as a note. Before, a
// team's token could write "by": "admin (security team)" into the log.
func TestCancelBy(t *testing.T) {
	type want struct{ by, note, reason string }
	cases := map[string]struct {
		tokens   bool   // HTTP with tokens
		natsAuth bool   // NATS with gpuq's roles
		via      string // "http:<token name>", "nats:<team or empty>"
		said     string
		want     want
	}{
		"http, a team's token": {tokens: true, via: "http:vision", said: "admin (security team)",
			want: want{"team:vision", "admin (security team)", `cancelled by team:vision (note: "admin (security team)")`}},
		"http, the admin's token": {tokens: true, via: "http:admin", said: "alice",
			want: want{"admin", "alice", `cancelled by admin (note: "alice")`}},
		"http, a token, nothing said": {tokens: true, via: "http:vision",
			want: want{"team:vision", "", "cancelled by team:vision"}},
		"http without tokens: as before": {via: "http:", said: "alice",
			want: want{"alice", "", "cancelled by alice"}},
		"nats with roles, a team's subject": {natsAuth: true, via: "nats:vision", said: "admin",
			want: want{"team:vision", "admin", `cancelled by team:vision (note: "admin")`}},
		"nats with roles, unscoped (the admin)": {natsAuth: true, via: "nats:", said: "bob",
			want: want{"admin", "bob", `cancelled by admin (note: "bob")`}},
		"nats without roles: as before": {via: "nats:", said: "bob",
			want: want{"bob", "", "cancelled by bob"}},
		"nats without roles, a team's subject: as before": {via: "nats:vision", said: "bob",
			want: want{"bob", "", "cancelled by bob"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var (
				h   *harness
				tok map[string]string
			)
			if tc.tokens {
				h, tok = tokenHarness(t)
			} else {
				h = newHarness(t, nil)
			}
			h.s.natsAuth = tc.natsAuth
			req := validReq()
			req.Team = "vision"
			id := h.submit(req).TaskID
			body := mustJSON(t, api.IDRequest{By: tc.said})
			how, who, _ := strings.Cut(tc.via, ":")
			switch how {
			case "http":
				code, b := h.httpAs(tok[who], "POST", "/v1/tasks/"+id+"/cancel", body)
				if code != 200 {
					t.Fatalf("cancel: %d %s", code, b)
				}
			case "nats":
				ctx, op := h.s.natsContext(h.ctx, api.Subject(who, api.OpCancel))
				if r := h.s.handleNATS(ctx, op, []byte(mustJSON(t, api.IDRequest{TaskID: id, By: tc.said}))); r.Error != "" {
					t.Fatalf("cancel: %+v", r)
				}
			}
			hist, err := h.s.history(h.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			last := hist[len(hist)-1]
			var e struct{ By, Note, Reason string }
			if err := json.Unmarshal(last.Data, &e); err != nil || last.Type != "cancelled" {
				t.Fatalf("last event %s %s: %v", last.Type, last.Data, err)
			}
			got := want{e.By, e.Note, e.Reason}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("cancelled event (-want +got):\n%s", diff)
			}
			if v := h.show(id); v.Reason != tc.want.reason {
				t.Errorf("show's reason %q, want %q", v.Reason, tc.want.reason)
			}
		})
	}
}

// TestMetricsListener: with tokens, /metrics on the API wants the admin's
// token, while a --metrics listener the operator chose serves it without
// one; the API's own routes are not on that listener.
func TestMetricsListener(t *testing.T) {
	h, _ := tokenHarness(t) // its tokens
	apiAddr, mAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Log: memlog.New(), HTTPAddr: apiAddr, MetricsAddr: mAddr, Tokens: h.s.tokens, Limits: testLimits,
			Logger: testLogger(t), Metrics: metrics.New(), Ready: func() { close(ready) }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	<-ready
	cases := map[string]struct {
		url  string
		want int
	}{
		"API /metrics without a token":     {"http://" + apiAddr + "/metrics", 401},
		"--metrics /metrics without token": {"http://" + mAddr + "/metrics", 200},
		"--metrics has no API":             {"http://" + mAddr + "/v1/tasks", 404},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			resp, err := http.Get(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET %s: %d, want %d", tc.url, resp.StatusCode, tc.want)
			}
		})
	}
}
