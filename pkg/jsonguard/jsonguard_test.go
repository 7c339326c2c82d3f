package jsonguard_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/jsonguard"
	"github.com/gpuq/gpuq/pkg/jsonguard/jsonguardtest"
)

func TestCheck(t *testing.T) {
	deep := func(n int, open, close string) string {
		return strings.Repeat(open, n) + strings.Repeat(close, n)
	}
	cases := map[string]struct {
		in       string
		wantPath string
		wantRule string // "" = accepted
	}{
		"object":                       {in: `{"a":1,"b":[true,false,null],"c":{"d":"e"}}`},
		"white space around":           {in: " \n{ \"a\" : [ 1 , 2 ] }\t"},
		"a string":                     {in: `"x"`},
		"numbers":                      {in: `[0,-0,1.5,-2e10,3E+2,4e-2,1e308,1e-400]`},
		"escapes":                      {in: `{"a":"\" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00"}`},
		"UTF-8":                        {in: `{"名":"résnet 日本 😀"}`},
		"64 arrays":                    {in: deep(64, "[", "]")},
		"65 arrays":                    {in: deep(65, "[", "]"), wantRule: "must not nest arrays and objects deeper than 64 levels"},
		"65 objects":                   {in: deep(65, `{"a":`, "}")[:65*5] + "1" + strings.Repeat("}", 65), wantRule: "deeper than 64 levels"},
		"unclosed deep arrays":         {in: strings.Repeat("[", 100000), wantRule: "deeper than 64 levels"},
		"repeated key":                 {in: `{"gpus":1,"name":"a","gpus":64}`, wantPath: "gpus", wantRule: "is given twice; give each key once"},
		"repeated nested key":          {in: `{"env":{"A":"1","A":"2"}}`, wantPath: "env.A", wantRule: "is given twice"},
		"repeated key spelled escaped": {in: `{"a":1,"\u0061":2}`, wantPath: "a", wantRule: "is given twice"},
		"repeated key in a big object": {in: `{` + manyKeys(40) + `,"k7":1}`, wantPath: "k7", wantRule: "is given twice"},
		"same key in two objects":      {in: `[{"a":1},{"a":2},{"b":{"a":3}}]`},
		"key after a closed object":    {in: `{"a":{"b":1},"b":2}`},
		"invalid UTF-8":                {in: "{\"name\":\"a\xffb\"}", wantPath: "name", wantRule: "must be valid UTF-8 (invalid byte 0xff at byte 10)"},
		"UTF-8 of a surrogate":         {in: "{\"name\":\"\xed\xa0\x80\"}", wantPath: "name", wantRule: "must be valid UTF-8"},
		"invalid UTF-8 in an array":    {in: "{\"xs\":[\"ok\",\"\xc3\"]}", wantPath: "xs[1]", wantRule: "must be valid UTF-8"},
		"invalid UTF-8 in a key":       {in: "{\"env\":{\"A\xff\":\"1\"}}", wantPath: "env", wantRule: "must be valid UTF-8"},
		"lone high surrogate":          {in: `{"name":"\ud800"}`, wantPath: "name", wantRule: `must not contain a lone surrogate escape (\ud800 at byte 9)`},
		"lone low surrogate":           {in: `{"name":"\udc00x"}`, wantPath: "name", wantRule: "lone surrogate"},
		"high then not low":            {in: `{"name":"\ud800\u0041"}`, wantPath: "name", wantRule: "lone surrogate"},
		"overflowing number":           {in: `{"hours":1e309}`, wantPath: "hours", wantRule: "must be a finite number (got 1e309)"},
		"overflowing negative":         {in: `{"a":[-1.8e308]}`, wantPath: "a[0]", wantRule: "must be a finite number"},
		"overflowing digits":           {in: `{"a":` + strings.Repeat("9", 400) + `}`, wantPath: "a", wantRule: "must be a finite number (got 99999"},
		"syntax: missing value":        {in: `{"gpus":}`, wantRule: "invalid JSON at byte 8"},
		"syntax: trailing data":        {in: `{"gpus":1} {}`, wantRule: "unexpected data after the value"},
		"syntax: trailing comma":       {in: `[1,]`, wantRule: "invalid JSON at byte 3"},
		"syntax: control in string":    {in: "\"a\nb\"", wantRule: "control character"},
		"syntax: bad escape":           {in: `"\x"`, wantRule: "invalid escape"},
		"syntax: leading zero":         {in: `01`, wantRule: "unexpected data after the value"},
		"syntax: empty":                {in: ``, wantRule: "unexpected end of input"},
		"syntax: unclosed":             {in: `{"a":[1`, wantRule: "unexpected end of input"},
		"syntax: bare word":            {in: `nul`, wantRule: "invalid literal"},
		"syntax: key not a string":     {in: `{a:1}`, wantRule: "looking for the beginning of a key"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := jsonguard.Check([]byte(tc.in))
			if tc.wantRule == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if !json.Valid([]byte(tc.in)) {
					t.Fatalf("accepted what encoding/json refuses")
				}
				return
			}
			var e *jsonguard.Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want a *jsonguard.Error", err)
			}
			if e.Path != tc.wantPath || !strings.Contains(e.Rule, tc.wantRule) {
				t.Fatalf("err = %q on %q, want …%s… on %q", e.Rule, e.Path, tc.wantRule, tc.wantPath)
			}
		})
	}
}

