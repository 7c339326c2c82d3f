package events

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestCatalogueDocumented: docs/events.md has a section (### `type`) for
// every registered event type, and names there every top-level field of
// its payload as the wire spells it; no section names a type that does
// not exist. A field added to types.go without its line in the catalogue
// fails here by name.
func TestCatalogueDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{} // type -> its section's text
	var cur string
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "### `") && strings.HasSuffix(l, "`"):
			cur = strings.TrimSuffix(strings.TrimPrefix(l, "### `"), "`")
			sections[cur] = ""
		case strings.HasPrefix(l, "#"):
			cur = ""
		case cur != "":
			sections[cur] += l + "\n"
		}
	}
	registered := map[string]bool{}
	check := func(types map[Type]func() Event) {
		for typ, mk := range types {
			registered[string(typ)] = true
			sec, ok := sections[string(typ)]
			if !ok {
				t.Errorf("docs/events.md: no section ### `%s`", typ)
				continue
			}
			rt := reflect.TypeOf(mk()).Elem()
			for i := 0; i < rt.NumField(); i++ {
				name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
				if name == "" || name == "-" {
					continue
				}
				if !strings.Contains(sec, "`"+name+"`") {
					t.Errorf("docs/events.md, ### `%s`: field `%s` (%s.%s) not described", typ, name, rt.Name(), rt.Field(i).Name)
				}
			}
		}
	}
	check(taskTypes)
	check(nodeTypes)
	for name := range sections {
		if !registered[name] {
			t.Errorf("docs/events.md: section ### `%s` names no registered event type", name)
		}
	}
}
