//go:build hostile

package hostile

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// body is a submission of team vision with some fields replaced by raw
// JSON (or removed, with a nil value), as a hostile client writes it.
func body(name string, raw map[string]any) []byte {
	m := map[string]json.RawMessage{}
	for k, v := range task(name) {
		m[k] = mustJSON(v)
	}
	for k, v := range raw {
		switch v := v.(type) {
		case nil:
			delete(m, k)
		case rawJSON:
			m[k] = json.RawMessage(v)
		default:
			m[k] = mustJSON(v)
		}
	}
	// Marshal would check (and so refuse) invalid raw JSON: join by hand.
	var b strings.Builder
	b.WriteString("{")
	first := true
	for k, v := range m {
		if !first {
			b.WriteString(",")
		}
		first = false
		b.Write(mustJSON(k))
		b.WriteString(":")
		b.Write(v)
	}
	b.WriteString("}")
	return []byte(b.String())
}

// rawJSON is a field's value as written on the wire, unchecked.
type rawJSON string

// refusal is a submission that must be refused naming field (a prefix
// for env.NAME), with words its error must contain.
type refusal struct {
	raw       map[string]any
	field     string
	words     []string
	plainOnly bool // the team itself is the bad field: under --auth a token's team decides first
}

// validationCases are the validation gaps of #22 (Deliver 6) and the
// wire names of the fields (SPEC-22, bounded decoding).
func validationCases() map[string]refusal {
	return map[string]refusal{
		"hours 1e-300 (under one second)":    {raw: map[string]any{"hours": rawJSON("1e-300")}, field: "hours"},
		"hours 0.0002 (under one second)":    {raw: map[string]any{"hours": 0.0002}, field: "hours"},
		"hours 1e309 (overflow)":             {raw: map[string]any{"hours": rawJSON("1e309")}, field: "hours", words: []string{"finite"}},
		"command of 400 KB":                  {raw: map[string]any{"command": strings.Repeat("x", 400<<10)}, field: "command"},
		"command of 131,072 bytes":           {raw: map[string]any{"command": strings.Repeat("y", 131072)}, field: "command"},
		"env value with NUL":                 {raw: map[string]any{"env": map[string]string{"SEED": "1\x002"}}, field: "env"},
		"dir with NUL":                       {raw: map[string]any{"dir": "/tmp/a\x00b"}, field: "dir"},
		"invalid UTF-8 bytes in name":        {raw: map[string]any{"name": rawJSON("\"bad-\xff\xfe-name\"")}, field: "name"},
		"lone surrogate in hypothesis":       {raw: map[string]any{"hypothesis": rawJSON(`"half \ud800 a pair"`)}, field: "hypothesis"},
		"lone low surrogate in name":         {raw: map[string]any{"name": rawJSON(`"x\udc00y"`)}, field: "name"},
		"zero-width space in name":           {raw: map[string]any{"name": "train\u200bnet"}, field: "name"},
		"word joiner in name":                {raw: map[string]any{"name": "train\u2060net"}, field: "name"},
		"BOM in name":                        {raw: map[string]any{"name": "\ufefftrain"}, field: "name"},
		"zero-width joiner in team":          {raw: map[string]any{"team": "vis\u200dion"}, field: "team", plainOnly: true},
		"grace_s negative":                   {raw: map[string]any{"grace_s": -1}, field: "grace_s"},
		"grace_s over an hour":               {raw: map[string]any{"grace_s": 1e9}, field: "grace_s"},
		"min_gpu_mem_mib negative":           {raw: map[string]any{"min_gpu_mem_mib": -1}, field: "min_gpu_mem_mib"},
		"gpus 0 given explicitly":            {raw: map[string]any{"gpus": 0}, field: "gpus", words: []string{"got 0"}},
		"name omitted is required":           {raw: map[string]any{"name": nil}, field: "name", words: []string{"required"}},
		"hypothesis omitted is required":     {raw: map[string]any{"hypothesis": nil}, field: "hypothesis", words: []string{"required"}},
		"command omitted is required":        {raw: map[string]any{"command": nil}, field: "command", words: []string{"required"}},
		"idempotency key with NUL":           {raw: map[string]any{"idempotency_key": "k\x00"}, field: "idempotency_key"},
		"lone surrogate in an env value":     {raw: map[string]any{"env": rawJSON(`{"SEED":"\ud800"}`)}, field: "env"},
		"invalid UTF-8 bytes in the command": {raw: map[string]any{"command": rawJSON("\"echo \xc3\x28\"")}, field: "command"},
	}
}

