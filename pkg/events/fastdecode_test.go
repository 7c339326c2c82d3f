package events_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/events"
)

// sameDecode fails t unless Decode and encoding/json (DecodeSlow) agree on
// m: the same error text, or the same record.
func sameDecode(t interface {
	Helper()
	Fatalf(string, ...any)
}, m events.Stored) {
	t.Helper()
	got, gotErr := events.Decode(m)
	want, wantErr := events.DecodeSlow(m)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("Decode(%s):\n error %v\n encoding/json: %v", m.Data, gotErr, wantErr)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Decode(%s) (-encoding/json +Decode):\n%s", m.Data, diff)
	}
}

// fastEqualsSlow fails t unless the fast decoder alone accepts m and
// decodes it exactly as encoding/json does.
func fastEqualsSlow(t interface {
	Helper()
	Fatalf(string, ...any)
}, m events.Stored) {
	t.Helper()
	got, ok := events.DecodeFast(m)
	if !ok {
		t.Fatalf("the fast decoder gave up on %s", m.Data)
	}
	want, err := events.DecodeSlow(m)
	if err != nil {
		t.Fatalf("encoding/json: %v, the fast decoder: no error, on %s", err, m.Data)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("fast decode of %s (-encoding/json +fast):\n%s", m.Data, diff)
	}
}

// TestFastDecodeFrozen: the fast decoder decodes every frozen v1 encoding
// (indented, as an old writer might have stored them) and every round-trip
// case by itself, exactly as encoding/json does.
func TestFastDecodeFrozen(t *testing.T) {
	for _, typ := range allTypes() {
		t.Run("v1/"+string(typ), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "v1", string(typ)+".json"))
			if err != nil {
				t.Fatal(err)
			}
			m := events.Stored{Seq: 42, Subject: events.Subject(v1Events()[typ]), Data: data}
			fastEqualsSlow(t, m)
			var compact bytes.Buffer
			if err := json.Compact(&compact, data); err != nil {
				t.Fatal(err)
			}
			m.Data = compact.Bytes()
			fastEqualsSlow(t, m)
		})
	}
	for name, e := range roundTripCases() {
		t.Run("encoded/"+name, func(t *testing.T) {
			subj, data, _, err := events.Encode(e, events.Meta{Time: v1Time, CausationID: v1Causation})
			if err != nil {
				t.Fatal(err)
			}
			fastEqualsSlow(t, events.Stored{Seq: 7, Subject: subj, Data: data})
		})
	}
}

