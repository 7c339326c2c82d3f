// Package jsonguard checks JSON that a caller sent before anything decodes
// it: one pass over the bytes, with work and memory linear in their
// length, that refuses what encoding/json would accept and quietly
// repair or let a later key win.
//
// Check refuses, with the path of the value at fault:
//
//   - arrays and objects nested deeper than MaxDepth (the path is the
//     document's: "");
//   - a key given twice in one object (encoding/json keeps the last);
//   - invalid UTF-8 and lone surrogate escapes ("\ud800") in strings
//     (encoding/json turns both into U+FFFD);
//   - numbers too large for a float64 ("1e309": encoding/json's error
//     names no value);
//   - anything that is not one JSON value, optionally surrounded by white
//     space.
//
// The checker keeps an explicit stack of at most MaxDepth open arrays and
// objects, and the keys of the open objects; it builds a path only when it
// reports an error. It is used by every decoder of caller input: the
// submitter's HTTP and NATS request API, the agent's and the advisor's
// request API, the teams file and `gpuq audit import` archives. Strict is
// the strict decoding after it (no unknown field, one value), its errors
// classified once for every request API to word.
package jsonguard

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds how deep arrays and objects may nest: the 65th level is
// refused.
const MaxDepth = 64

// smallObject is how many keys of one object are compared one by one
// before a set of them is built.
const smallObject = 16

// seed hashes keys; it is random per process, so no document can be made
// of keys that collide.
var seed = maphash.MakeSeed()

// Error is what Check refuses: the value's path as the caller wrote it
// ("hours", "env.PATH", "items[2]"; "" for the document as a whole), the
// byte offset and the rule.
type Error struct {
	Path   string
	Offset int
	Rule   string
	Syntax bool // the document is not JSON
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Rule
	}
	return e.Path + ": " + e.Rule
}

// Doc is what Check learned of a document it accepted. It refers to the
// document's bytes, which must not change while it is used.
type Doc struct {
	data   []byte
	unq    []byte   // decoded escaped keys
	top    []keyRef // the keys of the top-level object, in order
	object bool
}

// Has reports whether the top-level value is an object with key.
func (d *Doc) Has(key string) bool {
	for _, k := range d.top {
		if string(k.bytes(d.data, d.unq)) == key {
			return true
		}
	}
	return false
}

// keyRef is a key: its bytes in the document, or, for a key with escapes,
// its decoded bytes in checker.unq.
type keyRef struct {
	off, n  uint32
	decoded bool
}

func (k keyRef) bytes(data, unq []byte) []byte {
	if k.decoded {
		return unq[k.off : k.off+k.n]
	}
	return data[k.off : k.off+k.n]
}

type frame struct {
	obj   bool
	first int // obj: index in checker.keys of this object's first key
	index int // array: the current element's index
	unq   int // len(checker.unq) when the object opened
	set   *keySet
}

type checker struct {
	lax      bool // syntax and depth only
	maxDepth int
	data     []byte
	pos      int
	stack    []frame
	keys     []keyRef // the keys of the open objects, level after level
	unq      []byte
	doc      Doc
}

// Check checks that data is one JSON value that breaks none of the rules
// above. Its errors are *Error.
func Check(data []byte) (*Doc, error) {
	if len(data) > math.MaxInt32 {
		return nil, &Error{Rule: fmt.Sprintf("must be at most %d bytes", math.MaxInt32)}
	}
	c := &checker{data: data, stack: make([]frame, 0, 8), maxDepth: MaxDepth}
	if err := c.run(); err != nil {
		return nil, err
	}
	c.doc.data, c.doc.unq = data, c.unq
	return &c.doc, nil
}

// CheckDepth checks only that data is one JSON value nested at most
// maxDepth levels deep, in one pass that allocates nothing but its error:
// for JSON that is kept as it is (a log record in an archive) rather than
// decoded. Its errors are *Error.
func CheckDepth(data []byte, maxDepth int) error {
	c := &checker{data: data, lax: true, maxDepth: maxDepth}
	return c.run()
}

func (c *checker) keyBytes(k keyRef) []byte { return k.bytes(c.data, c.unq) }

// keySet is a set of an object's keys (indices in checker.keys) by their
// hash, with open addressing: the memory of a big object is a few bytes a
// key, and no key is copied.
type keySet struct {
	slots []int32 // index+1 in checker.keys; 0 is empty
	n     int
}

