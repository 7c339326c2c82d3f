package events

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

//go:generate go run ./internal/fastgen/cmd

// The fast decoder: one pass over the envelope and its payload, with a
// decoder per event type and no reflection. The envelope and the scanner
// primitives below are written by hand; the decoder of each event type,
// the dispatch to it (payload) and wireType are generated from types.go
// into fastdecode_gen.go by internal/fastgen (`go generate ./pkg/events`;
// TestFastDecodeGenCurrent fails while the file is stale). A string field
// tagged `fastdecode:"text"` is copied rather than interned (see texts); a
// type whose doc comment has a //fastdecode:manual line gets no generated
// decoder, only its dispatch: its decoder is then written here.
//
// It is an optimisation of encoding/json, never a second definition of the
// wire format: it accepts only input it decodes exactly as encoding/json
// does, and gives up (ok = false) on everything else, after which Decode
// runs encoding/json (decodeSlow) on the same bytes. It gives up on any
// syntax error; null in the envelope, in an array or in a map (null for a
// payload field is its zero value, as for encoding/json on a fresh value);
// a known key twice; a key with an escape; a key it does not read that
// encoding/json would match to a field, exactly or case-insensitively (the
// names come from the struct tags, see wireNames); a number that
// is not an integer where the field is one, or out of range; a value of
// the wrong JSON type; a missing id, type, time or data; a version of a
// known type older than its current one (VersionOf: encoding/json and
// the upcasts decode it; a missing v is version 1); and a time that
// Time.UnmarshalJSON refuses. What it accepts covers everything Encode
// writes. TestDecodeEqualsJSON and the property tests in
// fastdecode_test.go hold it to that, and TestEveryFieldDecodes to every
// field of every event type, found by reflection: a field added to an
// event whose decoder was not generated again (or, for a manual one,
// extended) fails there by name, and such a record falls back to
// encoding/json rather than decoding the field as zero.
//
// Keys that name no field are skipped, as encoding/json skips them: a
// newer writer's extra fields are dropped by both paths alike, and cost
// the fast path nothing.
//
// Repeated short strings (teams, nodes, GPU UUIDs, models, reasons, the
// exported environment) are interned per decoder, so a fold keeps one
// copy of each and allocates less.

// maxNest bounds the nesting depth the fast decoder skips through; deeper
// input goes to encoding/json, which has its own limit.
const maxNest = 256

// Interning bounds: longer strings are not interned; the table is cleared
// when it holds maxInterned strings.
const (
	maxInternLen = 512
	maxInterned  = 8192
)

// decoder holds what is reused across messages: the intern table.
type decoder struct {
	intern map[string]string
}

func newDecoder() *decoder { return &decoder{intern: make(map[string]string, 256)} }

var decoders = sync.Pool{New: func() any { return newDecoder() }}

// str returns b as a string, interned when short.
func (d *decoder) str(b []byte) string {
	if s, ok := d.intern[string(b)]; ok {
		return s
	}
	if len(b) > maxInternLen {
		return string(b)
	}
	if len(d.intern) >= maxInterned {
		clear(d.intern)
	}
	s := string(b)
	d.intern[s] = s
	return s
}