// TestDecodeEqualsJSON: inputs the fast decoder must give up on, or decode
// exactly as encoding/json does; Decode agrees with encoding/json on each.
func TestDecodeEqualsJSON(t *testing.T) {
	env := func(data string) string {
		return `{"id":"x","type":"completed","v":1,"time":"2025-01-06T09:00:00Z","data":` + data + `}`
	}
	cases := map[string]struct {
		subject, data string
		fast          bool // the fast decoder decodes it by itself
	}{
		"plain":                          {"gpuq.task.t1.completed", env(`{"task_id":"t1","node":"n1"}`), true},
		"data before type":               {"gpuq.task.t1.completed", `{"data":{"task_id":"t1","node":"n1"},"id":"x","time":"2025-01-06T09:00:00Z","type":"completed","v":1}`, true},
		"whitespace everywhere":          {"gpuq.task.t1.completed", " {\r\n\t\"id\" : \"x\" , \"type\":\"completed\",\"v\":1,\"time\":\"2025-01-06T09:00:00Z\",\"data\": { \"task_id\" :\"t1\" } } \n", true},
		"unknown keys skipped":           {"gpuq.task.t1.completed", env(`{"task_id":"t1","exit":{"a":[1,2.5e3,true,null,"s"]},"node":"n1"}`), true},
		"unknown envelope key":           {"gpuq.task.t1.completed", `{"id":"x","trace":[{}],"type":"completed","v":1,"time":"2025-01-06T09:00:00Z","data":{"task_id":"t1"}}`, true},
		"escapes in values":              {"gpuq.task.t1.completed", env(`{"task_id":"t\u00e41","node":"a\"b\\c\/d\b\f\n\r\t\u0026\ud83d\ude00"}`), true},
		"lone surrogate":                 {"gpuq.task.t1.completed", env(`{"task_id":"t1","node":"\ud800x\udc00\ud800\u0041"}`), true},
		"invalid utf-8":                  {"gpuq.task.t1.completed", env("{\"task_id\":\"t1\",\"node\":\"a\xffb\xed\xa0\x80\"}"), true},
		"unknown type":                   {"gpuq.task.t1.resized", `{"id":"x","type":"resized","v":1,"time":"2025-01-06T09:00:00Z","data":{"gpus":[1]}}`, true},
		"unknown type, data first":       {"gpuq.task.t1.resized", `{"data":[1, 2],"id":"x","type":"resized","v":1,"time":"2025-01-06T09:00:00Z"}`, true},
		"newer version":                  {"gpuq.task.t1.completed", `{"id":"x","type":"completed","v":2,"time":"2025-01-06T09:00:00Z","data":{"task_id":5}}`, true},
		"time with offset":               {"gpuq.task.t1.completed", `{"id":"x","type":"completed","v":1,"time":"2025-01-06T09:00:00.5+01:30","data":{}}`, true},
		"empty arrays and maps":          {"gpuq.task.t1.submitted", `{"id":"x","type":"submitted","v":1,"time":"2025-01-06T09:00:00Z","data":{"task_id":"t1","env":{},"submitted_at":"2025-01-06T09:00:00Z"}}`, true},
		"env keys with escapes":          {"gpuq.task.t1.submitted", `{"id":"x","type":"submitted","v":1,"time":"2025-01-06T09:00:00Z","data":{"task_id":"t1","env":{"A\u0042":"1","A\u0042":"2"}}}`, true},
		"float forms":                    {"gpuq.task.t1.submitted", `{"id":"x","type":"submitted","v":1,"time":"2025-01-06T09:00:00Z","data":{"task_id":"t1","hours":-0.5e-3,"grace_s":12345678901234567890}}`, true},
		"null fields":                    {"gpuq.task.t1.completed", env(`{"task_id":"t1","node":null,"x":null}`), true},
		"null slices and times":          {"gpuq.task.t1.submitted", `{"id":"x","type":"submitted","v":1,"time":"2025-01-06T09:00:00Z","data":{"task_id":"t1","env":null,"submitted_at":null,"gpus":null}}`, true},
		"null in an array":               {"gpuq.node.n1.unhealthy", `{"id":"x","type":"unhealthy","v":1,"time":"2025-01-06T09:00:00Z","data":{"node":"n1","gpus":["a",null]}}`, false},
		"null in the envelope":           {"gpuq.task.t1.completed", `{"id":null,"type":"completed","v":1,"time":"2025-01-06T09:00:00Z","data":{}}`, false},
		"null data":                      {"gpuq.task.t1.completed", env(`null`), false},
		"no data":                        {"gpuq.task.t1.completed", `{"id":"x","type":"completed","v":1,"time":"2025-01-06T09:00:00Z"}`, false},
		"no time":                        {"gpuq.task.t1.completed", `{"id":"x","type":"completed","v":1,"data":{}}`, false},
		"duplicate key":                  {"gpuq.task.t1.completed", env(`{"task_id":"t1","task_id":"t2"}`), false},
		"duplicate slice key":            {"gpuq.node.n1.unhealthy", `{"id":"x","type":"unhealthy","v":1,"time":"2025-01-06T09:00:00Z","data":{"node":"n1","gpus":["a","b"],"gpus":["c"]}}`, false},
		"case-folded key":                {"gpuq.task.t1.completed", env(`{"Task_ID":"t1"}`), false},
		"kelvin sign key":                {"gpuq.node.n1.available", "{\"id\":\"x\",\"type\":\"available\",\"v\":1,\"time\":\"2025-01-06T09:00:00Z\",\"data\":{\"node\":\"n1\",\"boot_id\":\"b\",\"boot_i\u212a\":\"k\"}}", false},
		"escaped key":                    {"gpuq.task.t1.completed", env(`{"task\u005fid":"t1"}`), false},
		"case-folded envelope key":       {"gpuq.task.t1.completed", `{"ID":"x","type":"completed","v":1,"time":"2025-01-06T09:00:00Z","data":{}}`, false},
		"float in an int":                {"gpuq.task.t1.started", `{"id":"x","type":"started","v":1,"time":"2025-01-06T09:00:00Z","data":{"task_id":"t1","pid":1.0}}`, false},
		"exponent in an int":             {"gpuq.task.t1.started", `{"id":"x","type":"started","v":1,"time":"2025-01-06T09:00:00Z","data":{"task_id":"t1","pid":1e2}}`, false},
		"int overflow":                   {"gpuq.task.t1.started", `{"id":"x","type":"started","v":1,"time":"2025-01-06T09:00:00Z","data":{"task_id":"t1","pid":99999999999999999999}}`, false},
		"negative uint":                  {"gpuq.task.t1.dispatched", `{"id":"x","type":"dispatched","v":1,"time":"2025-01-06T09:00:00Z","data":{"task_id":"t1","based_on_seq":-1}}`, false},
		"float overflow":                 {"gpuq.task.t1.submitted", `{"id":"x","type":"submitted","v":1,"time":"2025-01-06T09:00:00Z","data":{"task_id":"t1","hours":1e400}}`, false},
		"string in an int":               {"gpuq.task.t1.started", `{"id":"x","type":"started","v":1,"time":"2025-01-06T09:00:00Z","data":{"task_id":"t1","pid":"1"}}`, false},
		"int in a string":                {"gpuq.task.t1.completed", env(`{"task_id":5}`), false},
		"version a string":               {"gpuq.task.t1.completed", `{"id":"x","type":"completed","v":"1","time":"2025-01-06T09:00:00Z","data":{}}`, false},
		"escaped time":                   {"gpuq.task.t1.completed", `{"id":"x","type":"completed","v":1,"time":"\u0032025-01-06T09:00:00Z","data":{}}`, false},
		"bad time":                       {"gpuq.task.t1.completed", `{"id":"x","type":"completed","v":1,"time":"yesterday","data":{}}`, false},
		"leading zero":                   {"gpuq.task.t1.started", `{"id":"x","type":"started","v":1,"time":"2025-01-06T09:00:00Z","data":{"pid":01}}`, false},
		"trailing comma":                 {"gpuq.task.t1.completed", env(`{"task_id":"t1",}`), false},
		"trailing garbage":               {"gpuq.task.t1.completed", env(`{"task_id":"t1"}`) + "x", false},
		"two values":                     {"gpuq.task.t1.completed", env(`{}`) + env(`{}`), false},
		"truncated":                      {"gpuq.task.t1.completed", `{"id":"x","type":"completed","v":1,"time":"2025-01-06T09:00:00Z","data":{"task_id":"t`, false},
		"control character in a string":  {"gpuq.task.t1.completed", env("{\"task_id\":\"t\x011\"}"), false},
		"bad escape":                     {"gpuq.task.t1.completed", env(`{"task_id":"t\'1"}`), false},
		"bad unicode escape":             {"gpuq.task.t1.completed", env(`{"task_id":"t\u12g4"}`), false},
		"garbage in an unknown value":    {"gpuq.task.t1.completed", env(`{"task_id":"t1","x":[1,]}`), false},
		"garbage in unknown type's data": {"gpuq.task.t1.resized", `{"id":"x","type":"resized","v":1,"time":"2025-01-06T09:00:00Z","data":{"a":tru}}`, false},
		"payload an array":               {"gpuq.node.n1.available", `{"id":"x","type":"available","v":1,"time":"2025-01-06T09:00:00Z","data":[1]}`, false},
		"empty":                          {"gpuq.task.t1.completed", ``, false},
		"deep nesting":                   {"gpuq.task.t1.completed", env(`{"x":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`), false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := events.Stored{Seq: 3, Subject: tc.subject, Data: []byte(tc.data)}
			sameDecode(t, m)
			if tc.fast {
				fastEqualsSlow(t, m)
			} else if r, ok := events.DecodeFast(m); ok {
				t.Fatalf("the fast decoder decoded %s as %+v; want it to give up", tc.data, r)
			}
		})
	}
}

