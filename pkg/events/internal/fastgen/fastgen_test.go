package fastgen

import (
	"strings"
	"testing"
)

// src is a types.go with the given declarations after the Type and its
// constants.
func src(decls string) []byte {
	return []byte(`package events

import "time"

type Type string

const (
	TypeA Type = "a"
	TypeB Type = "b"
)

var _ time.Time

` + decls)
}

// TestGenerate: what the generator writes for each kind of field, and the
// errors that name the field it cannot decode.
func TestGenerate(t *testing.T) {
	cases := []struct {
		name    string
		decls   string
		want    []string // substrings of the output
		notWant []string
		err     string // substring of the error; "" for none
	}{
		{
			name: "primitives",
			decls: `type A struct {
	ID     string    ` + "`json:\"id\"`" + `
	N      int       ` + "`json:\"n\"`" + `
	I      int64     ` + "`json:\"i,omitempty\"`" + `
	U      uint64    ` + "`json:\"u\"`" + `
	F      float64   ` + "`json:\"f\"`" + `
	B      bool      ` + "`json:\"b\"`" + `
	At     time.Time ` + "`json:\"at\"`" + `
	By     *time.Time ` + "`json:\"by,omitempty\"`" + `
	Env    map[string]string ` + "`json:\"env\"`" + `
	L      []string  ` + "`json:\"l\"`" + `
	NoTag  string
	Skip   string ` + "`json:\"-\"`" + `
	hidden string
}
func (A) EventType() Type { return TypeA }`,
			want: []string{
				`case "a":` + "\n\t\treturn TypeA",
				"case TypeA:\n\t\treturn s.a()",
				"var aKeys = wireNames[A]()",
				`case "id":` + "\n\t\t\te.ID, ok = s.str(true)\n\t\t\treturn 1 << 0, ok",
				"v, ok = s.int()\n\t\t\te.N = int(v)\n\t\t\treturn 1 << 1, ok",
				"e.I, ok = s.int()\n\t\t\treturn 1 << 2, ok",
				"e.U, ok = s.uint()",
				"e.F, ok = s.float()",
				"e.B, ok = s.bool()",
				"return 1 << 6, s.time(&e.At)",
				"e.By = &d",
				"e.Env, ok = s.env()",
				"e.L, ok = s.strings()",
				`case "NoTag":` + "\n\t\t\te.NoTag, ok = s.str(true)\n\t\t\treturn 1 << 10, ok",
				`import "time"`,
				"const textSlots = 1",
			},
			notWant: []string{"Skip", "hidden", "s.b()"},
		},
		{
			name: "texts batched, a lone text copied",
			decls: `type A struct {
	ID   string ` + "`json:\"id\" fastdecode:\"text\"`" + `
	Team string ` + "`json:\"team\"`" + `
	Note string ` + "`json:\"note\" fastdecode:\"text\"`" + `
}
type B struct {
	ID string ` + "`json:\"id\" fastdecode:\"text\"`" + `
}
func (A) EventType() Type { return TypeA }
func (B) EventType() Type { return TypeB }`,
			want: []string{
				"ok = s.text(&t, 0)\n\t\t\treturn 1 << 0, ok",
				"e.Team, ok = s.str(true)",
				"ok = s.text(&t, 1)\n\t\t\treturn 1 << 2, ok",
				"t.into(&e.ID, &e.Note)",
				"e.ID, ok = s.str(false)",
				"const textSlots = 2",
			},
			notWant: []string{`import "time"`},
		},
		{
			name: "a slice of structs",
			decls: `type P struct {
	Node string ` + "`json:\"node\"`" + `
	GPUs []string ` + "`json:\"gpus\"`" + `
}
type A struct {
	Ps []P ` + "`json:\"ps\"`" + `
}
func (A) EventType() Type { return TypeA }`,
			want: []string{
				"e.Ps, ok = s.ps()",
				"var pKeys = wireNames[P]()",
				"func (s *scan) ps() ([]P, bool) {",
				"el.Node, ok = s.str(true)",
				"out := []P{}",
			},
		},
		{
			name: "manual: dispatch only",
			decls: `// A is decoded by hand.
//
//fastdecode:manual
type A struct {
	C complex128 ` + "`json:\"c\"`" + `
}
type B struct {
	ID string ` + "`json:\"id\"`" + `
}
func (A) EventType() Type { return TypeA }
func (B) EventType() Type { return TypeB }`,
			want:    []string{"case TypeA:\n\t\treturn s.a()", "func (s *scan) b() (Event, bool) {"},
			notWant: []string{"func (s *scan) a()", "aKeys"},
		},
		{
			name: "unsupported type names the field",
			decls: `type A struct {
	C complex128 ` + "`json:\"c\"`" + `
}
func (A) EventType() Type { return TypeA }`,
			err: "A.C: no fast-decoder primitive for complex128",
		},
		{
			name: "text on a number",
			decls: `type A struct {
	N int ` + "`json:\"n\" fastdecode:\"text\"`" + `
}
func (A) EventType() Type { return TypeA }`,
			err: `A.N: fastdecode:"text" is for strings`,
		},
		{
			name: "unknown directive value",
			decls: `type A struct {
	S string ` + "`json:\"s\" fastdecode:\"intern\"`" + `
}
func (A) EventType() Type { return TypeA }`,
			err: `A: tag fastdecode:"intern": the only value is "text"`,
		},
		{
			name: "embedded struct",
			decls: `type In struct{ X string }
type A struct {
	In
}
func (A) EventType() Type { return TypeA }`,
			err: "A: embedded field In",
		},
		{
			name:  "no events",
			decls: `type A struct{}`,
			err:   "no EventType methods",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Generate("types.go", src(tc.decls))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(string(out), w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestLowerName(t *testing.T) {
	for in, want := range map[string]string{
		"Submitted":        "submitted",
		"PreemptRequested": "preemptRequested",
		"GPU":              "gpu",
		"GPUState":         "gpuState",
		"P":                "p",
	} {
		if got := lowerName(in); got != want {
			t.Errorf("lowerName(%q) = %q, want %q", in, got, want)
		}
	}
}
