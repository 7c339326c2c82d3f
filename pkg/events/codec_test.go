package events_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"

	"github.com/gpuq/gpuq/pkg/events"
)

// TestWireNames pins every wire name to its literal: a rename of a constant
// or a Go type must not change a subject.
func TestWireNames(t *testing.T) {
	cases := map[string]struct {
		typ  events.Type
		want string
	}{
		"Submitted":        {events.TypeSubmitted, "submitted"},
		"Amended":          {events.TypeAmended, "amended"},
		"Cancelled":        {events.TypeCancelled, "cancelled"},
		"ChecklistUpdated": {events.TypeChecklistUpdated, "checklist_updated"},
		"Dispatched":       {events.TypeDispatched, "dispatched"},
		"Started":          {events.TypeStarted, "started"},
		"PreemptRequested": {events.TypePreemptRequested, "preempt_requested"},
		"Checkpointed":     {events.TypeCheckpointed, "checkpointed"},
		"Preempted":        {events.TypePreempted, "preempted"},
		"Requeued":         {events.TypeRequeued, "requeued"},
		"Completed":        {events.TypeCompleted, "completed"},
		"Failed":           {events.TypeFailed, "failed"},
		"ProgressReported": {events.TypeProgressReported, "progress_reported"},
		"Available":        {events.TypeAvailable, "available"},
		"Unhealthy":        {events.TypeUnhealthy, "unhealthy"},
		"Drained":          {events.TypeDrained, "drained"},
		"Lost":             {events.TypeLost, "lost"},
		"Undrained":        {events.TypeUndrained, "undrained"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := string(tc.typ); got != tc.want {
				t.Errorf("wire name = %q, want %q", got, tc.want)
			}
		})
	}
	if got, want := len(events.TaskTypes)+len(events.NodeTypes), len(cases); got != want {
		t.Errorf("the catalogue has %d types, this table %d: add the new wire name here", got, want)
	}
}

// TestEventTypeMethods: each Go type reports its own wire name and key.
func TestEventTypeMethods(t *testing.T) {
	cases := map[string]struct {
		e       events.Event
		wantTyp events.Type
		wantKey string
	}{
		"Submitted":        {events.Submitted{TaskID: "t"}, "submitted", "t"},
		"Amended":          {events.Amended{TaskID: "t"}, "amended", "t"},
		"Cancelled":        {events.Cancelled{TaskID: "t"}, "cancelled", "t"},
		"ChecklistUpdated": {events.ChecklistUpdated{TaskID: "t"}, "checklist_updated", "t"},
		"Dispatched":       {events.Dispatched{TaskID: "t"}, "dispatched", "t"},
		"Started":          {events.Started{TaskID: "t", Node: "n"}, "started", "t"},
		"PreemptRequested": {events.PreemptRequested{TaskID: "t", For: "u"}, "preempt_requested", "t"},
		"Checkpointed":     {events.Checkpointed{TaskID: "t"}, "checkpointed", "t"},
		"Preempted":        {events.Preempted{TaskID: "t", Node: "n"}, "preempted", "t"},
		"Requeued":         {events.Requeued{TaskID: "t"}, "requeued", "t"},
		"Completed":        {events.Completed{TaskID: "t", Node: "n"}, "completed", "t"},
		"Failed":           {events.Failed{TaskID: "t", Node: "n"}, "failed", "t"},
		"Available":        {events.Available{Node: "n"}, "available", "n"},
		"Unhealthy":        {events.Unhealthy{Node: "n"}, "unhealthy", "n"},
		"Drained":          {events.Drained{Node: "n"}, "drained", "n"},
		"Lost":             {events.Lost{Node: "n"}, "lost", "n"},
		"Unknown":          {events.Unknown{Type: "resized", K: "k"}, "resized", "k"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.e.EventType(); got != tc.wantTyp {
				t.Errorf("EventType() = %q, want %q", got, tc.wantTyp)
			}
			if got := tc.e.Key(); got != tc.wantKey {
				t.Errorf("Key() = %q, want %q", got, tc.wantKey)
			}
		})
	}
}