// decode is Decode's fast path; ok is false when it gave up (see above).
func (d *decoder) decode(m Stored) (r Record, ok bool) {
	s := scan{b: m.Data, d: d}
	r.Seq, r.Subject = m.Seq, m.Subject
	env := &r.Envelope
	var (
		seen      uint8
		dataStart = -1
		dataEnd   int
		decoded   bool
	)
	const (
		fID = 1 << iota
		fType
		fV
		fTime
		fCause
		fData
		fOrigin
	)
	if !s.objStart() {
		return r, false
	}
	for more := !s.objEmpty(); more; {
		key, ok := s.key()
		if !ok {
			return r, false
		}
		var bit uint8
		switch string(key) {
		case "id":
			bit = fID
			env.ID, ok = s.str(false)
		case "type":
			bit = fType
			var t []byte
			if t, ok = s.plainString(); ok {
				env.Type = wireType(t)
			}
		case "v":
			bit = fV
			var v int64
			v, ok = s.int()
			env.Version = int(v)
		case "time":
			bit = fTime
			ok = s.time(&env.Time)
		case "causation_id":
			bit = fCause
			env.CausationID, ok = s.str(false)
		case "origin":
			bit = fOrigin
			o := &Origin{}
			ok = s.origin(o)
			env.Origin = o
		case "data":
			bit = fData
			s.ws()
			dataStart = s.i
			if seen&(fType|fV) == fType|fV && current(env.Type, env.Version) {
				r.Event, ok = s.payload(env.Type)
				decoded = true
			} else {
				ok = s.skip(0)
			}
			dataEnd = s.i
		default:
			ok = !foldsTo(key, envelopeKeys) && s.skip(0)
		}
		if !ok || seen&bit != 0 {
			return r, false
		}
		seen |= bit
		if more, ok = s.objNext(); !ok {
			return r, false
		}
	}
	if !s.end() || seen&(fID|fType|fTime|fData) != fID|fType|fTime|fData {
		return r, false
	}
	env.Version = storedVersion(env.Version) // no "v" (or 0): version 1
	env.Data = m.Data[dataStart:dataEnd:dataEnd]
	if !known(env.Type, env.Version) {
		r.Event = Unknown{Type: env.Type, Version: env.Version, K: subjectKey(m.Subject), Raw: env.Data}
		return r, true
	}
	if !current(env.Type, env.Version) {
		return r, false // an older version: encoding/json and its upcasts
	}
	if !decoded {
		p := scan{b: env.Data, d: d}
		if r.Event, ok = p.payload(env.Type); !ok || !p.end() {
			return r, false
		}
	}
	return r, true
}

var envelopeKeys = wireNames[Envelope]()

var originKeys = wireNames[Origin]()

// origin reads an import's Envelope.Origin.
func (s *scan) origin(o *Origin) bool {
	return s.members(originKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "seq":
			o.Seq, ok = s.uint()
			return 1 << 0, ok
		case "time":
			return 1 << 1, s.time(&o.Time)
		}
		return 0, true
	})
}

// wireNames lists the keys encoding/json decodes into a T, from its struct
// tags: each field's tag name, or its Go name where the tag has none; the
// fields of embedded structs included, `json:"-"` and unexported fields
// not. They are the names for the unknown-key check of members and
// decode: a key that names a field of T but that T's decoder does not
// read makes it give up, so that a field added to an event and not yet to
// its decoder goes to encoding/json (slower) instead of decoding as its
// zero value (wrong). A name too many only makes the decoder give up more.
func wireNames[T any]() []string { return appendWireNames(nil, reflect.TypeFor[T]()) }

func appendWireNames(names []string, t reflect.Type) []string {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case tag == "-":
		case f.Anonymous && name == "" && ft.Kind() == reflect.Struct:
			names = appendWireNames(names, ft)
		case !f.IsExported():
		case name != "":
			names = append(names, name)
		default:
			names = append(names, f.Name)
		}
	}
	return names
}

// known: Decode decodes this type and version (everything else is
// Unknown).
func known(t Type, v int) bool {
	if v < 1 || v > VersionOf(t) {
		return false
	}
	if _, ok := taskTypes[t]; ok {
		return true
	}
	_, ok := nodeTypes[t]
	return ok
}

// current: t is known and v is its current version, the one the fast
// decoder reads (an older one is upcast by the slow path).
func current(t Type, v int) bool { return v == VersionOf(t) && known(t, v) }

// foldsTo reports whether encoding/json would decode key into one of the
// fields named names although it is not exactly one of them (its
// case-insensitive match, bytes.EqualFold).
func foldsTo(key []byte, names []string) bool {
	for _, n := range names {
		if bytes.EqualFold(key, unsafe.Slice(unsafe.StringData(n), len(n))) {
			return true
		}
	}
	return false
}

// scan is a position in a JSON text.
type scan struct {
	b []byte
	i int
	d *decoder
	// null: the member being read is null. Every reader then returns its
	// zero value: encoding/json leaves a field alone on null (sets a slice
	// or map to nil), and fields start at zero and are read once.
	null bool
}

// isNull consumes a null.
func (s *scan) isNull() bool {
	if s.peek() == 'n' && bytes.HasPrefix(s.b[s.i:], []byte("null")) {
		s.i += 4
		return true
	}
	return false
}