func (c *checker) hash(k keyRef) uint64 { return maphash.Bytes(seed, c.keyBytes(k)) }

// find returns the index in c.keys of a key equal to k, or -1.
func (c *checker) find(s *keySet, k keyRef) int {
	b := c.keyBytes(k)
	mask := uint64(len(s.slots) - 1)
	for i := c.hash(k) & mask; ; i = (i + 1) & mask {
		j := s.slots[i]
		if j == 0 {
			return -1
		}
		if bytes.Equal(c.keyBytes(c.keys[j-1]), b) {
			return int(j - 1)
		}
	}
}

func (c *checker) insert(s *keySet, idx int) {
	if 2*(s.n+1) > len(s.slots) {
		old := s.slots
		s.slots = make([]int32, max(64, 2*len(old)))
		s.n = 0
		for _, j := range old {
			if j != 0 {
				c.insert(s, int(j-1))
			}
		}
	}
	mask := uint64(len(s.slots) - 1)
	i := c.hash(c.keys[idx]) & mask
	for s.slots[i] != 0 {
		i = (i + 1) & mask
	}
	s.slots[i] = int32(idx + 1)
	s.n++
}

func (c *checker) run() error {
	for {
		// A value.
		c.space()
		if c.pos >= len(c.data) {
			return c.syntax("unexpected end of input, looking for a value")
		}
		switch b := c.data[c.pos]; {
		case b == '{' || b == '[':
			if len(c.stack) == c.maxDepth {
				return &Error{Offset: c.pos, Rule: fmt.Sprintf("must not nest arrays and objects deeper than %d levels (level %d opens at byte %d)", c.maxDepth, c.maxDepth+1, c.pos)}
			}
			c.pos++
			if len(c.stack) == 0 && b == '{' {
				c.doc.object = true
			}
			c.stack = append(c.stack, frame{obj: b == '{', first: len(c.keys), unq: len(c.unq)})
			c.space()
			if c.pos < len(c.data) && c.data[c.pos] == b+2 { // '}' is '{'+2, ']' is '['+2
				c.pos++
				c.pop()
				break
			}
			if b == '{' {
				if err := c.key(); err != nil {
					return err
				}
			}
			continue
		case b == '"':
			if _, err := c.str(false); err != nil {
				return err
			}
		case b == '-' || b >= '0' && b <= '9':
			if err := c.number(); err != nil {
				return err
			}
		case b == 't':
			if err := c.literal("true"); err != nil {
				return err
			}
		case b == 'f':
			if err := c.literal("false"); err != nil {
				return err
			}
		case b == 'n':
			if err := c.literal("null"); err != nil {
				return err
			}
		default:
			return c.syntax(fmt.Sprintf("invalid character %s looking for the beginning of a value", quoteByte(b)))
		}
		// After a value: the next one, or the end of arrays and objects.
		for {
			c.space()
			if len(c.stack) == 0 {
				if c.pos < len(c.data) {
					return c.syntax("unexpected data after the value")
				}
				return nil
			}
			if c.pos >= len(c.data) {
				return c.syntax("unexpected end of input")
			}
			f := &c.stack[len(c.stack)-1]
			b := c.data[c.pos]
			if b == ',' {
				c.pos++
				if f.obj {
					if err := c.key(); err != nil {
						return err
					}
				} else {
					f.index++
				}
				break
			}
			if f.obj && b == '}' || !f.obj && b == ']' {
				c.pos++
				c.pop()
				continue
			}
			want := "',' or ']'"
			if f.obj {
				want = "',' or '}'"
			}
			return c.syntax(fmt.Sprintf("invalid character %s after a value, want %s", quoteByte(b), want))
		}
	}
}

func (c *checker) pop() {
	f := c.stack[len(c.stack)-1]
	if f.obj && len(c.stack) == 1 {
		c.doc.top = c.keys[f.first:]
	}
	if f.obj {
		c.keys = c.keys[:f.first]
		if len(c.stack) > 1 {
			c.unq = c.unq[:f.unq]
		}
	}
	c.stack = c.stack[:len(c.stack)-1]
}

