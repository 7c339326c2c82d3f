// Package fastgen writes the mechanical part of the events package's fast
// decoder (fastdecode_gen.go) from the event types of types.go: one
// scanner per event type, one per struct that an event holds a slice of,
// the key set of each (wireNames), the dispatch from a Type to its scanner
// (payload) and the wire names of the Types (wireType). The scanner
// primitives they call (members, str, text, int, time, …) stay
// hand-written in fastdecode.go.
//
// What the generator reads from types.go:
//
//   - the constants of type Type, for wireType;
//   - the EventType methods that return one of them: their receivers are
//     the event types, in that order;
//   - each event's struct fields, in order: the json tag names the key
//     (`json:"-"` and unexported fields are skipped), the Go type picks
//     the primitive; the bit of a field (for "a key twice") is its index;
//   - a `fastdecode:"text"` tag on a string field: the string is unique to
//     its event (an id, a free text), so it is copied, not interned — with
//     the event's other such strings into one allocation (texts) when
//     there are several. Every other string is interned per decoder;
//   - a `//fastdecode:manual` line in an event type's doc comment: its
//     scanner is hand-written in fastdecode.go (the generator writes only
//     its dispatch) — for a decoder tuned beyond the pattern.
//
// A field of a Go type the generator has no primitive for stops it with
// an error naming the field.
package fastgen

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"reflect"
	"strconv"
	"strings"
	"unicode"
)

// Directives, in types.go.
const (
	manualDirective = "//fastdecode:manual"
	tagKey          = "fastdecode"
	tagText         = "text"
)

// maxFields: members keeps the fields seen in a uint32.
const maxFields = 32

// Generate returns the source of fastdecode_gen.go for the types.go whose
// name and contents are given.
func Generate(filename string, src []byte) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	g := &gen{fset: fset, structs: map[string]*ast.StructType{}, manual: map[string]bool{}}
	g.collect(f)
	if len(g.events) == 0 {
		return nil, fmt.Errorf("%s: no EventType methods returning a Type constant", filename)
	}
	if err := g.file(); err != nil {
		return nil, err
	}
	out, err := format.Source(g.buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("formatting the generated code: %w\n%s", err, g.buf.Bytes())
	}
	return out, nil
}

type constant struct{ name, value string }

type event struct{ typ, constant string }

type gen struct {
	fset    *token.FileSet
	consts  []constant                 // the Type constants, in order
	events  []event                    // the event types, in EventType order
	structs map[string]*ast.StructType // every struct type of the file
	manual  map[string]bool            // types marked //fastdecode:manual
	elems   []string                   // structs held in slices, in order of first use
	buf     bytes.Buffer
	texts   int // the most text fields of one event
}

func (g *gen) collect(f *ast.File) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				switch sp := sp.(type) {
				case *ast.TypeSpec:
					st, ok := sp.Type.(*ast.StructType)
					if !ok {
						continue
					}
					g.structs[sp.Name.Name] = st
					if hasManual(sp.Doc) || len(d.Specs) == 1 && hasManual(d.Doc) {
						g.manual[sp.Name.Name] = true
					}
				case *ast.ValueSpec:
					id, ok := sp.Type.(*ast.Ident)
					if d.Tok != token.CONST || !ok || id.Name != "Type" {
						continue
					}
					for i, n := range sp.Names {
						lit, ok := sp.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						v, err := strconv.Unquote(lit.Value)
						if err == nil {
							g.consts = append(g.consts, constant{n.Name, v})
						}
					}
				}
			}
		case *ast.FuncDecl:
			if d.Recv == nil || d.Name.Name != "EventType" || d.Body == nil || len(d.Body.List) != 1 {
				continue
			}
			ret, ok := d.Body.List[0].(*ast.ReturnStmt)
			if !ok || len(ret.Results) != 1 {
				continue
			}
			c, ok := ret.Results[0].(*ast.Ident)
			recv, rok := d.Recv.List[0].Type.(*ast.Ident)
			if ok && rok {
				g.events = append(g.events, event{recv.Name, c.Name})
			}
		}
	}
}

func hasManual(cg *ast.CommentGroup) bool {
	if cg == nil {
		return false
	}
	for _, c := range cg.List {
		if strings.TrimSpace(c.Text) == manualDirective {
			return true
		}
	}
	return false
}

func (g *gen) p(format string, args ...any) { fmt.Fprintf(&g.buf, format+"\n", args...) }