// genString draws strings that stress JSON: HTML characters, quotes,
// control characters, line separators, emoji, invalid UTF-8.
func genString(t *rapid.T, label string) string {
	return rapid.OneOf(
		rapid.StringMatching(`[a-zA-Z0-9 _./:-]{0,16}`),
		rapid.String(),
		rapid.Map(rapid.SliceOfN(rapid.Byte(), 0, 8), func(b []byte) string { return string(b) }),
		rapid.SampledFrom([]string{"", "a&b<c>d", "\u2028\u2029", "\"q\"\n\t\\", "\x00\x1f\x7f", "😀", "\xed\xa0\x80", "K\u212a"}),
	).Draw(t, label)
}

func genTime(t *rapid.T, label string) time.Time {
	at := time.Unix(rapid.Int64Range(-62135596800+86400, 253402300799-86400).Draw(t, label+" s"), rapid.Int64Range(0, 999999999).Draw(t, label+" ns"))
	switch rapid.IntRange(0, 2).Draw(t, label+" zone") {
	case 0:
		return at.UTC()
	case 1:
		return at.In(time.FixedZone("", rapid.IntRange(-12*60, 14*60).Draw(t, label+" offset")*60))
	}
	return at.Truncate(time.Second).UTC()
}

func genFloat(t *rapid.T, label string) float64 {
	return rapid.OneOf(
		rapid.Map(rapid.IntRange(-1000, 100000), func(i int) float64 { return float64(i) }),
		rapid.Float64Range(-1e300, 1e300),
		rapid.Map(rapid.Float64Range(-1, 1), func(f float64) float64 { return f * math.Pow(10, -300) }),
		rapid.SampledFrom([]float64{0, math.Copysign(0, -1), 0.1, 1e21, 1e-7, 4503599627370497, math.MaxFloat64, math.SmallestNonzeroFloat64}),
	).Draw(t, label)
}

