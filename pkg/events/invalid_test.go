package events_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

// TestDecodeRecord: every kind of bad record decodes to an Invalid or
// Unknown event with a reason, never to an error and never to an event
// the fold would apply.
func TestDecodeRecord(t *testing.T) {
	at := time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)
	stored := time.Date(2025, 3, 3, 9, 0, 5, 0, time.UTC)
	good := func(e events.Event) (string, []byte) {
		subj, data, _, err := events.Encode(e, events.Meta{Time: at})
		if err != nil {
			t.Fatal(err)
		}
		return subj, data
	}
	subj, data := good(events.Completed{TaskID: "t1", Node: "n1"})
	_, other := good(events.Completed{TaskID: "t2", Node: "n1"})
	_, checkpoint := good(events.Checkpointed{TaskID: "t1", Ref: "x"})
	_, avail := good(events.Available{Node: "t1"})
	env := func(typ string, v int, payload string) []byte {
		return []byte(`{"id":"x","type":"` + typ + `","v":` + strconv.Itoa(v) + `,"time":"2025-03-03T09:00:00Z","data":` + payload + `}`)
	}
	cases := map[string]struct {
		subject string
		data    []byte
		want    string // prefix of the skip reason; "" = folds normally
	}{
		"good":                       {subject: subj, data: data},
		"malformed JSON":             {subject: "gpuq.task.t1.checkpointed", data: []byte("{not json"), want: "undecodable: seq 7 on gpuq.task.t1.checkpointed"},
		"payload of the wrong type":  {subject: "gpuq.task.t1.completed", data: env("completed", 1, `{"task_id":5}`), want: "undecodable: seq 7 completed"},
		"unknown type":               {subject: "gpuq.task.t1.exploded", data: env("exploded", 1, `{}`), want: `unknown event type "exploded"`},
		"newer version":              {subject: "gpuq.task.t1.submitted", data: env("submitted", 99, `{}`), want: "schema version 99 is newer"},
		"version negative":           {subject: "gpuq.task.t1.submitted", data: env("submitted", -1, `{}`), want: "schema version -1 is not"},
		"too large":                  {subject: subj, data: append(append([]byte{}, data[:len(data)-1]...), []byte(`,"pad":"`+strings.Repeat("x", events.MaxRecordBytes)+`"}`)...), want: "record of"},
		"payload names another task": {subject: subj, data: other, want: `payload names "t2", the subject "t1"`},
		"type differs from subject":  {subject: subj, data: checkpoint, want: `envelope type "checkpointed" on a "completed" subject`},
		"node event on a task":       {subject: "gpuq.task.t1.available", data: avail, want: `type "available" does not belong under gpuq.task`},
		"subject with extra tokens":  {subject: "gpuq.task.t1.x.completed", data: data, want: "subject is not gpuq.task.<key>.<type>"},
		"subject outside the log":    {subject: "other.t1.completed", data: data, want: "subject outside"},
		"task id a path":             {subject: "gpuq.task.x/y/z.submitted", data: env("submitted", 1, `{"task_id":"x/y/z"}`), want: `task id "x/y/z" is not a task id`},
		"task id a parent directory": {subject: "gpuq.task..._x.completed", data: data, want: "subject is not"},
		"task id with a colon":       {subject: "gpuq.task.a:b.completed", data: env("completed", 1, `{"task_id":"a:b"}`), want: `task id "a:b" is not a task id`},
		"task id of 65 bytes":        {subject: "gpuq.task." + strings.Repeat("a", 65) + ".completed", data: env("completed", 1, `{"task_id":"`+strings.Repeat("a", 65)+`"}`), want: "task id"},
		"task id a UUID":             {subject: "gpuq.task.0190a5b2-3c4d-7e8f-9a0b-1c2d3e4f5a6b.completed", data: env("completed", 1, `{"task_id":"0190a5b2-3c4d-7e8f-9a0b-1c2d3e4f5a6b","node":"n1"}`)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := events.DecodeRecord(events.Stored{Seq: 7, Subject: tc.subject, Data: tc.data, Time: stored})
			if r.Seq != 7 || r.Subject != tc.subject || !r.Time.Equal(stored) {
				t.Errorf("record %d %s %v: want seq, subject and stored time kept", r.Seq, r.Subject, r.Time)
			}
			got := events.SkipReason(r)
			if tc.want == "" && got != "" || !strings.HasPrefix(got, tc.want) {
				t.Fatalf("skip reason %q, want prefix %q", got, tc.want)
			}
			if tc.want != "" && strings.HasPrefix(tc.subject, events.TaskPrefix) && strings.HasPrefix(tc.subject, "gpuq.task.t1.") && tc.subject != "gpuq.task.t1.x.completed" && r.Event.Key() != "t1" {
				t.Errorf("key %q: the subject's task must still be named (its expected sequence counts the record)", r.Event.Key())
			}
		})
	}
}
