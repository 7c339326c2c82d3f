//go:build hostile

package hostile

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// submitArgs are `gpuq submit` flags of a valid task of team vision.
func submitArgs(name string, extra ...string) []string {
	return append([]string{"submit", "--name", name, "--team", "vision", "--priority", "low",
		"--hypothesis", "hostile: " + name, "--command", "echo " + name, "--hours", "0.5"}, extra...)
}

// TestCLIHours: --hours NaN, Inf and 1e-300 are refused, exit 2,
// naming hours (NaN used to be exit 1 "json: unsupported value"; 1e-300
// was accepted).
func TestCLIHours(t *testing.T) {
	d := sharedDev(t, false)
	for _, h := range []string{"NaN", "nan", "Inf", "-Inf", "+Inf", "1e-300", "0.0001"} {
		t.Run(h, func(t *testing.T) {
			r := cli(t, nil, append(submitArgs(uniq("cli-hours"), "--hours", h), d.natsFlags("")...)...)
			if r.Code != 2 || !strings.Contains(r.Stderr, "hours") {
				t.Errorf("gpuq submit --hours %s: %s; want exit 2 naming hours", h, r)
			}
		})
	}
}

// TestCLISecretsNamed: each secret-looking variable that submit leaves
// out of the job's environment is named on stderr.
func TestCLISecretsNamed(t *testing.T) {
	d := sharedDev(t, false)
	secrets := []string{"MY_API_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD"}
	env := []string{}
	for _, s := range secrets {
		env = append(env, s+"=hostile-secret-value")
	}
	for name, export := range map[string][]string{
		"default export": nil,
		"--export ALL":   {"--export", "ALL"},
	} {
		t.Run(name, func(t *testing.T) {
			r := cli(t, env, append(append(submitArgs(uniq("cli-secrets")), export...), d.natsFlags("")...)...)
			if r.Code != 0 {
				t.Fatalf("submit: %s", r)
			}
			for _, s := range secrets {
				if !strings.Contains(r.Stderr, s) {
					t.Errorf("%s was dropped without a note naming it; stderr %q", s, r.Stderr)
				}
			}
			if strings.Contains(r.Stderr, "hostile-secret-value") {
				t.Errorf("stderr shows a secret's value: %q", r.Stderr)
			}
		})
	}
}

// TestCLIRefusedExit2: every refused request exits 2, a team's `node
// drain` and `replay` included (they exited 1).
func TestCLIRefusedExit2(t *testing.T) {
	d := sharedDev(t, true)
	for name, args := range map[string][]string{
		"node drain as a team":    {"node", "drain", "node-1"},
		"node undrain as a team":  {"node", "undrain", "node-1"},
		"replay as a team":        {"replay", "--seq", "1"},
		"audit skipped as a team": {"audit", "skipped"},
	} {
		t.Run(name, func(t *testing.T) {
			r := cli(t, nil, append(args, d.natsFlags("ci-vision")...)...)
			if r.Code != 2 {
				t.Errorf("gpuq %s: %s; want exit 2", strings.Join(args, " "), r)
			}
		})
	}
	t.Run("node drain of no such node", func(t *testing.T) {
		r := cli(t, nil, append([]string{"node", "drain", "no-such-node"}, d.natsFlags("admin")...)...)
		if r.Code != 2 {
			t.Errorf("%s; want exit 2", r)
		}
	})
}

