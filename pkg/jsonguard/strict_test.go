package jsonguard_test

import (
	"testing"

	"github.com/gpuq/gpuq/pkg/jsonguard"
)

// TestStrict: each way encoding/json refuses a request has its kind, with
// the field where there is one.
func TestStrict(t *testing.T) {
	type req struct {
		N    int    `json:"n"`
		Name string `json:"name"`
		Sub  struct {
			F float64 `json:"f"`
		} `json:"sub"`
	}
	cases := map[string]struct {
		in        string
		kind      jsonguard.StrictKind // 0: accepted
		field     string
		wantValue string
	}{
		"object":                  {in: `{"n":1,"name":"a"}`},
		"white space after":       {in: "{}  \n"},
		"wrong type":              {in: `{"n":"x"}`, kind: jsonguard.KindType, field: "n", wantValue: "string"},
		"fraction for an integer": {in: `{"n":2.5}`, kind: jsonguard.KindType, field: "n", wantValue: "number 2.5"},
		"nested field":            {in: `{"sub":{"f":true}}`, kind: jsonguard.KindType, field: "sub.f", wantValue: "bool"},
		"not an object":           {in: `[1]`, kind: jsonguard.KindNotObject, wantValue: "array"},
		"syntax":                  {in: `{"n":}`, kind: jsonguard.KindSyntax},
		"unknown field":           {in: `{"n":1,"nope":2}`, kind: jsonguard.KindUnknownField, field: "nope"},
		"unknown field, escaped":  {in: `{"a\"b":2}`, kind: jsonguard.KindUnknownField, field: `a"b`},
		"second value":            {in: `{} {}`, kind: jsonguard.KindTrailing},
		"stray closing brace":     {in: `{}}`, kind: jsonguard.KindTrailing},
		"garbage after":           {in: `{} x`, kind: jsonguard.KindTrailing},
		"truncated":               {in: `{"n":1`, kind: jsonguard.KindOther},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var r req
			e := jsonguard.Strict([]byte(tc.in), &r)
			if tc.kind == 0 {
				if e != nil {
					t.Fatalf("refused (%v); want accepted", e)
				}
				return
			}
			if e == nil {
				t.Fatalf("accepted; want kind %d", tc.kind)
			}
			if e.Kind != tc.kind || e.Field != tc.field || (tc.wantValue != "" && e.Value != tc.wantValue) || e.Error() == "" {
				t.Errorf("kind %d, field %q, value %q (%v); want kind %d, field %q, value %q", e.Kind, e.Field, e.Value, e, tc.kind, tc.field, tc.wantValue)
			}
		})
	}
}