func (s *scan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// end: only whitespace is left.
func (s *scan) end() bool {
	s.ws()
	return s.i == len(s.b)
}

func (s *scan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// objStart consumes '{'.
func (s *scan) objStart() bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	return true
}

// objEmpty consumes '}' if the object has no members.
func (s *scan) objEmpty() bool {
	if s.peek() == '}' {
		s.i++
		return true
	}
	return false
}

// key reads a member's key and its ':'. Keys with escapes are refused
// (encoding/json would unescape them before matching).
func (s *scan) key() ([]byte, bool) {
	k, ok := s.plainString()
	if !ok || s.peek() != ':' {
		return nil, false
	}
	s.i++
	return k, true
}

// objNext consumes ',' (more members) or '}' (the end).
func (s *scan) objNext() (more, ok bool) { return s.listNext('}') }

// listNext consumes ',' (more) or end (the end of the object or array).
func (s *scan) listNext(end byte) (more, ok bool) {
	switch s.peek() {
	case ',':
		s.i++
		return true, true
	case end:
		s.i++
		return false, true
	}
	return false, false
}

// arrStart consumes '[' and, if the array is empty, its ']'.
func (s *scan) arrStart() (empty, ok bool) {
	if s.peek() != '[' {
		return false, false
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		return true, true
	}
	return false, true
}

// arrNext consumes ',' (more elements) or ']' (the end).
func (s *scan) arrNext() (more, ok bool) { return s.listNext(']') }

// span reads a string and returns its contents between the quotes, and
// whether they hold an escape or a byte that is not ASCII. It checks what
// encoding/json's scanner checks: no control characters, valid escapes.
func (s *scan) span() (b []byte, plain, ok bool) {
	if s.peek() != '"' {
		return nil, false, false
	}
	s.i++
	start := s.i
	plain = true
	for s.i < len(s.b) {
		// Eight bytes at a time while none is special: a quote, a
		// backslash, a control character or a byte that is not ASCII.
		for s.i+8 <= len(s.b) && !special(binary.LittleEndian.Uint64(s.b[s.i:])) {
			s.i += 8
		}
		if s.i >= len(s.b) {
			break
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			b = s.b[start:s.i]
			s.i++
			return b, plain, true
		case c < 0x20:
			return nil, false, false
		case c == '\\':
			plain = false
			s.i++
			if s.i >= len(s.b) {
				return nil, false, false
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if s.i+4 >= len(s.b) {
					return nil, false, false
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return nil, false, false
					}
				}
				s.i += 5
			default:
				return nil, false, false
			}
		case c >= utf8.RuneSelf:
			plain = false
			s.i++
		default:
			s.i++
		}
	}
	return nil, false, false
}

// special reports whether any of the eight bytes in x is a quote, a
// backslash, below 0x20 or above 0x7f.
func special(x uint64) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	quote := x ^ (ones * '"')
	bslash := x ^ (ones * '\\')
	// A byte of v is zero exactly when (v - 1) & ^v has its high bit, for
	// bytes below 0x80; x's bytes at or above 0x80 are special anyway.
	zeroQ := (quote - ones) & ^quote
	zeroB := (bslash - ones) & ^bslash
	ctrl := (x - ones*0x20) & ^x
	return (zeroQ|zeroB|ctrl|x)&highs != 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// plainString reads a string of ASCII without escapes (keys, wire names).
func (s *scan) plainString() ([]byte, bool) {
	b, plain, ok := s.span()
	return b, ok && plain
}

// str reads a string value, interned if intern is set.
func (s *scan) str(intern bool) (string, bool) {
	if s.null {
		return "", true
	}
	b, plain, ok := s.span()
	if !ok {
		return "", false
	}
	if !plain && (bytes.IndexByte(b, '\\') >= 0 || !utf8.Valid(b)) {
		u := unquote(b)
		if intern {
			return s.d.str(u), true
		}
		return string(u), true
	}
	if intern {
		return s.d.str(b), true
	}
	return string(b), true
}

