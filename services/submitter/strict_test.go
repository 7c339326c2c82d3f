package submitter

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/domain"
)

// TestDecodeStrict: repeated keys, fractional integers and bodies of the
// wrong kind are refused with the field named and the rule stated, never
// a Go type's name.
func TestDecodeStrict(t *testing.T) {
	for name, tc := range map[string]struct {
		body, field, rule string
	}{
		"repeated key":        {`{"gpus":1,"name":"a","gpus":64}`, "gpus", "is given twice; give each key once"},
		"repeated nested key": {`{"env":{"A":"1","A":"2"}}`, "env.A", "is given twice"},
		"fractional integer":  {`{"gpus":2.5}`, "gpus", "must be a whole number (got 2.5)"},
		"exponent integer":    {`{"gpus":1e100}`, "gpus", "must be a whole number (got 1e100)"},
		"string for a number": {`{"gpus":"2"}`, "gpus", "must be a whole number (got string)"},
		"number for a string": {`{"name":5}`, "name", "must be a JSON string (got number)"},
		"bool":                {`{"no_preempt":"yes"}`, "no_preempt", "must be true or false (got string)"},
		"an array body":       {`[1,2]`, "body", "must be a JSON object (got array)"},
		"a string body":       {`"x"`, "body", "must be a JSON object (got string)"},
		"syntax":              {`{"gpus":}`, "body", "invalid JSON at byte"},
		"unknown field":       {`{"gpu":1}`, "body", `unknown field "gpu"`},
		"trailing data":       {`{"gpus":1} {}`, "body", "unexpected data after the value"},
	} {
		t.Run(name, func(t *testing.T) {
			var req domain.Request
			_, err := decodeBody([]byte(tc.body), &req)
			var oe *opError
			if !errors.As(err, &oe) || oe.Field != tc.field || !strings.Contains(oe.Msg, tc.rule) || oe.Status != 400 {
				t.Fatalf("err = %#v, want 400 on %s: …%s…", err, tc.field, tc.rule)
			}
			for _, goName := range []string{"domain.", "Request", "Go ", "int64", "float64", "struct"} {
				if strings.Contains(oe.Msg, goName) {
					t.Errorf("message %q names a Go type (%s)", oe.Msg, goName)
				}
			}
		})
	}
	var req domain.Request
	if _, err := decodeBody([]byte(`{"gpus":2,"env":{"A":"1","B":"1"},"name":"x"}`), &req); err != nil || req.GPUs != 2 {
		t.Errorf("a good body: %v %+v", err, req)
	}
}