func manyKeys(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + itoa(i) + `":0`)
	}
	return b.String()
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func TestTopLevelKeys(t *testing.T) {
	d, err := jsonguard.Check([]byte(`{"name":"x","env":{"gpus":1},"hours":2}`))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]bool{"name": true, "hours": true, "env": true, "gpus": false} {
		if d.Has(k) != want {
			t.Errorf("Has(%q) = %v, want %v", k, !want, want)
		}
	}
	if !d.Object() {
		t.Error("Object() = false")
	}
	if d, _ := jsonguard.Check([]byte(`[{"gpus":1}]`)); d.Has("gpus") || d.Object() {
		t.Error("an array's element counted as a top-level key")
	}
}

// TestCheckMemory: checking a 1 MiB adversarial document allocates at most
// k times its size (the whole allocation, TotalAlloc, bounds the peak).
func TestCheckMemory(t *testing.T) {
	const n, k = 1 << 20, 16
	for name, doc := range jsonguardtest.Adversarial(n) {
		t.Run(name, func(t *testing.T) {
			got := jsonguardtest.Allocated(func() { _, _ = jsonguard.Check(doc) })
			t.Logf("%d bytes: %d bytes allocated (%.2f x)", len(doc), got, float64(got)/float64(len(doc)))
			if got > uint64(k*len(doc)) {
				t.Fatalf("checking %d bytes allocated %d bytes, more than %d x", len(doc), got, k)
			}
		})
	}
}

// FuzzCheck: Check never accepts what encoding/json refuses, and accepts
// every valid document without the shapes it refuses.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1,"x",{"b":null}]`, `{"a":1,"a":2}`, `"\ud800"`, `1e309`, "\"\xff\"", `[[[[]]]]`, `{"\u0061":1,"a":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := jsonguard.Check(data)
		if err == nil && !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		var e *jsonguard.Error
		if err != nil && !errors.As(err, &e) {
			t.Fatalf("err %v is not an *Error", err)
		}
		if err != nil && json.Valid(data) && strings.HasPrefix(e.Rule, "invalid JSON") {
			t.Fatalf("called valid JSON %q invalid: %v", data, err)
		}
	})
}

// TestCheckDepth: the syntax-and-depth check keeps what Check refuses
// for its content (JSON kept as it is, not decoded) and refuses only
// nesting past its limit and what is not JSON.
func TestCheckDepth(t *testing.T) {
	for name, tc := range map[string]struct {
		in       string
		max      int
		wantRule string
	}{
		"repeated key":     {in: `{"a":1,"a":2}`, max: 2},
		"invalid UTF-8":    {in: "[\"\xff\"]", max: 2},
		"lone surrogate":   {in: `{"\ud800":"\udc00"}`, max: 2},
		"overflow":         {in: `[1e999]`, max: 2},
		"at the limit":     {in: `[[{"a":[]}]]`, max: 4},
		"past the limit":   {in: `[[{"a":[]}]]`, max: 3, wantRule: "deeper than 3 levels"},
		"not JSON":         {in: `[1,]`, max: 3, wantRule: "invalid JSON"},
		"a million arrays": {in: strings.Repeat("[", 1<<20), max: 64, wantRule: "deeper than 64 levels"},
	} {
		t.Run(name, func(t *testing.T) {
			err := jsonguard.CheckDepth([]byte(tc.in), tc.max)
			if tc.wantRule == "" && err != nil || tc.wantRule != "" && (err == nil || !strings.Contains(err.Error(), tc.wantRule)) {
				t.Fatalf("err = %v, want …%s…", err, tc.wantRule)
			}
		})
	}
}
