package events_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/events"
)

// The fast decoder (fastdecode.go) repeats, by hand, what the struct tags of
// types.go say. The tests in this file hold it to those tags without a
// second hand-written list: they walk every field of every registered event
// type by reflection, nested structs, slices, maps, pointers and times
// included, so a field added to an event is covered the moment it exists.

// A source gives the values a filler puts into leaves. path names the leaf:
// the Go type, then its fields, "[]" for an element and "{}" for a map
// value (Dispatched.Placements[].GPUs[]).
type source interface {
	Key(path string) string // the subject key (task id or node name)
	String(path string) string
	Int(path string, bits int) int64
	Uint(path string, bits int) uint64
	Float(path string, bits int) float64
	Bool(path string) bool
	Time(path string) time.Time
	Len(path string) int // elements of the slice or map at path; -1 for nil
}

// filler sets the fields encoding/json reads and writes (exported, not
// `json:"-"`) of a value by reflection.
type filler struct {
	src source
	// only, if set, is the one leaf to fill (with the key): every other
	// field keeps its zero value, and slices and maps on the way to it get
	// one element.
	only string
	// key is the path of the field Key() returns; it is always filled, so
	// that Encode accepts the event.
	key    string
	leaves []string // the paths filled, in order, without repeats
	fatalf func(format string, args ...any)
}

var timeType = reflect.TypeFor[time.Time]()

// wireName is the JSON key encoding/json uses for f, or false if it skips f.
func wireName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	name, _, _ := strings.Cut(tag, ",")
	if f.Anonymous && name == "" && tag != "-" && f.Type.Kind() == reflect.Struct {
		return "", true // embedded: its fields are the struct's own
	}
	if !f.IsExported() {
		return "", false
	}
	if tag == "-" {
		return "", false
	}
	if name != "" {
		return name, true
	}
	return f.Name, true
}

// wants: something at or under path is to be filled.
func (f *filler) wants(path string) bool {
	if f.only == "" || path == f.key || f.only == path {
		return true
	}
	return strings.HasPrefix(f.only, path) && strings.ContainsRune(".[{", rune(f.only[len(path)]))
}

func (f *filler) leaf(path string) {
	if !slices.Contains(f.leaves, path) {
		f.leaves = append(f.leaves, path)
	}
}

// fill sets v's leaves under path and reports whether it set any.
func (f *filler) fill(v reflect.Value, path string) bool {
	if !f.wants(path) {
		return false
	}
	t := v.Type()
	if t == timeType {
		v.Set(reflect.ValueOf(f.src.Time(path)))
		f.leaf(path)
		return true
	}
	switch t.Kind() {
	case reflect.String:
		if path == f.key {
			v.SetString(f.src.Key(path))
		} else {
			v.SetString(f.src.String(path))
		}
	case reflect.Bool:
		v.SetBool(f.src.Bool(path))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(f.src.Int(path, t.Bits()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(f.src.Uint(path, t.Bits()))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(f.src.Float(path, t.Bits()))
	case reflect.Struct:
		set := false
		for i := range t.NumField() {
			if _, ok := wireName(t.Field(i)); ok && f.fill(v.Field(i), path+"."+t.Field(i).Name) {
				set = true
			}
		}
		return set
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		f.fill(p.Elem(), path)
		v.Set(p)
		return true
	case reflect.Slice, reflect.Array:
		n := v.Len()
		if t.Kind() == reflect.Slice {
			if n = f.len(path); n < 0 {
				return false
			}
			v.Set(reflect.MakeSlice(t, n, n))
		}
		for i := range n {
			f.fill(v.Index(i), path+"[]")
		}
		return true
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			f.fatalf("%s: a map keyed by %s; teach the filler (and check the fast decoder)", path, t.Key())
		}
		n := f.len(path)
		if n < 0 {
			return false
		}
		m := reflect.MakeMapWithSize(t, n)
		for range n {
			k := reflect.New(t.Key()).Elem()
			k.SetString(f.src.String(path + "{key}"))
			e := reflect.New(t.Elem()).Elem()
			f.fill(e, path+"{}")
			m.SetMapIndex(k, e)
		}
		v.Set(m)
		return true
	default:
		f.fatalf("%s: no values for a %s; teach the filler (and check the fast decoder)", path, t)
		return false
	}
	f.leaf(path)
	return true
}

// len is the length of the slice or map at path: one when filling a
// single leaf under it, else the source's.
func (f *filler) len(path string) int {
	if f.only != "" && path != f.key {
		return 1
	}
	return f.src.Len(path)
}

// distinct gives every leaf its own non-zero value, and slices and maps two
// elements: a field that one decoder drops, swaps with another or leaves
// at zero shows.
type distinct struct{ n int }

func (d *distinct) next() int                 { d.n++; return d.n }
func (d *distinct) Key(string) string         { return fmt.Sprintf("key-%d", d.next()) }
func (d *distinct) String(path string) string { return fmt.Sprintf("%s#%d", path, d.next()) }
func (d *distinct) Int(string, int) int64     { return int64(d.next()) }
func (d *distinct) Uint(string, int) uint64   { return uint64(d.next()) }
func (d *distinct) Float(string, int) float64 { return float64(d.next()) + 0.25 }
func (d *distinct) Bool(string) bool          { return true }
func (d *distinct) Len(string) int            { return 2 }
func (d *distinct) Time(string) time.Time {
	n := time.Duration(d.next())
	return time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC).Add(n*time.Second + n*1001)
}

