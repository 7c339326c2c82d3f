package events

import (
	"fmt"
	"strings"
	"time"
)

// MaxRecordBytes bounds one record of the log. Nothing gpuq writes comes
// near it (the submitter refuses larger submissions); a larger record was
// published by someone else and is skipped unread.
const MaxRecordBytes = 512 << 10

// Invalid is what DecodeRecord returns for a record that cannot be folded:
// it does not decode, is larger than MaxRecordBytes, its envelope
// contradicts its subject (another type, another task or node, a subject
// outside the catalogue), or its task id is not one (ValidTaskID: a
// forged "x/y/z" would name nested directories on a node). Like Unknown it is never an error: every fold
// skips it, in the same way, at start-up and live, and the task its
// subject names still counts it for its expected sequence (JetStream
// counts every message on the task's subjects).
type Invalid struct {
	Type   Type   // the subject's last token
	K      string // the subject's key: the task id or node name
	Reason string
}

func (e Invalid) EventType() Type { return e.Type }
func (e Invalid) Key() string     { return e.K }

// DecodeRecord is Decode for a fold: it never fails. A record Decode
// refuses, or one whose envelope does not match its subject, comes back
// with an Invalid event that says why. Record.Time is the log's own time
// of the message (Stored.Time).
func DecodeRecord(m Stored) Record {
	d := decoders.Get().(*decoder)
	r := d.record(m)
	decoders.Put(d)
	return r
}

// record is DecodeRecord with this decoder's intern table.
func (d *decoder) record(m Stored) Record {
	if len(m.Data) > MaxRecordBytes {
		return invalid(m, fmt.Sprintf("record of %d bytes exceeds the limit of %d", len(m.Data), MaxRecordBytes))
	}
	r, err := d.Decode(m)
	if err != nil {
		return invalid(m, "undecodable: "+strings.TrimPrefix(err.Error(), "events: "))
	}
	r.Time = logTime(m.Time, r.Envelope.Origin)
	if why := mismatch(m.Subject, r); why != "" {
		return invalid(m, why)
	}
	return r
}

// logTime is a record's time on the fold's clock: the stream's stored
// time, or an imported record's original one (Envelope.Origin) when that
// is set and not after the stored time. An import happens after the
// original append, so an origin later than the stored time is no import:
// it is ignored, and no writer can push the fold's clock forward with it.
func logTime(stored time.Time, o *Origin) time.Time {
	if o == nil || o.Time.IsZero() || (!stored.IsZero() && o.Time.After(stored)) {
		return stored
	}
	return o.Time
}

func invalid(m Stored, why string) Record {
	return Record{Seq: m.Seq, Subject: m.Subject, Time: m.Time,
		Event: Invalid{Type: Type(lastToken(m.Subject)), K: subjectKey(m.Subject), Reason: why}}
}

// mismatch says how a decoded record contradicts its subject ("" when it
// does not): the subject must be the one Subject gives for the event.
func mismatch(subject string, r Record) string {
	var prefix string
	switch {
	case strings.HasPrefix(subject, TaskPrefix):
		prefix = TaskPrefix
	case strings.HasPrefix(subject, NodePrefix):
		prefix = NodePrefix
	default:
		return "subject outside gpuq.task.> and gpuq.node.>"
	}
	key := subjectKey(subject)
	if subject != prefix+key+"."+lastToken(subject) || !ValidKey(key) {
		return "subject is not " + prefix + "<key>.<type>"
	}
	if prefix == TaskPrefix && !ValidTaskID(key) {
		return fmt.Sprintf("task id %q is not a task id (1 to %d letters, digits, '-' and '_')", key, MaxTaskIDBytes)
	}
	if typ := Type(lastToken(subject)); r.Envelope.Type != typ {
		return fmt.Sprintf("envelope type %q on a %q subject", r.Envelope.Type, typ)
	}
	if _, unknown := r.Event.(Unknown); unknown {
		return ""
	}
	if _, isTask := taskTypes[r.Envelope.Type]; isTask != (prefix == TaskPrefix) {
		return fmt.Sprintf("type %q does not belong under %s", r.Envelope.Type, strings.TrimSuffix(prefix, "."))
	}
	if k := r.Event.Key(); k != key {
		return fmt.Sprintf("payload names %q, the subject %q", k, key)
	}
	return ""
}

func lastToken(subj string) string {
	if i := strings.LastIndexByte(subj, '.'); i >= 0 {
		return subj[i+1:]
	}
	return subj
}

// SkipReason says why a fold skips r without looking at any state: an
// Invalid record, or an Unknown type or version. "" for a record of a
// known type, which the fold itself judges.
func SkipReason(r Record) string {
	switch e := r.Event.(type) {
	case Invalid:
		return e.Reason
	case Unknown:
		if v := VersionOf(e.Type); e.Version > v {
			return fmt.Sprintf("schema version %d is newer than this build's %d", e.Version, v)
		}
		if e.Version < 1 {
			return fmt.Sprintf("schema version %d is not a version", e.Version)
		}
		return fmt.Sprintf("unknown event type %q", e.Type)
	}
	return ""
}

// At is the record's time on the fold's clock: the log's own time, or,
// for a record built in memory without one, the writer's.
func (r Record) At() time.Time {
	if !r.Time.IsZero() {
		return r.Time
	}
	return r.Envelope.Time
}
