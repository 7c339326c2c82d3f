package events_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

// An imported record's origin time is the fold's time of it, unless it is
// after the time the importing stream stored (no import can be that).
func TestOriginTime(t *testing.T) {
	stored := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	before := stored.Add(-48 * time.Hour)
	cases := map[string]struct {
		origin *events.Origin
		want   time.Time
	}{
		"no origin: the stored time":       {nil, stored},
		"an origin before: the original":   {&events.Origin{Seq: 3, Time: before}, before},
		"an origin after: the stored time": {&events.Origin{Seq: 3, Time: stored.Add(time.Hour)}, stored},
		"an origin without time":           {&events.Origin{Seq: 3}, stored},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, data, _, err := events.Encode(events.Completed{TaskID: "t1", Node: "n1"}, events.Meta{Time: stored})
			if err != nil {
				t.Fatal(err)
			}
			var env events.Envelope
			if err := json.Unmarshal(data, &env); err != nil {
				t.Fatal(err)
			}
			env.Origin = c.origin
			if data, err = json.Marshal(env); err != nil {
				t.Fatal(err)
			}
			r := events.DecodeRecord(events.Stored{Seq: 9, Subject: "gpuq.task.t1.completed", Data: data, Time: stored})
			if _, bad := r.Event.(events.Invalid); bad {
				t.Fatalf("invalid: %+v", r.Event)
			}
			if !r.Time.Equal(c.want) {
				t.Errorf("Record.Time = %s, want %s", r.Time, c.want)
			}
			if fast, ok := events.DecodeFast(events.Stored{Seq: 9, Subject: "gpuq.task.t1.completed", Data: data}); !ok {
				t.Errorf("the fast decoder gave up on %s", data)
			} else if (fast.Envelope.Origin == nil) != (c.origin == nil) {
				t.Errorf("fast origin %+v, want %+v", fast.Envelope.Origin, c.origin)
			}
		})
	}
}