// TestCatalogue: the type lists are in catalogue order (enumerations grow
// only at the end) and split task from node types.
func TestCatalogue(t *testing.T) {
	wantTask := []events.Type{"submitted", "amended", "cancelled", "checklist_updated", "dispatched", "started",
		"preempt_requested", "checkpointed", "preempted", "requeued", "completed", "failed", "progress_reported"}
	wantNode := []events.Type{"available", "unhealthy", "drained", "lost", "undrained"}
	if diff := cmp.Diff(wantTask, events.TaskTypes); diff != "" {
		t.Errorf("TaskTypes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantNode, events.NodeTypes); diff != "" {
		t.Errorf("NodeTypes (-want +got):\n%s", diff)
	}
	for _, typ := range wantTask {
		if !events.IsTaskType(typ) {
			t.Errorf("IsTaskType(%q) = false, want true", typ)
		}
	}
	for _, typ := range append(wantNode, "resized", "") {
		if events.IsTaskType(typ) {
			t.Errorf("IsTaskType(%q) = true, want false", typ)
		}
	}
}

// roundTripCases are the events Encode → Decode must reproduce: every v1
// value plus what v1 cannot show (zero values, fields added since).
func roundTripCases() map[string]events.Event {
	cases := map[string]events.Event{}
	for typ, e := range v1Events() {
		cases[string(typ)] = e
	}
	cases["submitted/minimal"] = events.Submitted{TaskID: "t1", Name: "n", Team: "ml", Priority: "low", GPUs: 1, Hours: 0.25,
		Hypothesis: "h", Command: "true", SubmittedAt: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	deadline := time.Date(2025, 3, 1, 18, 0, 0, 0, time.UTC)
	cases["submitted/deadline and notify"] = events.Submitted{TaskID: "t1", Name: "n", Team: "ml", Priority: "low", GPUs: 1, Hours: 0.25,
		Hypothesis: "h", Command: "true", SubmittedAt: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC), Deadline: &deadline,
		Notify: []string{"https://hooks.example.com/a", "http://10.0.0.7:8080/gpuq"}}
	cases["dispatched/no placements"] = events.Dispatched{TaskID: "t1"}
	cases["cancelled/note"] = events.Cancelled{TaskID: "t1", By: "team:vision", Reason: "cancelled by team:vision", Note: "admin (security team)"}
	cases["failed/zero exit"] = events.Failed{TaskID: "t1"}
	cases["preempted/not started"] = events.Preempted{TaskID: "t1", Node: "n1", Checkpoint: "step-427", ExitCode: -1, NotStarted: true}
	cases["available/no gpus"] = events.Available{Node: "n1"}
	cases["unhealthy/all"] = events.Unhealthy{Node: "n1", GPUs: []string{"GPU-a", "GPU-b"}, Reason: "Xid 48"}
	return cases
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	at := time.Date(2025, 1, 6, 10, 0, 0, 5, time.FixedZone("CET", 3600))
	for name, e := range roundTripCases() {
		t.Run(name, func(t *testing.T) {
			subj, data, id, err := events.Encode(e, events.Meta{Time: at, CausationID: "cause-1"})
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			prefix := events.TaskPrefix
			if !events.IsTaskType(e.EventType()) {
				prefix = events.NodePrefix
			}
			if want := prefix + e.Key() + "." + string(e.EventType()); subj != want {
				t.Errorf("subject = %q, want %q", subj, want)
			}
			if u, err := uuid.Parse(id); err != nil || u.Version() != 7 {
				t.Errorf("id %q: want a UUID v7 (err %v)", id, err)
			}
			rec, err := events.Decode(events.Stored{Seq: 9, Subject: subj, Data: data, Time: at})
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			want := events.Record{
				Seq: 9, Subject: subj, Event: e,
				Envelope: events.Envelope{ID: id, Type: e.EventType(), Version: events.SchemaVersion, Time: at, CausationID: "cause-1"},
			}
			if diff := cmp.Diff(want, rec, cmpopts.IgnoreFields(events.Envelope{}, "Data")); diff != "" {
				t.Errorf("Decode(Encode(e)) (-want +got):\n%s", diff)
			}
			if loc := rec.Envelope.Time.Location(); loc != time.UTC {
				t.Errorf("envelope time in %v, want UTC", loc)
			}
			var body map[string]any
			if err := json.Unmarshal(rec.Envelope.Data, &body); err != nil {
				t.Errorf("envelope data is not a JSON object: %v", err)
			}
		})
	}
}

// TestEncodeIDsUnique: every Encode mints a new id.
func TestEncodeIDsUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		_, _, id, err := events.Encode(events.Completed{TaskID: "t1"}, events.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatalf("id %s minted twice", id)
		}
		seen[id] = true
	}
}

