package events_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/events"
)

// TestWireGolden pins what the log's readers see on the wire: every type's
// subject pattern, its version and its payload's keys (nested ones as
// parent.key, an array's elements as key[], a map's values as key{}),
// and the envelope's keys, against testdata/wire.golden. A renamed wire
// name, subject, JSON key or a changed version fails here by line;
// an added field fails too, so that its line is added on purpose
// (go test ./pkg/events -run TestWireGolden -update-wire, then review the
// diff: only + lines for a new field, see docs/events.md).
func TestWireGolden(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "envelope %s\n", strings.Join(keys(reflect.TypeFor[events.Envelope](), ""), " "))
	for _, typ := range allTypes() {
		e := v1Events()[typ]
		subj := strings.Replace(events.Subject(e), "."+e.Key()+".", ".*.", 1)
		fmt.Fprintf(&b, "%s v%d %s %s\n", typ, events.VersionOf(typ), subj, strings.Join(keys(reflect.TypeOf(e), ""), " "))
	}
	fmt.Fprintf(&b, "task-subjects %s\nadvice %s\n", events.TaskSubjects("*"), events.AdviceSubject("*"))
	got := b.String()
	path := filepath.Join("testdata", "wire.golden")
	if *updateWire {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestWireGolden -update-wire writes it)", err)
	}
	if diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(got, "\n")); diff != "" {
		t.Errorf("wire names, subjects or keys changed (-golden +now):\n%s\nnever rename one (docs/events.md, \"Adding or changing a field\")", diff)
	}
}

// keys lists the JSON keys encoding/json writes for t, depth first, with
// their ",omitempty" marked by a trailing "?".
func keys(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, ok := wireName(f)
		if !ok {
			continue
		}
		if name == "" { // embedded
			out = append(out, keys(f.Type, prefix)...)
			continue
		}
		k := prefix + name
		if strings.Contains(f.Tag.Get("json"), ",omitempty") {
			k += "?"
		}
		out = append(out, k)
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		sub := prefix + name
		for {
			switch ft.Kind() {
			case reflect.Slice, reflect.Array:
				if ft.Elem().Kind() == reflect.Uint8 {
					break // []byte: a string on the wire
				}
				sub += "[]"
				ft = ft.Elem()
				continue
			case reflect.Map:
				sub += "{}"
				ft = ft.Elem()
				continue
			}
			break
		}
		if ft.Kind() == reflect.Struct && ft != timeType {
			out = append(out, keys(ft, sub+".")...)
		}
	}
	return out
}
