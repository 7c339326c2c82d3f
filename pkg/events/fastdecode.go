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

// The fast decoder: one pass over the envelope and its payload, with a
// hand-written decoder per event type and no reflection.
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
// event and not to its decoder below fails there by name (and until then
// falls back to encoding/json rather than decoding as zero).
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

// wireType returns the constant for a known wire name without allocating.
func wireType(b []byte) Type {
	switch string(b) {
	case "submitted":
		return TypeSubmitted
	case "amended":
		return TypeAmended
	case "cancelled":
		return TypeCancelled
	case "checklist_updated":
		return TypeChecklistUpdated
	case "dispatched":
		return TypeDispatched
	case "started":
		return TypeStarted
	case "preempt_requested":
		return TypePreemptRequested
	case "checkpointed":
		return TypeCheckpointed
	case "preempted":
		return TypePreempted
	case "requeued":
		return TypeRequeued
	case "completed":
		return TypeCompleted
	case "failed":
		return TypeFailed
	case "progress_reported":
		return TypeProgressReported
	case "available":
		return TypeAvailable
	case "unhealthy":
		return TypeUnhealthy
	case "drained":
		return TypeDrained
	case "undrained":
		return TypeUndrained
	case "lost":
		return TypeLost
	}
	return Type(b)
}

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
func (s *scan) objNext() (more, ok bool) {
	switch s.peek() {
	case ',':
		s.i++
		return true, true
	case '}':
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
func (s *scan) arrNext() (more, ok bool) {
	switch s.peek() {
	case ',':
		s.i++
		return true, true
	case ']':
		s.i++
		return false, true
	}
	return false, false
}

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
type texts [5][]byte

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
			case '"', '\\', '/':
				b = append(b, s[r])
				r++
			case 'b':
				b = append(b, '\b')
				r++
			case 'f':
				b = append(b, '\f')
				r++
			case 'n':
				b = append(b, '\n')
				r++
			case 'r':
				b = append(b, '\r')
				r++
			case 't':
				b = append(b, '\t')
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

// payload decodes the data of a known type.
func (s *scan) payload(t Type) (Event, bool) {
	switch t {
	case TypeSubmitted:
		return s.submitted()
	case TypeAmended:
		return s.amended()
	case TypeCancelled:
		return s.cancelled()
	case TypeChecklistUpdated:
		return s.checklistUpdated()
	case TypeDispatched:
		return s.dispatched()
	case TypeStarted:
		return s.started()
	case TypePreemptRequested:
		return s.preemptRequested()
	case TypeCheckpointed:
		return s.checkpointed()
	case TypePreempted:
		return s.preempted()
	case TypeRequeued:
		return s.requeued()
	case TypeCompleted:
		return s.completed()
	case TypeFailed:
		return s.failed()
	case TypeProgressReported:
		return s.progressReported()
	case TypeAvailable:
		return s.available()
	case TypeUnhealthy:
		return s.unhealthy()
	case TypeDrained:
		return s.drained()
	case TypeUndrained:
		return s.undrained()
	case TypeLost:
		return s.lost()
	}
	return nil, false
}

var submittedKeys = wireNames[Submitted]()

func (s *scan) submitted() (Event, bool) {
	var (
		e Submitted
		t texts
	)
	ok := s.members(submittedKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "task_id":
			ok = s.text(&t, 0)
			return 1 << 0, ok
		case "name":
			ok = s.text(&t, 1)
			return 1 << 1, ok
		case "team":
			e.Team, ok = s.str(true)
			return 1 << 2, ok
		case "priority":
			e.Priority, ok = s.str(true)
			return 1 << 3, ok
		case "gpus":
			var v int64
			v, ok = s.int()
			e.GPUs = int(v)
			return 1 << 4, ok
		case "hours":
			e.Hours, ok = s.float()
			return 1 << 5, ok
		case "hypothesis":
			ok = s.text(&t, 2)
			return 1 << 6, ok
		case "command":
			ok = s.text(&t, 3)
			return 1 << 7, ok
		case "preemptible":
			e.Preemptible, ok = s.bool()
			return 1 << 8, ok
		case "preempt_signal":
			e.PreemptSignal, ok = s.str(true)
			return 1 << 9, ok
		case "grace_s":
			e.GraceS, ok = s.float()
			return 1 << 10, ok
		case "gpu_model":
			e.GPUModel, ok = s.str(true)
			return 1 << 11, ok
		case "min_gpu_mem_mib":
			var v int64
			v, ok = s.int()
			e.MinGPUMemMiB = int(v)
			return 1 << 12, ok
		case "idempotency_key":
			ok = s.text(&t, 4)
			return 1 << 13, ok
		case "submitted_at":
			return 1 << 14, s.time(&e.SubmittedAt)
		case "env":
			e.Env, ok = s.env()
			return 1 << 15, ok
		case "dir":
			e.Dir, ok = s.str(true)
			return 1 << 16, ok
		case "deadline":
			if s.null {
				return 1 << 17, true
			}
			var d time.Time
			if ok = s.time(&d); ok {
				e.Deadline = &d
			}
			return 1 << 17, ok
		case "notify":
			e.Notify, ok = s.strings()
			return 1 << 18, ok
		}
		return 0, true
	})
	if ok {
		t.into(&e.TaskID, &e.Name, &e.Hypothesis, &e.Command, &e.IdempotencyKey)
	}
	return e, ok
}