// TestFastDecodeEncodedProperty: whatever Encode writes, the fast decoder
// decodes by itself, exactly as encoding/json does.
func TestFastDecodeEncodedProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := genEvent(t)
		subj, data, _, err := events.Encode(e, events.Meta{Time: genTime(t, "time"), CausationID: genString(t, "causation")})
		if err != nil {
			t.Fatalf("Encode(%#v): %v", e, err)
		}
		fastEqualsSlow(t, events.Stored{Seq: rapid.Uint64().Draw(t, "seq"), Subject: subj, Data: data})
	})
}

// TestDecodeMutatedProperty: on encodings rewritten the way other writers
// or damage could (key order, whitespace, escapes, unknown, case-folded and
// duplicate keys, nulls, values of other types, number forms, truncation,
// flipped bytes), Decode agrees with encoding/json: the same record or the
// same error.
func TestDecodeMutatedProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := genEvent(t)
		subj, data, _, err := events.Encode(e, events.Meta{Time: genTime(t, "time")})
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var tree any
		if err := dec.Decode(&tree); err != nil {
			t.Fatal(err)
		}
		w := &rewriter{t: t, ws: rapid.SampledFrom([]string{"", " ", "\n\t", " \r\n "}).Draw(t, "whitespace"),
			rate: rapid.SampledFrom([]int{0, 0, 20, 4, 1}).Draw(t, "mutation rate")}
		out := []byte(w.value(tree, 0))
		switch rapid.IntRange(0, 19).Draw(t, "damage") {
		case 0:
			out = out[:rapid.IntRange(0, len(out)).Draw(t, "truncate at")]
		case 1:
			at := rapid.IntRange(0, len(out)-1).Draw(t, "flip at")
			out[at] ^= byte(rapid.IntRange(1, 255).Draw(t, "flip"))
		case 2:
			out = append(out, rapid.SampledFrom([]string{" ", "x", "{}", "\n\t"}).Draw(t, "append")...)
		}
		sameDecode(t, events.Stored{Seq: 1, Subject: subj, Data: out})
	})
}