// texts holds the strings of one payload that are not interned, as read,
// until the payload ends; into then copies them into one allocation. A
// fold keeps a submission's id, name, hypothesis, command and idempotency
// key as long as the task: one object for the garbage collector to find
// instead of five, and one allocation per event instead of one per string.
type texts [textSlots][]byte

// text reads a string value into t[i] (null: the zero value).
func (s *scan) text(t *texts, i int) bool {
	if s.null {
		t[i] = nil
		return true
	}
	b, plain, ok := s.span()
	if !ok {
		return false
	}
	if !plain && (bytes.IndexByte(b, '\\') >= 0 || !utf8.Valid(b)) {
		b = unquote(b)
	}
	t[i] = b
	return true
}

// into sets *dst[i] to t[i] as a string, the strings sharing one
// allocation. An empty t[i] leaves *dst[i] as it is (the zero value of a
// fresh event).
func (t *texts) into(dst ...*string) {
	n := 0
	for i := range dst {
		n += len(t[i])
	}
	if n == 0 {
		return
	}
	buf := make([]byte, n)
	off := 0
	for i, d := range dst {
		if len(t[i]) == 0 {
			continue
		}
		k := copy(buf[off:], t[i])
		*d = unsafe.String(&buf[off], k)
		off += k
	}
}

// unescaped is the byte each one-letter escape after '\\' stands for.
var unescaped = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// unquote decodes the contents of a JSON string that span accepted, as
// encoding/json's unquoteBytes does: escapes, surrogate pairs, and U+FFFD
// for invalid UTF-8 and for lone surrogates.
func unquote(s []byte) []byte {
	b := make([]byte, 0, len(s)+2*utf8.UTFMax)
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\':
			r++
			switch s[r] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				b = append(b, unescaped[s[r]])
				r++
			case 'u':
				rr := getu4(s[r-1:])
				r += 5
				if utf16.IsSurrogate(rr) {
					if rr1 := getu4(s[r:]); rr1 >= 0 {
						if dec := utf16.DecodeRune(rr, rr1); dec != unicode.ReplacementChar {
							r += 6
							b = utf8.AppendRune(b, dec)
							break
						}
					}
					rr = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, rr)
			}
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			r += size
			b = utf8.AppendRune(b, rr)
		}
	}
	return b
}

// getu4 decodes \uXXXX at the start of s, or returns -1.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c = c - '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// number reads a JSON number and returns its text, and whether it is a
// plain integer (no fraction, no exponent).
func (s *scan) number() (b []byte, integer, ok bool) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
			s.i++
		}
	default:
		return nil, false, false
	}
	integer = true
	if s.i < len(s.b) && s.b[s.i] == '.' {
		integer = false
		s.i++
		if !s.digits() {
			return nil, false, false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		integer = false
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return nil, false, false
		}
	}
	return s.b[start:s.i], integer, true
}