// drawn draws every value with rapid, as JSON-hostile as the generators of
// fastdecode_test.go make them.
type drawn struct{ t *rapid.T }

func (d drawn) Key(path string) string {
	return rapid.StringMatching(`[0-9A-Za-z_:-]{1,12}`).Draw(d.t, path)
}
func (d drawn) String(path string) string { return genString(d.t, path) }
func (d drawn) Int(path string, bits int) int64 {
	return rapid.Int64Range(-1<<(bits-1), 1<<(bits-1)-1).Draw(d.t, path)
}
func (d drawn) Uint(path string, bits int) uint64 {
	return rapid.Uint64Range(0, math.MaxUint64>>(64-bits)).Draw(d.t, path)
}
func (d drawn) Float(path string, bits int) float64 {
	if bits == 32 {
		return float64(rapid.Float32Range(-1e30, 1e30).Draw(d.t, path))
	}
	return genFloat(d.t, path)
}
func (d drawn) Bool(path string) bool      { return rapid.Bool().Draw(d.t, path) }
func (d drawn) Time(path string) time.Time { return genTime(d.t, path) }
func (d drawn) Len(path string) int        { return rapid.IntRange(-1, 3).Draw(d.t, path+" len") }

// build returns a value of typ's Go type filled from src: every leaf, or
// only the one named.
func build(typ events.Type, src source, only string, fatalf func(string, ...any)) (events.Event, []string) {
	rt := reflect.TypeOf(events.Registered()[typ])
	f := &filler{src: src, only: only, key: keyField(typ), fatalf: fatalf}
	v := reflect.New(rt).Elem()
	f.fill(v, rt.Name())
	return v.Interface().(events.Event), f.leaves
}

var keyFields sync.Map // events.Type → string

// keyField is the path of the string field whose value Key() returns:
// the one of a value with distinct strings everywhere that equals it.
func keyField(typ events.Type) string {
	if p, ok := keyFields.Load(typ); ok {
		return p.(string)
	}
	rt := reflect.TypeOf(events.Registered()[typ])
	v := reflect.New(rt).Elem()
	(&filler{src: &distinct{}, fatalf: func(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }}).fill(v, rt.Name())
	key := v.Interface().(events.Event).Key()
	for i := range rt.NumField() {
		if fv := v.Field(i); fv.Kind() == reflect.String && fv.String() == key {
			p := rt.Name() + "." + rt.Field(i).Name
			keyFields.Store(typ, p)
			return p
		}
	}
	panic(fmt.Sprintf("%s: Key() is not one of its string fields", rt))
}

// genEventOf draws a value of typ with every field drawn.
func genEventOf(t *rapid.T, typ events.Type) events.Event {
	e, _ := build(typ, drawn{t}, "", t.Fatalf)
	return e
}

// genEvent draws an event of any known type with arbitrary field values.
func genEvent(t *rapid.T) events.Event {
	return genEventOf(t, rapid.SampledFrom(allTypes()).Draw(t, "type"))
}

