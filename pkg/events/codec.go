package events

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// SchemaVersion is the first version of every event type's schema, the
// one a record without "v" has. A type's current version is VersionOf
// (upcast.go): Encode writes it, Decode reads every version up to it,
// upcasting older ones.
const SchemaVersion = 1

// Subject prefixes.
const (
	TaskPrefix   = "gpuq.task."
	NodePrefix   = "gpuq.node."
	AdvicePrefix = "gpuq.advice."
)

var taskTypes = map[Type]func() Event{
	TypeSubmitted:        func() Event { return &Submitted{} },
	TypeAmended:          func() Event { return &Amended{} },
	TypeCancelled:        func() Event { return &Cancelled{} },
	TypeChecklistUpdated: func() Event { return &ChecklistUpdated{} },
	TypeDispatched:       func() Event { return &Dispatched{} },
	TypeStarted:          func() Event { return &Started{} },
	TypePreemptRequested: func() Event { return &PreemptRequested{} },
	TypeCheckpointed:     func() Event { return &Checkpointed{} },
	TypePreempted:        func() Event { return &Preempted{} },
	TypeRequeued:         func() Event { return &Requeued{} },
	TypeCompleted:        func() Event { return &Completed{} },
	TypeFailed:           func() Event { return &Failed{} },
	TypeProgressReported: func() Event { return &ProgressReported{} },
}

var nodeTypes = map[Type]func() Event{
	TypeAvailable: func() Event { return &Available{} },
	TypeUnhealthy: func() Event { return &Unhealthy{} },
	TypeDrained:   func() Event { return &Drained{} },
	TypeUndrained: func() Event { return &Undrained{} },
	TypeLost:      func() Event { return &Lost{} },
}

// TaskTypes and NodeTypes list every wire name, in catalogue order.
var (
	TaskTypes = []Type{TypeSubmitted, TypeAmended, TypeCancelled, TypeChecklistUpdated, TypeDispatched, TypeStarted,
		TypePreemptRequested, TypeCheckpointed, TypePreempted, TypeRequeued, TypeCompleted, TypeFailed, TypeProgressReported}
	NodeTypes = []Type{TypeAvailable, TypeUnhealthy, TypeDrained, TypeLost, TypeUndrained}
)

// Subject is the subject an event is published on.
func Subject(e Event) string {
	if _, ok := nodeTypes[e.EventType()]; ok {
		return NodePrefix + e.Key() + "." + string(e.EventType())
	}
	return TaskPrefix + e.Key() + "." + string(e.EventType())
}

// TaskSubjects is the wildcard covering all of one task's events.
func TaskSubjects(taskID string) string { return TaskPrefix + taskID + ".>" }

// AdviceSubject is the subject of a task's advice.
func AdviceSubject(taskID string) string { return AdvicePrefix + taskID }

// ValidKey reports whether s can be a subject token (task id or node name).
func ValidKey(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".*> \t\r\n")
}

// MaxTaskIDBytes bounds a task id in the log.
const MaxTaskIDBytes = 64

// ValidTaskID reports whether id may name a task in the log: 1 to
// MaxTaskIDBytes ASCII letters, digits, '-' and '_', the first a letter
// or a digit. What submit mints (a UUID; requests to the API must carry
// one, api.IsTaskID) is one, as are the ids of the simulators and tests;
// each is one subject token and one plain directory name on a node. Every
// fold skips a task's record whose id is not (DecodeRecord: Invalid).
func ValidTaskID(id string) bool {
	if id == "" || len(id) > MaxTaskIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && (c == '-' || c == '_')) {
			return false
		}
	}
	return true
}

// Envelope is the wire form of every event.
type Envelope struct {
	ID          string    `json:"id"`
	Type        Type      `json:"type"`
	Version     int       `json:"v"`
	Time        time.Time `json:"time"`
	CausationID string    `json:"causation_id,omitempty"`
	// Origin is set only by an import (gpuq audit import): where the
	// record was in the log it was exported from. See Record.Time.
	Origin *Origin         `json:"origin,omitempty"`
	Data   json.RawMessage `json:"data"`
}

// Origin is an imported record's place in its original log: its sequence
// and the original stream's stored time. A fold takes Time as the
// record's log time (Record.Time) when it is not after the time the
// importing stream stored, so that an imported log folds to the state the
// original did; nothing but an import writes it.
type Origin struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
}

// Meta is what a writer adds around an event.
type Meta struct {
	Time        time.Time // when the writer observed the fact
	CausationID string    // the event id this one follows from, if any
}

// Encode returns the subject and envelope bytes of an event. The envelope id
// is a fresh UUID v7.
func Encode(e Event, m Meta) (subject string, data []byte, id string, err error) {
	if !ValidKey(e.Key()) {
		return "", nil, "", fmt.Errorf("events: invalid subject key %q for %s", e.Key(), e.EventType())
	}
	body, err := json.Marshal(e)
	if err != nil {
		return "", nil, "", err
	}
	u, err := uuid.NewV7()
	if err != nil {
		return "", nil, "", err
	}
	env := Envelope{ID: u.String(), Type: e.EventType(), Version: VersionOf(e.EventType()), Time: m.Time.UTC(), CausationID: m.CausationID, Data: body}
	if data, ok := appendEnvelope(make([]byte, 0, len(body)+160), &env); ok {
		return Subject(e), data, env.ID, nil
	}
	data, err = json.Marshal(env)
	return Subject(e), data, env.ID, err
}