func TestEncodeRefusesInvalidKeys(t *testing.T) {
	cases := map[string]events.Event{
		"task/empty":      events.Submitted{TaskID: ""},
		"task/dot":        events.Cancelled{TaskID: "a.b"},
		"task/star":       events.Started{TaskID: "a*"},
		"task/gt":         events.Completed{TaskID: ">"},
		"task/space":      events.Failed{TaskID: "a b"},
		"task/tab":        events.Requeued{TaskID: "a\tb"},
		"task/newline":    events.Dispatched{TaskID: "a\nb"},
		"task/cr":         events.Amended{TaskID: "a\rb"},
		"node/empty":      events.Available{Node: ""},
		"node/dot":        events.Drained{Node: "gpu.a1"},
		"node/star":       events.Lost{Node: "*"},
		"node/gt":         events.Unhealthy{Node: "gpu>"},
		"node/space":      events.Available{Node: "gpu a1"},
		"node/only space": events.Drained{Node: " "},
	}
	for name, e := range cases {
		t.Run(name, func(t *testing.T) {
			subj, data, id, err := events.Encode(e, events.Meta{})
			if err == nil {
				t.Fatalf("Encode(%#v) = %q, nil error; want an error", e, subj)
			}
			if subj != "" || data != nil || id != "" {
				t.Errorf("Encode returned %q, %q, %q with its error; want zero values", subj, data, id)
			}
			if events.ValidKey(e.Key()) {
				t.Errorf("ValidKey(%q) = true", e.Key())
			}
		})
	}
}

func TestValidKey(t *testing.T) {
	cases := map[string]struct {
		key  string
		want bool
	}{
		"ulid":       {"01JGZ5K3V1ABCDEF", true},
		"dashes":     {"gpu-a1", true},
		"underscore": {"team_x", true},
		"colon":      {"a:b", true},
		"unicode":    {"knoten-ä", true},
		"empty":      {"", false},
		"dot":        {"a.b", false},
		"star":       {"a*b", false},
		"gt":         {"a>b", false},
		"space":      {"a b", false},
		"tab":        {"a\tb", false},
		"newline":    {"a\n", false},
		"cr":         {"\ra", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := events.ValidKey(tc.key); got != tc.want {
				t.Errorf("ValidKey(%q) = %v, want %v", tc.key, got, tc.want)
			}
		})
	}
}