// TestValidationHTTP: every gap refused over HTTP with 400 and the wire
// field, with and without --auth; nothing refused is in the queue.
func TestValidationHTTP(t *testing.T) {
	for _, auth := range []bool{false, true} {
		t.Run(mode(auth), func(t *testing.T) {
			d := sharedDev(t, auth)
			for name, c := range validationCases() {
				if c.plainOnly && auth {
					continue
				}
				if c.field == "" {
					continue // (env entry: a control that the env total still holds)
				}
				t.Run(name, func(t *testing.T) {
					n := uniq("val")
					r := d.req("POST", "/v1/tasks", d.auth(t, "vision"), body(n, c.raw))
					checkRefusal(t, r.Status, r.errBody(), r.String(), c)
				})
			}
		})
	}
}

// TestValidationNATS: the same over the NATS request API
// (gpuq.api.v1.submit; a team's gpuq.api.v1.team.vision.submit under --auth).
func TestValidationNATS(t *testing.T) {
	for _, auth := range []bool{false, true} {
		t.Run(mode(auth), func(t *testing.T) {
			d := sharedDev(t, auth)
			nc := d.connect(t, "ci-vision")
			subj := "gpuq.api.v1.submit"
			if auth {
				subj = "gpuq.api.v1.team.vision.submit"
			}
			for name, c := range validationCases() {
				if c.plainOnly && auth || c.field == "" {
					continue
				}
				t.Run(name, func(t *testing.T) {
					rep, err := call(nc, subj, body(uniq("val"), c.raw), 20*time.Second)
					if err != nil {
						t.Fatalf("request: %v", err)
					}
					status := http.StatusBadRequest
					if rep.Error == "" {
						status = http.StatusCreated
					}
					checkRefusal(t, status, errBody{rep.Error, rep.Field, rep.NotFound}, string(rep.Result)+rep.Error, c)
				})
			}
		})
	}
}

func checkRefusal(t *testing.T, status int, e errBody, raw string, c refusal) {
	t.Helper()
	if status != http.StatusBadRequest {
		t.Fatalf("answered %d, want 400 field %s: %s", status, c.field, raw)
	}
	if e.Field != c.field && !(c.field == "env" && strings.HasPrefix(e.Field, "env")) {
		t.Errorf("field %q, want %q (error %q)", e.Field, c.field, e.Error)
	}
	for _, w := range c.words {
		if !strings.Contains(e.Error, w) {
			t.Errorf("error %q does not say %q", e.Error, w)
		}
	}
	if strings.Contains(e.Error, "got number") {
		t.Errorf("error %q says nothing useful", e.Error)
	}
}

// TestOmittedDefaults: omitted gpus and hours take the CLI's defaults (1
// and 4.0) over HTTP and NATS alike, instead of "(got 0)".
func TestOmittedDefaults(t *testing.T) {
	d := sharedDev(t, false)
	check := func(t *testing.T, id string) {
		v := d.show(t, id)
		if v.GPUs != 1 || v.Hours != 4.0 {
			t.Errorf("omitted gpus/hours became gpus %d hours %g, want 1 and 4", v.GPUs, v.Hours)
		}
	}
	t.Run("http", func(t *testing.T) {
		r := d.req("POST", "/v1/tasks", nil, body(uniq("defaults"), map[string]any{"gpus": nil, "hours": nil}))
		if r.Status != http.StatusCreated {
			t.Fatalf("submit without gpus and hours: %s", r)
		}
		var rep struct {
			TaskID string `json:"task_id"`
		}
		_ = json.Unmarshal(r.Body, &rep)
		check(t, rep.TaskID)
	})
	t.Run("nats", func(t *testing.T) {
		rep, err := call(d.connect(t, ""), "gpuq.api.v1.submit", body(uniq("defaults"), map[string]any{"gpus": nil, "hours": nil}), 20*time.Second)
		if err != nil || rep.Error != "" {
			t.Fatalf("submit without gpus and hours: %v %s (field %s)", err, rep.Error, rep.Field)
		}
		var res struct {
			TaskID string `json:"task_id"`
		}
		_ = json.Unmarshal(rep.Result, &res)
		check(t, res.TaskID)
	})
}

func mode(auth bool) string {
	if auth {
		return "auth"
	}
	return "plain"
}
