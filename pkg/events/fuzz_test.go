package events_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

// FuzzDecodeRecord: whatever a log holds, DecodeRecord returns a record
// without panicking; the fast decoder and encoding/json agree on it
// (Decode against DecodeSlow); a record that decodes to a known event
// matches its subject; and a known event encodes again and decodes to
// the same event. Seeds: the frozen v1 encodings (testdata/v1) and
// testdata/fuzz/FuzzDecodeRecord.
func FuzzDecodeRecord(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "v1", "*.json"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		typ := strings.TrimSuffix(filepath.Base(p), ".json")
		prefix := "gpuq.task.t1."
		switch events.Type(typ) {
		case events.TypeAvailable, events.TypeUnhealthy, events.TypeDrained, events.TypeUndrained, events.TypeLost:
			prefix = "gpuq.node.n1."
		}
		f.Add(prefix+typ, b)
	}
	f.Add("gpuq.task.t1.completed", []byte(`{"id":"x","type":"completed","v":1,"time":"2025-01-06T09:00:00Z","data":{"task_id":"t1","node":"n1"}}`))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		m := events.Stored{Seq: 7, Subject: subject, Data: data, Time: time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)}
		r := events.DecodeRecord(m)
		if r.Event == nil {
			t.Fatalf("DecodeRecord(%q, %q): no event", subject, data)
		}
		if len(data) <= events.MaxRecordBytes {
			sameDecode(t, m)
		}
		switch e := r.Event.(type) {
		case events.Invalid, events.Unknown:
			return
		default:
			if got := events.Subject(e); got != subject {
				t.Fatalf("DecodeRecord(%q, %q) = %#v, whose subject is %q", subject, data, e, got)
			}
			subj, b, _, err := events.Encode(e, events.Meta{Time: r.Envelope.Time})
			if err != nil {
				t.Fatalf("a decoded %T does not encode: %v", e, err)
			}
			again := events.DecodeRecord(events.Stored{Seq: 7, Subject: subj, Data: b, Time: m.Time})
			if _, bad := again.Event.(events.Invalid); bad {
				t.Fatalf("%q decoded, encoded as %s, and that is invalid: %+v", data, b, again.Event)
			}
		}
	})
}