func TestSubjects(t *testing.T) {
	cases := map[string]struct {
		got, want string
	}{
		"task event":    {events.Subject(events.Started{TaskID: "t1"}), "gpuq.task.t1.started"},
		"node event":    {events.Subject(events.Lost{Node: "n1"}), "gpuq.node.n1.lost"},
		"task subjects": {events.TaskSubjects("t1"), "gpuq.task.t1.>"},
		"advice":        {events.AdviceSubject("t1"), "gpuq.advice.t1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}

// envelope is a hand-written envelope, as a newer or broken writer might
// have produced it.
func envelope(typ string, v int, data string) []byte {
	b, err := json.Marshal(map[string]any{"id": "x", "type": typ, "v": v, "time": "2025-01-06T09:00:00Z", "data": json.RawMessage(data)})
	if err != nil {
		panic(err)
	}
	return b
}

func TestDecodeUnknown(t *testing.T) {
	cases := map[string]struct {
		subject string
		data    []byte
		want    events.Event
	}{
		"unknown task type": {
			subject: "gpuq.task.t1.resized",
			data:    envelope("resized", 1, `{"task_id":"t1","gpus":8}`),
			want:    events.Unknown{Type: "resized", Version: 1, K: "t1", Raw: []byte(`{"task_id":"t1","gpus":8}`)},
		},
		"unknown node type": {
			subject: "gpuq.node.n1.rebooted",
			data:    envelope("rebooted", 1, `{"node":"n1"}`),
			want:    events.Unknown{Type: "rebooted", Version: 1, K: "n1", Raw: []byte(`{"node":"n1"}`)},
		},
		"newer schema of a known type": {
			subject: "gpuq.task.t1.submitted",
			data:    envelope("submitted", events.SchemaVersion+1, `{"task_id":"t1","gpus":"all of them"}`),
			want:    events.Unknown{Type: "submitted", Version: events.SchemaVersion + 1, K: "t1", Raw: []byte(`{"task_id":"t1","gpus":"all of them"}`)},
		},
		"newer schema of a node type": {
			subject: "gpuq.node.n1.available",
			data:    envelope("available", 7, `{"node":"n1"}`),
			want:    events.Unknown{Type: "available", Version: 7, K: "n1", Raw: []byte(`{"node":"n1"}`)},
		},
		"version not a version (negative)": {
			subject: "gpuq.task.t1.cancelled",
			data:    envelope("cancelled", -1, `{"task_id":"t1"}`),
			want:    events.Unknown{Type: "cancelled", Version: -1, K: "t1", Raw: []byte(`{"task_id":"t1"}`)},
		},
		"unknown type with a body the known types would refuse": {
			subject: "gpuq.task.t1.resized",
			data:    envelope("resized", 1, `[1,2,3]`),
			want:    events.Unknown{Type: "resized", Version: 1, K: "t1", Raw: []byte(`[1,2,3]`)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rec, err := events.Decode(events.Stored{Seq: 3, Subject: tc.subject, Data: tc.data})
			if err != nil {
				t.Fatalf("Decode: %v; want no error", err)
			}
			if diff := cmp.Diff(tc.want, rec.Event); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
			if rec.Seq != 3 || rec.Subject != tc.subject {
				t.Errorf("record seq, subject = %d, %q; want 3, %q", rec.Seq, rec.Subject, tc.subject)
			}
		})
	}
}

func TestDecodeMalformed(t *testing.T) {
	cases := map[string]struct {
		subject string
		data    string
	}{
		"empty":                  {"gpuq.task.t1.submitted", ``},
		"not json":               {"gpuq.task.t1.submitted", `submitted t1`},
		"truncated":              {"gpuq.task.t1.submitted", `{"id":"x","type":"submitted","v":1,"data":{"task_id":"t1"`},
		"envelope is an array":   {"gpuq.task.t1.submitted", `[]`},
		"type is a number":       {"gpuq.task.t1.submitted", `{"id":"x","type":5,"v":1,"data":{}}`},
		"version is a string":    {"gpuq.task.t1.submitted", `{"id":"x","type":"submitted","v":"1","data":{}}`},
		"time is not a time":     {"gpuq.task.t1.submitted", `{"id":"x","type":"submitted","v":1,"time":"yesterday","data":{}}`},
		"known type, wrong body": {"gpuq.task.t1.submitted", `{"id":"x","type":"submitted","v":1,"data":{"task_id":5}}`},
		"known type, body array": {"gpuq.node.n1.available", `{"id":"x","type":"available","v":1,"data":[1]}`},
		"known type, no body":    {"gpuq.task.t1.completed", `{"id":"x","type":"completed","v":1}`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rec, err := events.Decode(events.Stored{Seq: 5, Subject: tc.subject, Data: []byte(tc.data)})
			if err == nil {
				t.Fatalf("Decode(%s) = %+v, nil error; want an error", tc.data, rec)
			}
			if !strings.HasPrefix(err.Error(), "events: seq 5") {
				t.Errorf("error %q does not name the sequence", err)
			}
			if diff := cmp.Diff(events.Record{}, rec); diff != "" {
				t.Errorf("record with the error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSubjectMatch(t *testing.T) {
	cases := map[string]struct {
		filter, subject string
		want            bool
	}{
		"empty filter matches all":      {"", "gpuq.task.t1.submitted", true},
		"gt alone matches all":          {">", "gpuq.task.t1.submitted", true},
		"exact":                         {"gpuq.task.t1.submitted", "gpuq.task.t1.submitted", true},
		"exact, other type":             {"gpuq.task.t1.submitted", "gpuq.task.t1.started", false},
		"exact, prefix only":            {"gpuq.task.t1", "gpuq.task.t1.started", false},
		"exact, longer filter":          {"gpuq.task.t1.started.x", "gpuq.task.t1.started", false},
		"star one token":                {"gpuq.task.*.started", "gpuq.task.t1.started", true},
		"star other type":               {"gpuq.task.*.started", "gpuq.task.t1.failed", false},
		"star at end":                   {"gpuq.task.t1.*", "gpuq.task.t1.started", true},
		"star needs a token":            {"gpuq.task.t1.*", "gpuq.task.t1", false},
		"star is one token only":        {"gpuq.task.*", "gpuq.task.t1.started", false},
		"two stars":                     {"gpuq.*.*.lost", "gpuq.node.n1.lost", true},
		"task subjects":                 {"gpuq.task.t1.>", "gpuq.task.t1.started", true},
		"task subjects, other task":     {"gpuq.task.t1.>", "gpuq.task.t10.started", false},
		"task subjects, prefix of id":   {"gpuq.task.t1.>", "gpuq.task.t1x.started", false},
		"gt needs at least one token":   {"gpuq.task.t1.>", "gpuq.task.t1", false},
		"gt matches many tokens":        {"gpuq.>", "gpuq.task.t1.started", true},
		"gt after star":                 {"gpuq.*.t1.>", "gpuq.task.t1.requeued", true},
		"all tasks":                     {"gpuq.task.>", "gpuq.node.n1.lost", false},
		"all nodes":                     {"gpuq.node.>", "gpuq.node.n1.lost", true},
		"different first token":         {"other.>", "gpuq.task.t1.started", false},
		"subject shorter than filter":   {"gpuq.task.*.started", "gpuq.task", false},
		"tokens compared whole, not ..": {"gpuq.task.t", "gpuq.task.t1", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := events.SubjectMatch(tc.filter, tc.subject); got != tc.want {
				t.Errorf("SubjectMatch(%q, %q) = %v, want %v", tc.filter, tc.subject, got, tc.want)
			}
		})
	}
}