var amendedKeys = wireNames[Amended]()

func (s *scan) amended() (Event, bool) {
	var (
		e Amended
		t texts
	)
	ok := s.members(amendedKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "task_id":
			ok = s.text(&t, 0)
			return 1 << 0, ok
		case "gpus":
			var v int64
			v, ok = s.int()
			e.GPUs = int(v)
			return 1 << 1, ok
		case "priority":
			e.Priority, ok = s.str(true)
			return 1 << 2, ok
		case "hours":
			e.Hours, ok = s.float()
			return 1 << 3, ok
		case "hypothesis":
			ok = s.text(&t, 1)
			return 1 << 4, ok
		}
		return 0, true
	})
	if ok {
		t.into(&e.TaskID, &e.Hypothesis)
	}
	return e, ok
}

var cancelledKeys = wireNames[Cancelled]()

func (s *scan) cancelled() (Event, bool) {
	var e Cancelled
	ok := s.members(cancelledKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "task_id":
			e.TaskID, ok = s.str(false)
			return 1 << 0, ok
		case "by":
			e.By, ok = s.str(true)
			return 1 << 1, ok
		case "reason":
			e.Reason, ok = s.str(true)
			return 1 << 2, ok
		case "note":
			e.Note, ok = s.str(true)
			return 1 << 3, ok
		}
		return 0, true
	})
	return e, ok
}

var checklistKeys = wireNames[ChecklistUpdated]()

func (s *scan) checklistUpdated() (Event, bool) {
	var e ChecklistUpdated
	ok := s.members(checklistKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "task_id":
			e.TaskID, ok = s.str(false)
			return 1 << 0, ok
		case "item":
			e.Item, ok = s.str(true)
			return 1 << 1, ok
		case "done":
			e.Done, ok = s.bool()
			return 1 << 2, ok
		}
		return 0, true
	})
	return e, ok
}

var (
	dispatchedKeys = wireNames[Dispatched]()
	placementKeys  = wireNames[Placement]()
)

