package events_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/events"
)

// The schema-evolution mechanism on a made-up history of cancelled (no
// real type has changed yet, see upcast.go): in its version 1 the
// canceller was "who" and the reason "why"; version 2 renamed who to by,
// version 3 why to reason, today's struct.

// rename returns a step that renames one payload key.
func rename(from, to string) events.Upcast {
	return func(data []byte) ([]byte, error) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, err
		}
		if v, ok := m[from]; ok {
			delete(m, from)
			m[to] = v
		}
		return json.Marshal(m)
	}
}

func withCancelledHistory(t *testing.T) {
	t.Helper()
	t.Cleanup(events.SetUpcasts(events.TypeCancelled, rename("who", "by"), rename("why", "reason")))
}

// rawEnvelope is an envelope with the given "v" (omitted when v is nil).
func rawEnvelope(typ events.Type, v *int, data string) []byte {
	m := map[string]any{"id": "x", "type": typ, "time": "2025-01-06T09:00:00Z", "data": json.RawMessage(data)}
	if v != nil {
		m["v"] = *v
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func ver(v int) *int { return &v }

func TestUpcast(t *testing.T) {
	withCancelledHistory(t)
	if got := events.VersionOf(events.TypeCancelled); got != 3 {
		t.Fatalf("VersionOf(cancelled) = %d with two steps, want 3", got)
	}
	want := events.Cancelled{TaskID: "t1", By: "alice", Reason: "duplicate"}
	cases := map[string]struct {
		v        *int
		data     string
		want     events.Event
		wantV    int  // Envelope.Version: the version written
		wantFast bool // the fast decoder decodes it itself
	}{
		"v1, before both renames":     {v: ver(1), data: `{"task_id":"t1","who":"alice","why":"duplicate"}`, want: want, wantV: 1},
		"no v: a record of version 1": {v: nil, data: `{"task_id":"t1","who":"alice","why":"duplicate"}`, want: want, wantV: 1},
		"v0 reads as version 1":       {v: ver(0), data: `{"task_id":"t1","who":"alice","why":"duplicate"}`, want: want, wantV: 1},
		"v2, one step":                {v: ver(2), data: `{"task_id":"t1","by":"alice","why":"duplicate"}`, want: want, wantV: 2},
		"v3, current: no step":        {v: ver(3), data: `{"task_id":"t1","by":"alice","reason":"duplicate"}`, want: want, wantV: 3, wantFast: true},
		"v1 without the renamed keys": {v: ver(1), data: `{"task_id":"t1"}`, want: events.Cancelled{TaskID: "t1"}, wantV: 1},
		"v4, newer than this build": {v: ver(4), data: `{"task_id":"t1","canceller":{"name":"alice"}}`, wantV: 4, wantFast: true,
			want: events.Unknown{Type: events.TypeCancelled, Version: 4, K: "t1", Raw: []byte(`{"task_id":"t1","canceller":{"name":"alice"}}`)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := events.Stored{Seq: 5, Subject: "gpuq.task.t1.cancelled", Data: rawEnvelope(events.TypeCancelled, tc.v, tc.data)}
			rec, err := events.Decode(m)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tc.want, rec.Event); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
			if rec.Envelope.Version != tc.wantV {
				t.Errorf("Envelope.Version = %d, want %d", rec.Envelope.Version, tc.wantV)
			}
			slow, err := events.DecodeSlow(m)
			if err != nil {
				t.Fatalf("DecodeSlow: %v", err)
			}
			if diff := cmp.Diff(slow, rec); diff != "" {
				t.Errorf("Decode differs from encoding/json (-slow +Decode):\n%s", diff)
			}
			if _, ok := events.DecodeFast(m); ok != tc.wantFast {
				t.Errorf("fast decoder ok = %v, want %v (an older version goes to the upcasts)", ok, tc.wantFast)
			}
		})
	}
}

// TestUpcastRefused: a step's error makes the record undecodable (an
// Invalid record in a fold), never a panic or a silent zero.
func TestUpcastRefused(t *testing.T) {
	t.Cleanup(events.SetUpcasts(events.TypeCancelled, func([]byte) ([]byte, error) { return nil, errors.New("no such canceller") }))
	m := events.Stored{Seq: 5, Subject: "gpuq.task.t1.cancelled", Data: rawEnvelope(events.TypeCancelled, ver(1), `{"task_id":"t1"}`)}
	if _, err := events.Decode(m); err == nil {
		t.Fatal("Decode: no error for a refused upcast")
	}
	r := events.DecodeRecord(m)
	if _, ok := r.Event.(events.Invalid); !ok {
		t.Fatalf("DecodeRecord = %#v, want Invalid", r.Event)
	}
}

// TestEncodeWritesCurrentVersion: Encode writes each type's current
// version, and what it writes decodes on the fast path.
func TestEncodeWritesCurrentVersion(t *testing.T) {
	cases := map[string]struct {
		history bool
		want    int
	}{
		"no steps: version 1":  {false, 1},
		"two steps: version 3": {true, 3},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.history {
				withCancelledHistory(t)
			}
			subj, data, _, err := events.Encode(events.Cancelled{TaskID: "t1", By: "bob"}, events.Meta{Time: v1Time})
			if err != nil {
				t.Fatal(err)
			}
			var env events.Envelope
			if err := json.Unmarshal(data, &env); err != nil {
				t.Fatal(err)
			}
			if env.Version != tc.want {
				t.Errorf("v = %d, want %d", env.Version, tc.want)
			}
			rec, ok := events.DecodeFast(events.Stored{Seq: 1, Subject: subj, Data: data})
			if !ok || rec.Event != (events.Cancelled{TaskID: "t1", By: "bob"}) {
				t.Errorf("fast decode = %#v, %v", rec.Event, ok)
			}
		})
	}
}