// appendEnvelope writes env as json.Marshal does, byte for byte, without
// reflection and without compacting Data again (json.Marshal's output
// already is). ok is false for anything it does not write itself (a
// string that needs escaping, a time MarshalJSON refuses): json.Marshal
// then writes it, or returns its error.
func appendEnvelope(b []byte, env *Envelope) ([]byte, bool) {
	var ok bool
	if env.Origin != nil {
		return nil, false // only an import writes it, with encoding/json
	}
	b = append(b, `{"id":`...)
	if b, ok = appendPlainString(b, env.ID); !ok {
		return nil, false
	}
	b = append(b, `,"type":`...)
	if b, ok = appendPlainString(b, string(env.Type)); !ok {
		return nil, false
	}
	b = append(b, `,"v":`...)
	b = strconv.AppendInt(b, int64(env.Version), 10)
	b = append(b, `,"time":`...)
	t, err := env.Time.MarshalJSON()
	if err != nil {
		return nil, false
	}
	b = append(b, t...)
	if env.CausationID != "" {
		b = append(b, `,"causation_id":`...)
		if b, ok = appendPlainString(b, env.CausationID); !ok {
			return nil, false
		}
	}
	b = append(b, `,"data":`...)
	b = append(b, env.Data...)
	return append(b, '}'), true
}

// appendPlainString quotes s if it needs no escape in encoding/json's
// output (printable ASCII other than " \ < > &).
func appendPlainString(b []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return nil, false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}

// Record is one decoded entry of the log. Envelope.Data shares the bytes
// of the Stored it was decoded from.
type Record struct {
	Seq     uint64
	Subject string
	// Time is the log's own time of the record (the stream's stored
	// timestamp), set by DecodeRecord and ReadAll: the fold's clock. The
	// envelope's time is the writer's and is never trusted for order.
	Time     time.Time
	Envelope Envelope
	Event    Event
}

// Decode turns a stored message into a Record. Unknown types and newer
// schema versions decode to Unknown; only malformed JSON is an error (or
// an old version's payload its upcast refuses). An older version of a
// known type is upcast (upcast.go) to today's struct; Envelope.Version
// stays the version the record was written at (1 when it has none) and
// Envelope.Data its stored payload.
//
// The result is exactly encoding/json's (decodeSlow). A one-pass decoder
// without reflection (fastdecode.go) handles what Encode writes and gives
// up on anything unusual, which encoding/json then decodes.
func Decode(m Stored) (Record, error) {
	d := decoders.Get().(*decoder)
	r, err := d.Decode(m)
	decoders.Put(d)
	return r, err
}

// Decode is events.Decode with this decoder's intern table.
func (d *decoder) Decode(m Stored) (Record, error) {
	if r, ok := d.decode(m); ok {
		return r, nil
	}
	return decodeSlow(m)
}

// decodeSlow is Decode with encoding/json: the envelope, then the payload
// of a known type. It defines what Decode returns.
func decodeSlow(m Stored) (Record, error) {
	var env Envelope
	if err := json.Unmarshal(m.Data, &env); err != nil {
		return Record{}, fmt.Errorf("events: seq %d on %s: %w", m.Seq, m.Subject, err)
	}
	env.Version = storedVersion(env.Version)
	r := Record{Seq: m.Seq, Subject: m.Subject, Envelope: env}
	key := subjectKey(m.Subject)
	mk, ok := taskTypes[env.Type]
	if !ok {
		mk, ok = nodeTypes[env.Type]
	}
	if !ok || env.Version > VersionOf(env.Type) || env.Version < 1 {
		r.Event = Unknown{Type: env.Type, Version: env.Version, K: key, Raw: env.Data}
		return r, nil
	}
	data := []byte(env.Data)
	if env.Version < VersionOf(env.Type) {
		var err error
		if data, err = upcast(env.Type, env.Version, data); err != nil {
			return Record{}, fmt.Errorf("events: seq %d %s: %w", m.Seq, env.Type, err)
		}
	}
	p := mk()
	if err := json.Unmarshal(data, p); err != nil {
		return Record{}, fmt.Errorf("events: seq %d %s: %w", m.Seq, env.Type, err)
	}
	r.Event = deref(p)
	return r, nil
}

// subjectKey is the third token of a subject (the task id or node name).
func subjectKey(subj string) string {
	for range 2 {
		i := strings.IndexByte(subj, '.')
		if i < 0 {
			return ""
		}
		subj = subj[i+1:]
	}
	if i := strings.IndexByte(subj, '.'); i >= 0 {
		return subj[:i]
	}
	return subj
}

func deref(e Event) Event {
	switch v := e.(type) {
	case *Submitted:
		return *v
	case *Amended:
		return *v
	case *Cancelled:
		return *v
	case *ChecklistUpdated:
		return *v
	case *Dispatched:
		return *v
	case *Started:
		return *v
	case *PreemptRequested:
		return *v
	case *Checkpointed:
		return *v
	case *Preempted:
		return *v
	case *Requeued:
		return *v
	case *Completed:
		return *v
	case *Failed:
		return *v
	case *ProgressReported:
		return *v
	case *Available:
		return *v
	case *Unhealthy:
		return *v
	case *Drained:
		return *v
	case *Undrained:
		return *v
	case *Lost:
		return *v
	}
	return e
}