func (s *scan) dispatched() (Event, bool) {
	var (
		e Dispatched
		t texts
	)
	ok := s.members(dispatchedKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "task_id":
			ok = s.text(&t, 0)
			return 1 << 0, ok
		case "placements":
			e.Placements, ok = s.placements()
			return 1 << 1, ok
		case "based_on_seq":
			e.BasedOnSeq, ok = s.uint()
			return 1 << 2, ok
		case "resume_from":
			ok = s.text(&t, 1)
			return 1 << 3, ok
		case "reason":
			e.Reason, ok = s.str(true)
			return 1 << 4, ok
		case "backfill":
			e.Backfill, ok = s.bool()
			return 1 << 5, ok
		case "epoch":
			e.Epoch, ok = s.uint()
			return 1 << 6, ok
		}
		return 0, true
	})
	if ok {
		t.into(&e.TaskID, &e.ResumeFrom)
	}
	return e, ok
}

func (s *scan) placements() ([]Placement, bool) {
	if s.null {
		return nil, true
	}
	empty, ok := s.arrStart()
	if !ok {
		return nil, false
	}
	out := make([]Placement, 0, 1)
	if empty {
		return out, true
	}
	for more := true; more; {
		var p Placement
		ok := s.members(placementKeys, func(k []byte) (bit uint32, ok bool) {
			switch string(k) {
			case "node":
				p.Node, ok = s.str(true)
				return 1 << 0, ok
			case "gpus":
				p.GPUs, ok = s.strings()
				return 1 << 1, ok
			}
			return 0, true
		})
		if !ok {
			return nil, false
		}
		out = append(out, p)
		if more, ok = s.arrNext(); !ok {
			return nil, false
		}
	}
	return out, true
}

var startedKeys = wireNames[Started]()

func (s *scan) started() (Event, bool) {
	var (
		e Started
		t texts
	)
	ok := s.members(startedKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "task_id":
			ok = s.text(&t, 0)
			return 1 << 0, ok
		case "node":
			e.Node, ok = s.str(true)
			return 1 << 1, ok
		case "pid":
			var v int64
			v, ok = s.int()
			e.PID = int(v)
			return 1 << 2, ok
		case "log_dir":
			ok = s.text(&t, 1)
			return 1 << 3, ok
		}
		return 0, true
	})
	if ok {
		t.into(&e.TaskID, &e.LogDir)
	}
	return e, ok
}

var preemptRequestedKeys = wireNames[PreemptRequested]()

func (s *scan) preemptRequested() (Event, bool) {
	var (
		e PreemptRequested
		t texts
	)
	ok := s.members(preemptRequestedKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "task_id":
			ok = s.text(&t, 0)
			return 1 << 0, ok
		case "for":
			ok = s.text(&t, 1)
			return 1 << 1, ok
		case "policy":
			e.Policy, ok = s.str(true)
			return 1 << 2, ok
		case "reason":
			ok = s.text(&t, 2)
			return 1 << 3, ok
		case "grace_s":
			e.GraceS, ok = s.float()
			return 1 << 4, ok
		case "based_on_seq":
			e.BasedOnSeq, ok = s.uint()
			return 1 << 5, ok
		case "epoch":
			e.Epoch, ok = s.uint()
			return 1 << 6, ok
		case "code":
			e.Code, ok = s.str(true)
			return 1 << 7, ok
		}
		return 0, true
	})
	if ok {
		t.into(&e.TaskID, &e.For, &e.Reason)
	}
	return e, ok
}

var checkpointedKeys = wireNames[Checkpointed]()

func (s *scan) checkpointed() (Event, bool) {
	var (
		e Checkpointed
		t texts
	)
	ok := s.members(checkpointedKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "task_id":
			ok = s.text(&t, 0)
			return 1 << 0, ok
		case "ref":
			ok = s.text(&t, 1)
			return 1 << 1, ok
		case "step":
			e.Step, ok = s.int()
			return 1 << 2, ok
		}
		return 0, true
	})
	if ok {
		t.into(&e.TaskID, &e.Ref)
	}
	return e, ok
}

var preemptedKeys = wireNames[Preempted]()