func (s *scan) digits() bool {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// int reads an integer that fits an int64, and so an int on 64-bit
// platforms (elsewhere encoding/json decides).
func (s *scan) int() (int64, bool) {
	if s.null {
		return 0, true
	}
	b, integer, ok := s.number()
	if !ok || !integer || strconv.IntSize != 64 {
		return 0, false
	}
	if len(b) > 18 {
		v, err := strconv.ParseInt(unsafe.String(unsafe.SliceData(b), len(b)), 10, 64)
		return v, err == nil
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	var v int64
	for _, c := range b {
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

// uint reads a non-negative integer that fits a uint64.
func (s *scan) uint() (uint64, bool) {
	if s.null {
		return 0, true
	}
	b, integer, ok := s.number()
	if !ok || !integer || b[0] == '-' {
		return 0, false
	}
	if len(b) > 19 {
		v, err := strconv.ParseUint(unsafe.String(unsafe.SliceData(b), len(b)), 10, 64)
		return v, err == nil
	}
	var v uint64
	for _, c := range b {
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

// float reads a number as strconv.ParseFloat does for encoding/json.
func (s *scan) float() (float64, bool) {
	if s.null {
		return 0, true
	}
	b, integer, ok := s.number()
	if !ok {
		return 0, false
	}
	if integer && len(b) <= 15 {
		neg := b[0] == '-'
		if neg {
			b = b[1:]
		}
		var v int64
		for _, c := range b {
			v = v*10 + int64(c-'0')
		}
		f := float64(v) // exact below 2^53
		if neg {
			f = -f
		}
		return f, true
	}
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(b), len(b)), 64)
	return f, err == nil
}

func (s *scan) bool() (bool, bool) {
	if s.null {
		return false, true
	}
	s.ws()
	switch {
	case bytes.HasPrefix(s.b[s.i:], []byte("true")):
		s.i += 4
		return true, true
	case bytes.HasPrefix(s.b[s.i:], []byte("false")):
		s.i += 5
		return false, true
	}
	return false, false
}

// time reads a time as encoding/json does: Time.UnmarshalJSON on the
// quoted text, escapes included (which it refuses, as here).
func (s *scan) time(t *time.Time) bool {
	if s.null {
		return true
	}
	s.ws()
	start := s.i
	b, plain, ok := s.span()
	if !ok || !plain && bytes.IndexByte(b, '\\') >= 0 {
		return false
	}
	return t.UnmarshalJSON(s.b[start:s.i]) == nil
}

// skip reads any value, checking its syntax.
func (s *scan) skip(depth int) bool {
	if depth > maxNest {
		return false
	}
	switch c := s.peek(); {
	case c == '{':
		s.i++
		for more := !s.objEmpty(); more; {
			if _, _, ok := s.span(); !ok || s.peek() != ':' {
				return false
			}
			s.i++
			var ok bool
			if !s.skip(depth + 1) {
				return false
			}
			if more, ok = s.objNext(); !ok {
				return false
			}
		}
		return true
	case c == '[':
		empty, ok := s.arrStart()
		for more := !empty && ok; more; {
			if !s.skip(depth + 1) {
				return false
			}
			if more, ok = s.arrNext(); !ok {
				return false
			}
		}
		return ok
	case c == '"':
		_, _, ok := s.span()
		return ok
	case c == 't' || c == 'f':
		_, ok := s.bool()
		return ok
	case c == 'n':
		if bytes.HasPrefix(s.b[s.i:], []byte("null")) {
			s.i += 4
			return true
		}
		return false
	default:
		_, _, ok := s.number()
		return ok
	}
}

// strings reads an array of strings, interned.
func (s *scan) strings() ([]string, bool) {
	if s.null {
		return nil, true
	}
	empty, ok := s.arrStart()
	if !ok {
		return nil, false
	}
	out := []string{}
	if empty {
		return out, true
	}
	for more := true; more; {
		v, ok := s.str(true)
		if !ok {
			return nil, false
		}
		out = append(out, v)
		if more, ok = s.arrNext(); !ok {
			return nil, false
		}
	}
	return out, true
}

// env reads a map of strings, keys and values interned.
func (s *scan) env() (map[string]string, bool) {
	if s.null {
		return nil, true
	}
	if !s.objStart() {
		return nil, false
	}
	out := map[string]string{}
	for more := !s.objEmpty(); more; {
		k, ok := s.str(true)
		if !ok || s.peek() != ':' {
			return nil, false
		}
		s.i++
		v, ok := s.str(true)
		if !ok {
			return nil, false
		}
		out[k] = v
		if more, ok = s.objNext(); !ok {
			return nil, false
		}
	}
	return out, true
}

// members calls fn for each member of an object; fn reads the value and
// returns the key's bit in the object's field set (0 for an unknown key it
// skipped) and whether it succeeded. A known key seen twice gives up
// (encoding/json would merge the two values). names lists the keys of the
// object's struct (wireNames): a key fn skipped that is one of them, or
// one of them but for case, gives up too.
func (s *scan) members(names []string, fn func(key []byte) (uint32, bool)) bool {
	if !s.objStart() {
		return false
	}
	var seen uint32
	for more := !s.objEmpty(); more; {
		key, ok := s.key()
		if !ok {
			return false
		}
		null := s.isNull()
		s.null = null
		bit, ok := fn(key)
		s.null = false
		if !ok || seen&bit != 0 {
			return false
		}
		if bit == 0 && (foldsTo(key, names) || !null && !s.skip(0)) {
			return false
		}
		seen |= bit
		if more, ok = s.objNext(); !ok {
			return false
		}
	}
	return true
}
