package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/jsonguard"
)

// Line is one record of an archive (`gpuq audit export`, JSON Lines):
// its sequence, subject and log time (Record.Time: the stream's stored
// time, or an imported record's original one), and the stored bytes —
// the envelope as JSON in data, or, for a record that is not JSON (or
// nests deeper than an archive line may: jsonguard.MaxDepth in all), the
// bytes in raw (base64).
type Line struct {
	Seq     uint64          `json:"seq"`
	Subject string          `json:"subject"`
	Time    time.Time       `json:"time"`
	Data    json.RawMessage `json:"data,omitempty"`
	Raw     []byte          `json:"raw,omitempty"`
}

// LineOf is the archive line of a stored message, with the log time its
// record folds at.
func LineOf(m events.Stored) Line {
	l := Line{Seq: m.Seq, Subject: m.Subject, Time: events.DecodeRecord(m).Time.UTC()}
	if jsonguard.CheckDepth(m.Data, jsonguard.MaxDepth-1) == nil {
		l.Data = append(json.RawMessage(nil), m.Data...)
	} else {
		l.Raw = append([]byte(nil), m.Data...)
	}
	return l
}

// Stored is the line as the original log held it: the bytes it stored,
// at the time the record folds at.
func (l Line) Stored() events.Stored {
	data := []byte(l.Data)
	if l.Raw != nil {
		data = l.Raw
	}
	return events.Stored{Seq: l.Seq, Subject: l.Subject, Data: data, Time: l.Time}
}

// ReadLines reads an archive. A line that is not an archive line is an
// error naming its line number; an archive's sequences must increase. A
// line is checked in one bounded pass before it is decoded: nested at most
// jsonguard.MaxDepth levels, so that its work and memory are linear in
// its length.
func ReadLines(r io.Reader) ([]Line, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 2*events.MaxRecordBytes+4096)
	var out []Line
	n := 0
	for sc.Scan() {
		n++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if err := jsonguard.CheckDepth(b, jsonguard.MaxDepth); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		var l Line
		if err := json.Unmarshal(b, &l); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		switch {
		case l.Seq == 0:
			return nil, fmt.Errorf("line %d: seq: must be ≥ 1", n)
		case l.Subject == "":
			return nil, fmt.Errorf("line %d: subject: must not be empty", n)
		case l.Time.IsZero():
			return nil, fmt.Errorf("line %d: time: must be set", n)
		case len(l.Data) == 0 && l.Raw == nil:
			return nil, fmt.Errorf("line %d: data: must be set (or raw)", n)
		case len(out) > 0 && l.Seq <= out[len(out)-1].Seq:
			return nil, fmt.Errorf("line %d: seq: %d does not follow %d", n, l.Seq, out[len(out)-1].Seq)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	return out, nil
}

// Records decodes an archive's lines as a fold reads them.
func Records(ls []Line) []events.Record {
	out := make([]events.Record, len(ls))
	for i, l := range ls {
		out[i] = events.DecodeRecord(l.Stored())
	}
	return out
}

// ImportData is the bytes an import appends for a line: the stored
// envelope with "origin" (events.Origin: the original sequence and log
// time) added as its first key, every other byte as it was — the payload,
// the id, the writer's time. An envelope that has an origin already (a
// record imported before) keeps it, and a record that is not a JSON
// object is appended as it was: it folds as the invalid record it is.
func ImportData(l Line) []byte {
	if l.Raw != nil {
		return l.Raw
	}
	b := bytes.TrimLeft(l.Data, " \t\r\n")
	if len(b) == 0 || b[0] != '{' {
		return l.Data
	}
	var probe struct {
		Origin json.RawMessage `json:"origin"`
	}
	if json.Unmarshal(b, &probe) != nil || probe.Origin != nil {
		return l.Data
	}
	t, _ := l.Time.UTC().MarshalJSON()
	out := make([]byte, 0, len(b)+80)
	out = append(out, `{"origin":{"seq":`...)
	out = strconv.AppendUint(out, l.Seq, 10)
	out = append(out, `,"time":`...)
	out = append(out, t...)
	out = append(out, '}')
	rest := bytes.TrimLeft(b[1:], " \t\r\n")
	if len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...)
}