func (s *scan) preempted() (Event, bool) {
	var (
		e Preempted
		t texts
	)
	ok := s.members(preemptedKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "task_id":
			ok = s.text(&t, 0)
			return 1 << 0, ok
		case "node":
			e.Node, ok = s.str(true)
			return 1 << 1, ok
		case "checkpoint":
			ok = s.text(&t, 1)
			return 1 << 2, ok
		case "forced":
			e.Forced, ok = s.bool()
			return 1 << 3, ok
		case "lost_gpu_seconds":
			e.LostGPUSeconds, ok = s.float()
			return 1 << 4, ok
		case "exit_code":
			var v int64
			v, ok = s.int()
			e.ExitCode = int(v)
			return 1 << 5, ok
		case "reason":
			ok = s.text(&t, 2)
			return 1 << 6, ok
		case "not_started":
			e.NotStarted, ok = s.bool()
			return 1 << 7, ok
		}
		return 0, true
	})
	if ok {
		t.into(&e.TaskID, &e.Checkpoint, &e.Reason)
	}
	return e, ok
}

var requeuedKeys = wireNames[Requeued]()

func (s *scan) requeued() (Event, bool) {
	var (
		e Requeued
		t texts
	)
	ok := s.members(requeuedKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "task_id":
			ok = s.text(&t, 0)
			return 1 << 0, ok
		case "reason":
			ok = s.text(&t, 1)
			return 1 << 1, ok
		case "resume_from":
			ok = s.text(&t, 2)
			return 1 << 2, ok
		case "epoch":
			e.Epoch, ok = s.uint()
			return 1 << 3, ok
		case "based_on_seq":
			e.BasedOnSeq, ok = s.uint()
			return 1 << 4, ok
		case "code":
			e.Code, ok = s.str(true)
			return 1 << 5, ok
		}
		return 0, true
	})
	if ok {
		t.into(&e.TaskID, &e.Reason, &e.ResumeFrom)
	}
	return e, ok
}

var completedKeys = wireNames[Completed]()

func (s *scan) completed() (Event, bool) {
	var e Completed
	ok := s.members(completedKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "task_id":
			e.TaskID, ok = s.str(false)
			return 1 << 0, ok
		case "node":
			e.Node, ok = s.str(true)
			return 1 << 1, ok
		}
		return 0, true
	})
	return e, ok
}

var failedKeys = wireNames[Failed]()

func (s *scan) failed() (Event, bool) {
	var (
		e Failed
		t texts
	)
	ok := s.members(failedKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "task_id":
			ok = s.text(&t, 0)
			return 1 << 0, ok
		case "node":
			e.Node, ok = s.str(true)
			return 1 << 1, ok
		case "exit_code":
			var v int64
			v, ok = s.int()
			e.ExitCode = int(v)
			return 1 << 2, ok
		case "error":
			ok = s.text(&t, 1)
			return 1 << 3, ok
		case "stderr_tail":
			ok = s.text(&t, 2)
			return 1 << 4, ok
		}
		return 0, true
	})
	if ok {
		t.into(&e.TaskID, &e.Error, &e.StderrTail)
	}
	return e, ok
}

var progressReportedKeys = wireNames[ProgressReported]()

func (s *scan) progressReported() (Event, bool) {
	var (
		e ProgressReported
		t texts
	)
	ok := s.members(progressReportedKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "task_id":
			ok = s.text(&t, 0)
			return 1 << 0, ok
		case "node":
			e.Node, ok = s.str(true)
			return 1 << 1, ok
		case "step":
			e.Step, ok = s.int()
			return 1 << 2, ok
		case "total":
			e.Total, ok = s.int()
			return 1 << 3, ok
		case "fraction":
			e.Fraction, ok = s.float()
			return 1 << 4, ok
		}
		return 0, true
	})
	if ok {
		t.into(&e.TaskID)
	}
	return e, ok
}

var (
	availableKeys = wireNames[Available]()
	gpuKeys       = wireNames[GPU]()
)