// TestUpcastProperty: any version-1 payload of the made-up history
// decodes to the struct it describes, on both decoders alike.
func TestUpcastProperty(t *testing.T) {
	withCancelledHistory(t)
	rapid.Check(t, func(t *rapid.T) {
		c := events.Cancelled{TaskID: rapid.StringMatching(`[a-z0-9]{1,12}`).Draw(t, "task"),
			By: rapid.String().Draw(t, "by"), Reason: rapid.String().Draw(t, "reason")}
		v := rapid.IntRange(0, 3).Draw(t, "v")
		m := map[string]string{"task_id": c.TaskID}
		by, reason := "by", "reason"
		if v <= 1 {
			by = "who"
		}
		if v <= 2 {
			reason = "why"
		}
		if c.By != "" {
			m[by] = c.By
		}
		if c.Reason != "" {
			m[reason] = c.Reason
		}
		data, _ := json.Marshal(m)
		st := events.Stored{Seq: 9, Subject: "gpuq.task." + c.TaskID + ".cancelled", Data: rawEnvelope(events.TypeCancelled, &v, string(data))}
		rec, err := events.Decode(st)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if diff := cmp.Diff(events.Event(c), rec.Event); diff != "" {
			t.Fatalf("v%d %s (-want +got):\n%s", v, data, diff)
		}
		slow, err := events.DecodeSlow(st)
		if err != nil || !cmp.Equal(slow, rec) {
			t.Fatalf("DecodeSlow differs: %v\n%s", err, cmp.Diff(slow, rec))
		}
	})
}

// TestNoStepsInThisBuild: every real type is at version 1 until a step is
// registered; registering one needs its frozen encoding under
// testdata/v<N> (TestFrozen checks that) and a line in docs/events.md.
func TestNoStepsInThisBuild(t *testing.T) {
	if diff := cmp.Diff(map[events.Type]int{}, events.Upcasts()); diff != "" {
		t.Errorf("registered steps (-want +got):\n%s\nupdate this test, testdata/v<N> and docs/events.md's version table", diff)
	}
}
