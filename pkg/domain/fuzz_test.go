package domain_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/domain"
)

// FuzzValidate: submit validation never panics, names a field when it
// refuses, and what it accepts obeys the rules it states (text without
// control characters, counts within the limits, no credentials in the
// environment) and passes again unchanged (Validate normalises once).
// The input is a submission's JSON body, as the HTTP and NATS APIs get it.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{
		`{"name":"bert","team":"nlp","priority":"high","gpus":2,"hours":3,"hypothesis":"h","command":"python t.py"}`,
		`{"name":"a\u001b[2J","team":"nlp","priority":"low","gpus":1,"hours":1,"hypothesis":"h","command":"x"}`,
		`{"name":"n","team":"t","gpus":1,"hours":1,"hypothesis":"h","command":"c","env":{"DATABASE_URL":"postgres://u:p@h/db"}}`,
		`{"name":"n","team":"t","gpus":64,"hours":168,"hypothesis":"h","command":"c\n\tx","preempt_signal":"usr2","grace_s":3600,"dir":"/w"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r domain.Request
		if json.Unmarshal(data, &r) != nil {
			return
		}
		err := r.Validate(domain.DefaultLimits)
		if err != nil {
			fe, ok := err.(*domain.FieldError)
			if !ok || fe.Field == "" || fe.Rule == "" {
				t.Fatalf("Validate(%s) = %v, want a FieldError naming the field and the rule", data, err)
			}
			return
		}
		for field, text := range map[string]string{"name": r.Name, "team": r.Team, "hypothesis": r.Hypothesis, "gpu_model": r.GPUModel} {
			if domain.CheckText(field, text, false) != nil {
				t.Fatalf("accepted %s %q", field, text)
			}
		}
		if r.GPUs < 1 || r.GPUs > domain.DefaultLimits.MaxGPUs || !(r.Hours > 0) || r.Hours > domain.DefaultLimits.MaxHours {
			t.Fatalf("accepted gpus %d hours %g", r.GPUs, r.Hours)
		}
		if domain.CheckEnvValues(r.Env) != nil {
			t.Fatalf("accepted env %q", r.Env)
		}
		again := r
		again.Env = cloneEnv(r.Env)
		if err := again.Validate(domain.DefaultLimits); err != nil {
			t.Fatalf("valid once, then %v: %+v", err, r)
		}
		if diff := cmp.Diff(r, again); diff != "" {
			t.Fatalf("Validate is not idempotent (-first +second):\n%s", diff)
		}
	})
}

func cloneEnv(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