func (s *scan) available() (Event, bool) {
	var e Available
	ok := s.members(availableKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "node":
			e.Node, ok = s.str(true)
			return 1 << 0, ok
		case "gpus":
			e.GPUs, ok = s.gpus()
			return 1 << 1, ok
		case "free_gpus":
			var v int64
			v, ok = s.int()
			e.FreeGPUs = int(v)
			return 1 << 2, ok
		case "boot_id":
			e.BootID, ok = s.str(true)
			return 1 << 3, ok
		case "driver":
			e.Driver, ok = s.str(true)
			return 1 << 4, ok
		}
		return 0, true
	})
	return e, ok
}

func (s *scan) gpus() ([]GPU, bool) {
	if s.null {
		return nil, true
	}
	empty, ok := s.arrStart()
	if !ok {
		return nil, false
	}
	out := []GPU{}
	if empty {
		return out, true
	}
	for more := true; more; {
		var g GPU
		ok := s.members(gpuKeys, func(k []byte) (bit uint32, ok bool) {
			switch string(k) {
			case "uuid":
				g.UUID, ok = s.str(true)
				return 1 << 0, ok
			case "index":
				var v int64
				v, ok = s.int()
				g.Index = int(v)
				return 1 << 1, ok
			case "model":
				g.Model, ok = s.str(true)
				return 1 << 2, ok
			case "memory_mib":
				var v int64
				v, ok = s.int()
				g.MemoryMiB = int(v)
				return 1 << 3, ok
			case "healthy":
				g.Healthy, ok = s.bool()
				return 1 << 4, ok
			}
			return 0, true
		})
		if !ok {
			return nil, false
		}
		out = append(out, g)
		if more, ok = s.arrNext(); !ok {
			return nil, false
		}
	}
	return out, true
}

var unhealthyKeys = wireNames[Unhealthy]()

func (s *scan) unhealthy() (Event, bool) {
	var e Unhealthy
	ok := s.members(unhealthyKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "node":
			e.Node, ok = s.str(true)
			return 1 << 0, ok
		case "gpus":
			e.GPUs, ok = s.strings()
			return 1 << 1, ok
		case "reason":
			e.Reason, ok = s.str(true)
			return 1 << 2, ok
		}
		return 0, true
	})
	return e, ok
}

var (
	drainedKeys   = wireNames[Drained]()
	undrainedKeys = wireNames[Undrained]()
	lostKeys      = wireNames[Lost]()
)

func (s *scan) drained() (Event, bool) {
	var e Drained
	ok := s.members(drainedKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "node":
			e.Node, ok = s.str(true)
			return 1 << 0, ok
		case "reason":
			e.Reason, ok = s.str(true)
			return 1 << 1, ok
		case "by":
			e.By, ok = s.str(true)
			return 1 << 2, ok
		case "preempt":
			e.Preempt, ok = s.bool()
			return 1 << 3, ok
		}
		return 0, true
	})
	return e, ok
}

func (s *scan) undrained() (Event, bool) {
	var e Undrained
	ok := s.members(undrainedKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "node":
			e.Node, ok = s.str(true)
			return 1 << 0, ok
		case "reason":
			e.Reason, ok = s.str(true)
			return 1 << 1, ok
		case "by":
			e.By, ok = s.str(true)
			return 1 << 2, ok
		}
		return 0, true
	})
	return e, ok
}

func (s *scan) lost() (Event, bool) {
	var e Lost
	ok := s.members(lostKeys, func(k []byte) (bit uint32, ok bool) {
		switch string(k) {
		case "node":
			e.Node, ok = s.str(true)
			return 1 << 0, ok
		case "reason":
			e.Reason, ok = s.str(true)
			return 1 << 1, ok
		case "epoch":
			e.Epoch, ok = s.uint()
			return 1 << 2, ok
		case "based_on_seq":
			e.BasedOnSeq, ok = s.uint()
			return 1 << 3, ok
		}
		return 0, true
	})
	return e, ok
}