// diffs lists where got differs from want, by path and JSON key.
func diffs(want, got reflect.Value, path, wire string) []string {
	if want.Type() != got.Type() {
		return []string{fmt.Sprintf("%s: a %s, want a %s", path, got.Type(), want.Type())}
	}
	differ := func() []string {
		return []string{fmt.Sprintf("%s (json %q): got %#v, want %#v", path, wire, got.Interface(), want.Interface())}
	}
	if want.Type() == timeType {
		if !want.Interface().(time.Time).Equal(got.Interface().(time.Time)) {
			return differ()
		}
		return nil
	}
	switch want.Kind() {
	case reflect.Struct:
		var out []string
		for i := range want.NumField() {
			if name, ok := wireName(want.Type().Field(i)); ok {
				w := wire
				if name != "" {
					w += "." + name
				}
				out = append(out, diffs(want.Field(i), got.Field(i), path+"."+want.Type().Field(i).Name, w)...)
			}
		}
		return out
	case reflect.Pointer:
		if want.IsNil() || got.IsNil() {
			if want.IsNil() != got.IsNil() {
				return differ()
			}
			return nil
		}
		return diffs(want.Elem(), got.Elem(), path, wire)
	case reflect.Slice, reflect.Array:
		if want.Kind() == reflect.Slice && want.IsNil() != got.IsNil() || want.Len() != got.Len() {
			return differ()
		}
		var out []string
		for i := range want.Len() {
			out = append(out, diffs(want.Index(i), got.Index(i), fmt.Sprintf("%s[%d]", path, i), fmt.Sprintf("%s[%d]", wire, i))...)
		}
		return out
	case reflect.Map:
		if want.IsNil() != got.IsNil() || want.Len() != got.Len() {
			return differ()
		}
		var out []string
		for _, k := range want.MapKeys() {
			g := got.MapIndex(k)
			if !g.IsValid() {
				return differ()
			}
			out = append(out, diffs(want.MapIndex(k), g, fmt.Sprintf("%s[%q]", path, k), fmt.Sprintf("%s[%q]", wire, k))...)
		}
		return out
	}
	if !reflect.DeepEqual(want.Interface(), got.Interface()) {
		return differ()
	}
	return nil
}

// diff is diffs of two events as one message, "" if they are equal.
func diff(want, got events.Event) string {
	if want == nil || got == nil || reflect.TypeOf(want) != reflect.TypeOf(got) {
		return fmt.Sprintf("got %#v, want %#v", got, want)
	}
	rt := reflect.TypeOf(want)
	return strings.Join(diffs(reflect.ValueOf(want), reflect.ValueOf(got), rt.Name(), "data"), "\n")
}

// TestEveryFieldDecodes: for every field of every registered event type,
// nested ones included, a value with a distinct non-zero value there
// (alone, and with every other field set too) goes through Encode and
// comes back whole from encoding/json, and from the fast decoder by itself
// exactly as from encoding/json. A field added to an event that the fast
// decoder does not read fails here, by name: as a field it drops if it
// silently skips the key, as one it gives up on if it falls back.
func TestEveryFieldDecodes(t *testing.T) {
	for _, typ := range allTypes() {
		_, leaves := build(typ, &distinct{}, "", t.Fatalf)
		cases := map[string]string{"every field": ""}
		for _, l := range leaves {
			cases[l] = l
		}
		for name, only := range cases {
			t.Run(string(typ)+"/"+name, func(t *testing.T) {
				e, _ := build(typ, &distinct{}, only, t.Fatalf)
				subj, data, _, err := events.Encode(e, events.Meta{Time: v1Time, CausationID: v1Causation})
				if err != nil {
					t.Fatalf("Encode(%#v): %v", e, err)
				}
				m := events.Stored{Seq: 7, Subject: subj, Data: data}
				slow, err := events.DecodeSlow(m)
				if err != nil {
					t.Fatalf("encoding/json: %v, on %s", err, data)
				}
				if d := diff(e, slow.Event); d != "" {
					t.Fatalf("encoding/json does not round-trip %s (check the field's tag):\n%s", data, d)
				}
				fast, ok := events.DecodeFast(m)
				// 1. Never a value encoding/json does not return: a field
				// the fast decoder does not read must make it give up, not
				// decode as its zero value.
				if ok {
					if d := diff(slow.Event, fast.Event); d != "" {
						t.Fatalf("the fast decoder dropped or changed fields encoding/json decodes: teach fastdecode.go's decoder of %T\n%s\nencoding: %s", e, d, data)
					}
					if d := cmp.Diff(slow, fast); d != "" {
						t.Fatalf("the fast decoder and encoding/json disagree on %s (-encoding/json +fast):\n%s", data, d)
					}
				}
				// 2. Nor does it give up on what Encode writes, which would
				// slow every fold down to encoding/json.
				if !ok {
					t.Fatalf("the fast decoder gave up on what Encode wrote (%s): teach fastdecode.go's decoder of %T\nencoding: %s", name, e, data)
				}
			})
		}
	}
}