// rewriter writes a decoded JSON tree back with random changes: always
// key order, whitespace and escapes in values; other changes at a rate
// (none when rate is 0, the most at 1).
type rewriter struct {
	t    *rapid.T
	ws   string
	rate int
}

func (w *rewriter) chance(n int, label string) bool {
	return rapid.IntRange(0, n-1).Draw(w.t, label) == 0
}

// mutate: a change that may make the input one the fast decoder gives up
// on, or an error.
func (w *rewriter) mutate(n int, label string) bool { return w.rate > 0 && w.chance(n*w.rate, label) }

var otherValues = []string{`null`, `true`, `false`, `0`, `-1`, `1.5`, `1e3`, `-0`, `""`, `"x"`, `[]`, `{}`, `["a",1]`, `{"a":{}}`,
	`"2025-01-06T09:30:00Z"`, `18446744073709551616`, `1e400`}

var otherKeys = []string{"extra", "TASK_ID", "Node", "gpuS", "DATA", "Type", "V", "task\u212aid", "ſeq", "envx", "pid"}

func (w *rewriter) value(v any, depth int) string {
	if depth > 0 && w.mutate(25, "replace value") {
		return rapid.SampledFrom(otherValues).Draw(w.t, "other value")
	}
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if !w.chance(3, "keep order") {
			keys = rapid.Permutation(keys).Draw(w.t, "order")
		}
		var parts []string
		for _, k := range keys {
			if w.mutate(30, "drop key") {
				continue
			}
			name, escape := k, false
			if w.mutate(10, "rename") {
				switch rapid.IntRange(0, 3).Draw(w.t, "how") {
				case 0:
					name = strings.ToUpper(k)
				case 1:
					name = strings.ReplaceAll(k, "k", "\u212a")
				case 2:
					name = strings.ReplaceAll(k, "s", "ſ")
				case 3:
					escape = true
				}
			}
			parts = append(parts, w.str(name, escape)+w.ws+":"+w.ws+w.value(v[k], depth+1))
			if w.mutate(30, "duplicate key") {
				parts = append(parts, w.str(k, false)+":"+w.value(v[k], depth+1))
			}
		}
		if w.mutate(8, "add key") {
			k := rapid.SampledFrom(otherKeys).Draw(w.t, "other key")
			val := rapid.SampledFrom(otherValues).Draw(w.t, "other value")
			at := rapid.IntRange(0, len(parts)).Draw(w.t, "at")
			parts = append(parts[:at], append([]string{w.str(k, false) + ":" + val}, parts[at:]...)...)
		}
		return "{" + w.ws + strings.Join(parts, ","+w.ws) + w.ws + "}"
	case []any:
		var parts []string
		for _, x := range v {
			parts = append(parts, w.value(x, depth+1))
		}
		return "[" + w.ws + strings.Join(parts, w.ws+","+w.ws) + "]"
	case string:
		return w.str(v, w.chance(4, "escape some"))
	case json.Number:
		s := string(v)
		if _, err := strconv.ParseInt(s, 10, 64); err == nil && w.mutate(10, "number form") {
			switch rapid.IntRange(0, 2).Draw(w.t, "form") {
			case 0:
				return s + ".0"
			case 1:
				return s + "e0"
			case 2:
				return s + "0000000000000000000"
			}
		}
		return s
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	}
	w.t.Fatalf("unexpected %T", v)
	return ""
}