func (g *gen) file() error {
	g.wireType()
	g.payload()
	for _, e := range g.events {
		if g.manual[e.typ] {
			continue
		}
		if err := g.eventScanner(e.typ); err != nil {
			return err
		}
	}
	for i := 0; i < len(g.elems); i++ { // an element may add elements
		if err := g.sliceScanner(g.elems[i]); err != nil {
			return err
		}
	}
	g.p("// textSlots is the most strings an event copies into one allocation")
	g.p("// (see texts).")
	g.p("const textSlots = %d", max(g.texts, 1))
	body := g.buf.String()
	g.buf.Reset()
	g.p("// Code generated by go generate (internal/fastgen) from types.go. DO NOT EDIT.")
	g.p("")
	g.p("package events")
	g.p("")
	if strings.Contains(body, "time.") {
		g.p("import %q", "time")
		g.p("")
	}
	g.buf.WriteString(body)
	return nil
}

func (g *gen) wireType() {
	g.p("// wireType returns the constant for a known wire name without allocating.")
	g.p("func wireType(b []byte) Type {")
	g.p("switch string(b) {")
	for _, c := range g.consts {
		g.p("case %q:", c.value)
		g.p("return %s", c.name)
	}
	g.p("}")
	g.p("return Type(b)")
	g.p("}")
	g.p("")
}

func (g *gen) payload() {
	g.p("// payload decodes the data of a known type.")
	g.p("func (s *scan) payload(t Type) (Event, bool) {")
	g.p("switch t {")
	for _, e := range g.events {
		g.p("case %s:", e.constant)
		g.p("return s.%s()", lowerName(e.typ))
	}
	g.p("}")
	g.p("return nil, false")
	g.p("}")
	g.p("")
}

// field is one decoded field of a struct.
type field struct {
	goName, key string
	typ         ast.Expr
	text        bool
}

func (g *gen) fields(typ string) ([]field, error) {
	st, ok := g.structs[typ]
	if !ok {
		return nil, fmt.Errorf("type %s: not a struct of types.go", typ)
	}
	var out []field
	for _, f := range st.Fields.List {
		var tag reflect.StructTag
		if f.Tag != nil {
			s, err := strconv.Unquote(f.Tag.Value)
			if err != nil {
				return nil, err
			}
			tag = reflect.StructTag(s)
		}
		if len(f.Names) == 0 {
			return nil, fmt.Errorf("%s: embedded field %s: the generator does not decode embedded structs; mark %s %s", typ, exprString(f.Type), typ, manualDirective)
		}
		jsonTag, hasJSON := tag.Lookup("json")
		name, _, _ := strings.Cut(jsonTag, ",")
		fd, hasFD := tag.Lookup(tagKey)
		if hasFD && fd != tagText {
			return nil, fmt.Errorf("%s: tag %s:%q: the only value is %q", typ, tagKey, fd, tagText)
		}
		for _, n := range f.Names {
			if !n.IsExported() || hasJSON && jsonTag == "-" {
				continue
			}
			key := name
			if key == "" {
				key = n.Name
			}
			out = append(out, field{goName: n.Name, key: key, typ: f.Type, text: hasFD})
		}
	}
	if len(out) > maxFields {
		return nil, fmt.Errorf("%s: %d fields, members tracks at most %d", typ, len(out), maxFields)
	}
	return out, nil
}

func (g *gen) eventScanner(typ string) error {
	fs, err := g.fields(typ)
	if err != nil {
		return err
	}
	var texts []string
	for _, f := range fs {
		if f.text {
			if id, ok := f.typ.(*ast.Ident); !ok || id.Name != "string" {
				return fmt.Errorf("%s.%s: %s:%q is for strings", typ, f.goName, tagKey, tagText)
			}
			texts = append(texts, f.goName)
		}
	}
	batch := len(texts) > 1
	g.texts = max(g.texts, len(texts))
	keys := lowerName(typ) + "Keys"
	g.p("var %s = wireNames[%s]()", keys, typ)
	g.p("")
	g.p("func (s *scan) %s() (Event, bool) {", lowerName(typ))
	if batch {
		g.p("var (")
		g.p("e %s", typ)
		g.p("t texts")
		g.p(")")
	} else {
		g.p("var e %s", typ)
	}
	g.p("ok := s.members(%s, func(k []byte) (bit uint32, ok bool) {", keys)
	if err := g.cases(typ, "e", fs, batch); err != nil {
		return err
	}
	g.p("})")
	if batch {
		var dst []string
		for _, n := range texts {
			dst = append(dst, "&e."+n)
		}
		g.p("if ok {")
		g.p("t.into(%s)", strings.Join(dst, ", "))
		g.p("}")
	}
	g.p("return e, ok")
	g.p("}")
	g.p("")
	return nil
}