// TestEveryEnvelopeFieldDecodes: every field of the envelope, with a
// distinct non-zero value (the type, version and payload those of a
// completed event), comes back from the fast decoder as encoding/json
// reads it.
func TestEveryEnvelopeFieldDecodes(t *testing.T) {
	var env events.Envelope
	(&filler{src: &distinct{}, fatalf: t.Fatalf}).fill(reflect.ValueOf(&env).Elem(), "Envelope")
	env.Type, env.Version = events.TypeCompleted, events.SchemaVersion
	env.Data = json.RawMessage(`{"task_id":"t1","node":"n1"}`)
	data, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	m := events.Stored{Seq: 7, Subject: "gpuq.task.t1.completed", Data: data}
	fast, ok := events.DecodeFast(m)
	if !ok {
		t.Fatalf("the fast decoder gave up on %s: teach (*decoder).decode in fastdecode.go every envelope field", data)
	}
	if d := diffs(reflect.ValueOf(env), reflect.ValueOf(fast.Envelope), "Envelope", ""); len(d) > 0 {
		t.Errorf("the fast decoder lost envelope fields of %s:\n%s", data, strings.Join(d, "\n"))
	}
	slow, err := events.DecodeSlow(m)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(slow, fast); d != "" {
		t.Errorf("the fast decoder and encoding/json disagree on %s (-encoding/json +fast):\n%s", data, d)
	}
}

// TestFastDecodeEveryTypeProperty: for each event type, on random values
// of every field, the fast decoder by itself decodes what Encode writes,
// exactly as encoding/json does.
func TestFastDecodeEveryTypeProperty(t *testing.T) {
	for _, typ := range allTypes() {
		t.Run(string(typ), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				e := genEventOf(t, typ)
				subj, data, _, err := events.Encode(e, events.Meta{Time: genTime(t, "time"), CausationID: genString(t, "causation")})
				if err != nil {
					t.Fatalf("Encode(%#v): %v", e, err)
				}
				fastEqualsSlow(t, events.Stored{Seq: rapid.Uint64().Draw(t, "seq"), Subject: subj, Data: data})
			})
		})
	}
}

// TestEveryEventTypeRegistered: every type of this package with an
// EventType method, other than Unknown and Invalid (what Decode and
// DecodeRecord make of records they cannot fold, never on the wire), is
// one Decode knows, so the tests above cover every event struct there is.
func TestEveryEventTypeRegistered(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Name.Name != "EventType" {
				continue
			}
			recv := fn.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			if name := recv.(*ast.Ident).Name; name != "Unknown" && name != "Invalid" {
				declared = append(declared, name)
			}
		}
	}
	var registered []string
	for typ, e := range events.Registered() {
		registered = append(registered, reflect.TypeOf(e).Name())
		if e.EventType() != typ {
			t.Errorf("%T is registered as %q but says it is %q", e, typ, e.EventType())
		}
	}
	sort.Strings(declared)
	sort.Strings(registered)
	if d := cmp.Diff(declared, registered); d != "" {
		t.Errorf("event types declared (-) and in taskTypes/nodeTypes (+):\n%s", d)
	}
	if got, want := len(events.Registered()), len(allTypes()); got != want {
		t.Errorf("%d types registered, %d in TaskTypes and NodeTypes", got, want)
	}
}

type (
	wireInner struct {
		Deep string `json:"deep"`
	}
	wireOuter struct {
		Tagged    string `json:"tagged,omitempty"`
		Untagged  int
		OptsOnly  bool     `json:",omitempty"`
		Skipped   string   `json:"-"`
		Dash      string   `json:"-,"`
		hidden    string   //nolint:unused // unexported: not on the wire
		Nested    []GPUish `json:"nested"`
		wireInner          // embedded: its fields are promoted
		*Ptr
	}
	GPUish struct{ UUID string }
	Ptr    struct {
		ViaPointer int `json:"via_pointer"`
	}
)

// TestWireNamesOfStructs: the fast decoder's names of a struct's keys are
// encoding/json's.
func TestWireNamesOfStructs(t *testing.T) {
	cases := map[string]struct {
		v    any
		want []string
	}{
		"tags, Go names, skips, embedded": {wireOuter{}, []string{"tagged", "Untagged", "OptsOnly", "-", "nested", "deep", "via_pointer"}},
		"an event":                        {events.Completed{}, []string{"task_id", "node"}},
		"nested":                          {events.Dispatched{}, []string{"task_id", "placements", "based_on_seq", "resume_from", "reason", "backfill", "epoch"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, events.WireNames(tc.v)); d != "" {
				t.Errorf("WireNames (-want +got):\n%s", d)
			}
			// Every name is a key encoding/json writes for a value with
			// every field set.
			v := reflect.New(reflect.TypeOf(tc.v)).Elem()
			(&filler{src: &distinct{}, fatalf: t.Fatalf}).fill(v, "v")
			b, err := json.Marshal(v.Interface())
			if err != nil {
				t.Fatal(err)
			}
			var keys map[string]json.RawMessage
			if err := json.Unmarshal(b, &keys); err != nil {
				t.Fatal(err)
			}
			for _, n := range events.WireNames(tc.v) {
				if _, ok := keys[n]; !ok {
					t.Errorf("%q is not a key of %s", n, b)
				}
			}
		})
	}
}