// str writes a string, with some of its characters escaped if escape.
func (w *rewriter) str(s string, escape bool) string {
	if !escape {
		b, _ := json.Marshal(s)
		return string(b)
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		if r == utf8.RuneError || !w.chance(3, "escape") {
			q, _ := json.Marshal(string(r))
			b.Write(q[1 : len(q)-1])
			continue
		}
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			fmt.Fprintf(&b, `\u%04x\u%04X`, r1, r2)
			continue
		}
		switch r {
		case '/':
			b.WriteString(`\/`)
		case '\n':
			b.WriteString(`\n`)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// TestDecodeConcurrent: Decode's pooled decoders are safe for concurrent
// use (run with -race).
func TestDecodeConcurrent(t *testing.T) {
	var msgs []events.Stored
	for _, e := range roundTripCases() {
		subj, data, _, err := events.Encode(e, events.Meta{Time: v1Time})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, events.Stored{Seq: 1, Subject: subj, Data: data})
	}
	done := make(chan error)
	for g := range 4 {
		go func() {
			var err error
			for i := range 200 {
				m := msgs[(i+g)%len(msgs)]
				got, _ := events.Decode(m)
				want, _ := events.DecodeSlow(m)
				if diff := cmp.Diff(want, got); diff != "" && err == nil {
					err = fmt.Errorf("%s: %s", m.Subject, diff)
				}
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestEncodeEqualsJSONProperty: Encode writes the envelope by hand; its
// bytes are json.Marshal's of the same Envelope, or the same error.
func TestEncodeEqualsJSONProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := genEvent(t)
		at := genTime(t, "time")
		if rapid.IntRange(0, 19).Draw(t, "time out of range") == 0 {
			at = time.Date(rapid.SampledFrom([]int{-1, 10000}).Draw(t, "year"), 1, 1, 0, 0, 0, 0, time.UTC)
		}
		cause := genString(t, "causation")
		_, data, id, err := events.Encode(e, events.Meta{Time: at, CausationID: cause})
		body, err1 := json.Marshal(e)
		if err1 != nil {
			t.Fatal(err1)
		}
		want, wantErr := json.Marshal(events.Envelope{ID: id, Type: e.EventType(), Version: events.SchemaVersion, Time: at.UTC(),
			CausationID: cause, Data: body})
		if fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("Encode error %v, json.Marshal: %v", err, wantErr)
		}
		if !bytes.Equal(data, want) {
			t.Fatalf("Encode wrote\n%s\njson.Marshal\n%s", data, want)
		}
	})
}

// BenchmarkDecode: Decode (the fast path) against encoding/json alone
// (decodeSlow) on the frozen v1 value of every event type; ns/op is one
// event. "extra key" is a completed event with a key that names no field,
// which both skip.
func BenchmarkDecode(b *testing.B) {
	var all []events.Stored
	for _, typ := range allTypes() {
		subj, data, _, err := events.Encode(v1Events()[typ], events.Meta{Time: v1Time, CausationID: v1Causation})
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, events.Stored{Seq: 1, Subject: subj, Data: data})
	}
	extra := []events.Stored{{Seq: 1, Subject: "gpuq.task.t1.completed",
		Data: []byte(`{"id":"x","type":"completed","v":1,"time":"2025-01-06T09:00:00Z","data":{"task_id":"t1","node":"n1","exit_note":"oom"}}`)}}
	decoders := map[string]func(events.Stored) (events.Record, error){"fast": events.Decode, "slow": events.DecodeSlow}
	for _, set := range []struct {
		name string
		msgs []events.Stored
	}{{"every type", all}, {"extra key", extra}} {
		for _, name := range []string{"fast", "slow"} {
			b.Run(set.name+"/"+name, func(b *testing.B) {
				decode := decoders[name]
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if _, err := decode(set.msgs[i%len(set.msgs)]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