// key reads an object's key and the colon after it, and refuses a key the
// object has already.
func (c *checker) key() error {
	c.space()
	if c.pos >= len(c.data) || c.data[c.pos] != '"' {
		if c.pos >= len(c.data) {
			return c.syntax("unexpected end of input, looking for a key")
		}
		return c.syntax(fmt.Sprintf("invalid character %s looking for the beginning of a key", quoteByte(c.data[c.pos])))
	}
	off := c.pos
	k, err := c.str(!c.lax)
	if err != nil {
		return err
	}
	if c.lax {
		return c.colon()
	}
	f := &c.stack[len(c.stack)-1]
	dup := false
	if f.set != nil {
		dup = c.find(f.set, k) >= 0
	} else {
		kb := c.keyBytes(k)
		for _, o := range c.keys[f.first:] {
			if bytes.Equal(c.keyBytes(o), kb) {
				dup = true
				break
			}
		}
	}
	c.keys = append(c.keys, k) // a duplicate too: the path names it
	if dup {
		return &Error{Path: c.path(), Offset: off, Rule: "is given twice; give each key once"}
	}
	if f.set != nil {
		c.insert(f.set, len(c.keys)-1)
	} else if len(c.keys)-f.first > smallObject {
		f.set = &keySet{}
		for i := f.first; i < len(c.keys); i++ {
			c.insert(f.set, i)
		}
	}
	return c.colon()
}

func (c *checker) colon() error {
	c.space()
	if c.pos >= len(c.data) || c.data[c.pos] != ':' {
		return c.syntax("want ':' after an object key")
	}
	c.pos++
	return nil
}

// str reads a string at c.pos. When key is set it returns the string's
// value (as encoding/json decodes it).
func (c *checker) str(key bool) (keyRef, error) {
	start := c.pos
	c.pos++
	escaped := false
	d := c.data
	for c.pos < len(d) {
		b := d[c.pos]
		switch {
		case b == '"':
			c.pos++
			if !key {
				return keyRef{}, nil
			}
			if !escaped {
				return keyRef{off: uint32(start + 1), n: uint32(c.pos - 1 - start - 1)}, nil
			}
			off := len(c.unq)
			c.unq = unquote(c.unq, d[start+1:c.pos-1])
			return keyRef{off: uint32(off), n: uint32(len(c.unq) - off), decoded: true}, nil
		case b < 0x20:
			return keyRef{}, c.syntax(fmt.Sprintf("control character %s in a string (escape it)", quoteByte(b)))
		case b == '\\':
			escaped = true
			if err := c.escape(key); err != nil {
				return keyRef{}, err
			}
		case b < utf8.RuneSelf:
			c.pos++
		case c.lax:
			c.pos++
		default:
			r, n := utf8.DecodeRune(d[c.pos:])
			if r == utf8.RuneError && n == 1 {
				return keyRef{}, c.text(key, fmt.Sprintf("must be valid UTF-8 (invalid byte 0x%02x at byte %d)", b, c.pos))
			}
			c.pos += n
		}
	}
	return keyRef{}, c.syntax("unexpected end of input in a string")
}

// escape reads one escape sequence at c.pos.
func (c *checker) escape(key bool) error {
	d := c.data
	if c.pos+1 >= len(d) {
		return c.syntax("unexpected end of input in a string")
	}
	switch d[c.pos+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		c.pos += 2
		return nil
	case 'u':
	default:
		return c.syntax(fmt.Sprintf("invalid escape '\\%c' in a string", d[c.pos+1]))
	}
	at := c.pos
	r, ok := hex4(d, c.pos+2)
	if !ok {
		return c.syntax("invalid \\u escape in a string: want four hex digits")
	}
	c.pos += 6
	if c.lax {
		return nil
	}
	switch {
	case r >= 0xDC00 && r <= 0xDFFF:
		return c.text(key, fmt.Sprintf("must not contain a lone surrogate escape (\\u%04x at byte %d)", r, at))
	case r >= 0xD800 && r <= 0xDBFF:
		if c.pos+1 < len(d) && d[c.pos] == '\\' && d[c.pos+1] == 'u' {
			if lo, ok := hex4(d, c.pos+2); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				c.pos += 6
				return nil
			}
		}
		return c.text(key, fmt.Sprintf("must not contain a lone surrogate escape (\\u%04x at byte %d)", r, at))
	}
	return nil
}