// cases writes the switch over the keys of a members callback, reading
// into v's fields; batch: text fields go through texts.
func (g *gen) cases(typ, v string, fs []field, batch bool) error {
	g.p("switch string(k) {")
	slot := 0
	for bit, f := range fs {
		g.p("case %q:", f.key)
		dst := v + "." + f.goName
		ret := fmt.Sprintf("return 1 << %d, ok", bit)
		switch t := f.typ.(type) {
		case *ast.Ident:
			switch t.Name {
			case "string":
				switch {
				case f.text && batch:
					g.p("ok = s.text(&t, %d)", slot)
					slot++
				case f.text:
					g.p("%s, ok = s.str(false)", dst)
				default:
					g.p("%s, ok = s.str(true)", dst)
				}
			case "bool":
				g.p("%s, ok = s.bool()", dst)
			case "int":
				g.p("var v int64")
				g.p("v, ok = s.int()")
				g.p("%s = int(v)", dst)
			case "int64":
				g.p("%s, ok = s.int()", dst)
			case "uint64":
				g.p("%s, ok = s.uint()", dst)
			case "float64":
				g.p("%s, ok = s.float()", dst)
			default:
				return g.unsupported(typ, f)
			}
			g.p("%s", ret)
		case *ast.SelectorExpr:
			if exprString(t) != "time.Time" {
				return g.unsupported(typ, f)
			}
			g.p("return 1 << %d, s.time(&%s)", bit, dst)
		case *ast.StarExpr:
			if exprString(t.X) != "time.Time" {
				return g.unsupported(typ, f)
			}
			g.p("if s.null {")
			g.p("return 1 << %d, true", bit)
			g.p("}")
			g.p("var d time.Time")
			g.p("if ok = s.time(&d); ok {")
			g.p("%s = &d", dst)
			g.p("}")
			g.p("%s", ret)
		case *ast.MapType:
			if exprString(t) != "map[string]string" {
				return g.unsupported(typ, f)
			}
			g.p("%s, ok = s.env()", dst)
			g.p("%s", ret)
		case *ast.ArrayType:
			el, ok := t.Elt.(*ast.Ident)
			switch {
			case t.Len != nil || !ok:
				return g.unsupported(typ, f)
			case el.Name == "string":
				g.p("%s, ok = s.strings()", dst)
			case g.structs[el.Name] != nil:
				g.elem(el.Name)
				g.p("%s, ok = s.%ss()", dst, lowerName(el.Name))
			default:
				return g.unsupported(typ, f)
			}
			g.p("%s", ret)
		default:
			return g.unsupported(typ, f)
		}
	}
	g.p("}")
	g.p("return 0, true")
	return nil
}

func (g *gen) elem(name string) {
	for _, e := range g.elems {
		if e == name {
			return
		}
	}
	g.elems = append(g.elems, name)
}

func (g *gen) unsupported(typ string, f field) error {
	return fmt.Errorf("%s.%s: no fast-decoder primitive for %s; add one to fastdecode.go and the generator, or mark %s %s and write its scanner by hand",
		typ, f.goName, exprString(f.typ), typ, manualDirective)
}

// sliceScanner writes the reader of a []typ: null is nil, [] is empty and
// not nil, as for encoding/json.
func (g *gen) sliceScanner(typ string) error {
	fs, err := g.fields(typ)
	if err != nil {
		return err
	}
	keys := lowerName(typ) + "Keys"
	g.p("var %s = wireNames[%s]()", keys, typ)
	g.p("")
	g.p("func (s *scan) %ss() ([]%s, bool) {", lowerName(typ), typ)
	g.p("if s.null {")
	g.p("return nil, true")
	g.p("}")
	g.p("empty, ok := s.arrStart()")
	g.p("if !ok {")
	g.p("return nil, false")
	g.p("}")
	g.p("out := []%s{}", typ)
	g.p("if empty {")
	g.p("return out, true")
	g.p("}")
	g.p("for more := true; more; {")
	g.p("var el %s", typ)
	g.p("ok := s.members(%s, func(k []byte) (bit uint32, ok bool) {", keys)
	// An element's strings are copied one by one: texts batch one event.
	if err := g.cases(typ, "el", fs, false); err != nil {
		return err
	}
	g.p("})")
	g.p("if !ok {")
	g.p("return nil, false")
	g.p("}")
	g.p("out = append(out, el)")
	g.p("if more, ok = s.arrNext(); !ok {")
	g.p("return nil, false")
	g.p("}")
	g.p("}")
	g.p("return out, true")
	g.p("}")
	g.p("")
	return nil
}

// lowerName lowers a Go type name's first word: PreemptRequested →
// preemptRequested, GPU → gpu, GPUState → gpuState.
func lowerName(s string) string {
	r := []rune(s)
	n := 0
	for n < len(r) && unicode.IsUpper(r[n]) {
		n++
	}
	if n > 1 && n < len(r) {
		n-- // the last capital starts the next word
	}
	for i := range n {
		r[i] = unicode.ToLower(r[i])
	}
	return string(r)
}

func exprString(e ast.Expr) string {
	var b bytes.Buffer
	if err := format.Node(&b, token.NewFileSet(), e); err != nil {
		return fmt.Sprintf("%T", e)
	}
	return b.String()
}