// TestIdempotencyKey: the same key with another payload is refused (409,
// field idempotency_key; CLI exit 2) instead of silently answering the
// first task; the Idempotency-Key header works as the body field does,
// and a header that contradicts the body is refused (400, field
// Idempotency-Key).
func TestIdempotencyKey(t *testing.T) {
	for _, auth := range []bool{false, true} {
		t.Run(mode(auth), func(t *testing.T) {
			d := sharedDev(t, auth)
			authz := d.auth(t, "vision")
			post := func(h map[string]string, m map[string]any) reply {
				return d.req("POST", "/v1/tasks", h, mustJSON(m))
			}
			idOf := func(r reply) string {
				var rep struct {
					TaskID string `json:"task_id"`
				}
				_ = json.Unmarshal(r.Body, &rep)
				return rep.TaskID
			}
			t.Run("body key, another payload", func(t *testing.T) {
				k, n := uniq("key"), uniq("idem")
				first := post(authz, with2(task(n), "idempotency_key", k))
				if first.Status != http.StatusCreated {
					t.Fatalf("first: %s", first)
				}
				if again := post(authz, with2(task(n), "idempotency_key", k)); again.Status != http.StatusOK || idOf(again) != idOf(first) {
					t.Errorf("the same payload again: %s, want 200 with %s", again, idOf(first))
				}
				other := post(authz, with2(task(n), "idempotency_key", k, "command", "echo another"))
				if other.Status != http.StatusConflict || other.errBody().Field != "idempotency_key" {
					t.Errorf("another payload: %s, want 409 field idempotency_key", other)
				}
			})
			t.Run("Idempotency-Key header", func(t *testing.T) {
				k, n := uniq("hkey"), uniq("idem-h")
				h := with(authz, "Idempotency-Key", k)
				first := post(h, task(n))
				if first.Status != http.StatusCreated {
					t.Fatalf("first: %s", first)
				}
				again := post(h, task(n))
				if again.Status != http.StatusOK || idOf(again) != idOf(first) {
					t.Errorf("the same header and payload again: %s, want 200 with %s (the header was ignored)", again, idOf(first))
				}
				other := post(h, with2(task(n), "command", "echo another"))
				if other.Status != http.StatusConflict || other.errBody().Field != "idempotency_key" && other.errBody().Field != "Idempotency-Key" {
					t.Errorf("the header's key with another payload: %s, want 409", other)
				}
				both := post(with(authz, "Idempotency-Key", uniq("h")), with2(task(uniq("idem-b")), "idempotency_key", uniq("b")))
				if both.Status != http.StatusBadRequest || both.errBody().Field != "Idempotency-Key" {
					t.Errorf("header and body keys differ: %s, want 400 field Idempotency-Key", both)
				}
			})
			t.Run("cli", func(t *testing.T) {
				k, n := uniq("ckey"), uniq("idem-cli")
				flags := d.natsFlags("ci-vision")
				if r := cli(t, nil, append(submitArgs(n, "--idempotency-key", k), flags...)...); r.Code != 0 {
					t.Fatalf("first: %s", r)
				}
				r := cli(t, nil, append(submitArgs(n, "--idempotency-key", k, "--command", "echo another"), flags...)...)
				if r.Code != 2 || !strings.Contains(r.Stderr, "idempotency") {
					t.Errorf("the key with another payload: %s; want exit 2 naming idempotency_key", r)
				}
			})
		})
	}
}

// TestTeamLogsOverNATS: a team's credentials read its own task's output
// with `gpuq logs`, as its HTTP token can.
func TestTeamLogsOverNATS(t *testing.T) {
	d := sharedDev(t, true)
	marker := uniq("team-logs-output")
	id := d.submit(t, with2(task(uniq("team-logs")), "command", "echo "+marker))
	d.waitState(t, id, "completed")
	if r := d.req("GET", "/v1/tasks/"+id+"/logs", d.auth(t, "vision"), nil); !strings.Contains(string(r.Body), marker) {
		t.Fatalf("HTTP logs with the team's token: %s", r)
	}
	r := cli(t, nil, append([]string{"logs", id}, d.natsFlags("ci-vision")...)...)
	if r.Code != 0 || !strings.Contains(r.Stdout, marker) {
		t.Errorf("gpuq logs with the team's credentials: %s", r)
	}
}

// TestWaitJSONStarted: `gpuq wait ID --json` on a started task gives its
// start, not a zeroed object.
func TestWaitJSONStarted(t *testing.T) {
	d := sharedDev(t, false)
	id := d.submit(t, with2(task(uniq("wait-json")), "command", "sleep 600", "hours", 1))
	t.Cleanup(func() { d.req("POST", "/v1/tasks/"+id+"/cancel", nil, []byte(`{}`)) })
	v := d.waitState(t, id, "running")
	r := cli(t, nil, append([]string{"wait", id, "--json"}, d.natsFlags("")...)...)
	if r.Code != 0 {
		t.Fatalf("gpuq wait --json: %s", r)
	}
	if strings.Contains(r.Stdout, "0001-01-01") {
		t.Errorf("wait --json of a started task holds zero times: %s", r.Stdout)
	}
	if v.StartedAt == nil || len(*v.StartedAt) < 19 {
		t.Fatalf("show gives no start: %+v", v)
	}
	if !strings.Contains(r.Stdout, (*v.StartedAt)[:19]) {
		t.Errorf("wait --json does not give the start %s: %s", *v.StartedAt, r.Stdout)
	}
}

// TestLogsFollowStall: `gpuq logs -f` across a NATS stall.
func TestLogsFollowStall(t *testing.T) {
	t.Skip("left to cmd/gpuq's unit tests: a NATS stall of gpuq dev (its server is in the same process) cannot be made black-box without stopping the services too, and how long a stall `watch` rides out is timing-dependent")
}