func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, b := range d[i : i+4] {
		switch {
		case b >= '0' && b <= '9':
			b -= '0'
		case b >= 'a' && b <= 'f':
			b = b - 'a' + 10
		case b >= 'A' && b <= 'F':
			b = b - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(b)
	}
	return r, true
}

// unquote appends the decoded inside of a string that str checked to b.
func unquote(b, s []byte) []byte {
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			b = append(b, s[i])
			i++
			continue
		}
		switch s[i+1] {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, _ := hex4(s, i+2)
			i += 6
			if utf16.IsSurrogate(r) {
				lo, _ := hex4(s, i+2)
				r = utf16.DecodeRune(r, lo)
				i += 6
			}
			b = utf8.AppendRune(b, r)
			continue
		default: // '"', '\\', '/'
			b = append(b, s[i+1])
		}
		i += 2
	}
	return b
}

// number reads a number at c.pos and refuses one a float64 cannot hold.
func (c *checker) number() error {
	d := c.data
	start := c.pos
	digits := func() int {
		n := 0
		for c.pos < len(d) && d[c.pos] >= '0' && d[c.pos] <= '9' {
			c.pos++
			n++
		}
		return n
	}
	if d[c.pos] == '-' {
		c.pos++
	}
	if c.pos < len(d) && d[c.pos] == '0' {
		c.pos++
	} else if digits() == 0 {
		return c.syntax("invalid number: want a digit")
	}
	if c.pos < len(d) && d[c.pos] == '.' {
		c.pos++
		if digits() == 0 {
			return c.syntax("invalid number: want a digit after '.'")
		}
	}
	exp := false
	if c.pos < len(d) && (d[c.pos] == 'e' || d[c.pos] == 'E') {
		exp = true
		c.pos++
		if c.pos < len(d) && (d[c.pos] == '+' || d[c.pos] == '-') {
			c.pos++
		}
		if digits() == 0 {
			return c.syntax("invalid number: want a digit in the exponent")
		}
	}
	// Only an exponent or more than 308 digits can overflow.
	if !c.lax && (exp || c.pos-start > 308) {
		if _, err := strconv.ParseFloat(string(d[start:c.pos]), 64); err != nil {
			got := string(d[start:c.pos])
			if len(got) > 32 {
				got = got[:29] + "..."
			}
			return &Error{Path: c.path(), Offset: start, Rule: fmt.Sprintf("must be a finite number (got %s)", got)}
		}
	}
	return nil
}

func (c *checker) literal(lit string) error {
	if len(c.data)-c.pos < len(lit) || string(c.data[c.pos:c.pos+len(lit)]) != lit {
		return c.syntax(fmt.Sprintf("invalid literal, want %s", lit))
	}
	c.pos += len(lit)
	return nil
}

func (c *checker) space() {
	for c.pos < len(c.data) {
		switch c.data[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *checker) syntax(why string) error {
	return &Error{Offset: c.pos, Rule: fmt.Sprintf("invalid JSON at byte %d: %s", c.pos, why), Syntax: true}
}

// text refuses the content of a string: a value names its own path, a key
// its object's.
func (c *checker) text(key bool, rule string) error {
	p := c.path()
	if key {
		p = c.parentPath()
	}
	return &Error{Path: p, Offset: c.pos, Rule: rule}
}

// path is the current value's path: "env.PATH", "items[2]".
func (c *checker) path() string {
	var b strings.Builder
	for i := range c.stack {
		c.element(&b, i)
	}
	return b.String()
}

// parentPath is the path of the object whose key is being read.
func (c *checker) parentPath() string {
	var b strings.Builder
	for i := range len(c.stack) - 1 {
		c.element(&b, i)
	}
	return b.String()
}

func (c *checker) element(b *strings.Builder, i int) {
	f := c.stack[i]
	if !f.obj {
		fmt.Fprintf(b, "[%d]", f.index)
		return
	}
	var next int
	if i+1 < len(c.stack) {
		next = c.stack[i+1].first
	} else {
		next = len(c.keys)
	}
	if next <= f.first {
		return // no key read yet
	}
	if b.Len() > 0 {
		b.WriteByte('.')
	}
	b.Write(c.keyBytes(c.keys[next-1]))
}

func quoteByte(b byte) string {
	if b >= utf8.RuneSelf {
		return fmt.Sprintf("0x%02x", b)
	}
	return strconv.QuoteRune(rune(b))
}
