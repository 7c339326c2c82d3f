package audit_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/audit"
	"github.com/gpuq/gpuq/pkg/events"
)

func jsonLine(l audit.Line) ([]byte, error) {
	b, err := json.Marshal(l)
	return append(b, '\n'), err
}

// ImportData adds the origin in front and keeps every other byte.
func TestImportData(t *testing.T) {
	when := time.Date(2026, 11, 29, 22, 17, 28, 851000000, time.UTC)
	env := `{"id":"e1","type":"completed","v":1,"time":"2026-11-29T22:17:28Z","data":{"task_id":"t1","node":"n1"}}`
	got := string(audit.ImportData(audit.Line{Seq: 7, Subject: "gpuq.task.t1.completed", Time: when, Data: json.RawMessage(env)}))
	want := `{"origin":{"seq":7,"time":"2026-11-29T22:17:28.851Z"},` + env[1:]
	if got != want {
		t.Fatalf("ImportData =\n%s\nwant\n%s", got, want)
	}
	again := string(audit.ImportData(audit.Line{Seq: 3, Time: when.Add(time.Hour), Data: json.RawMessage(got)}))
	if again != got {
		t.Errorf("a record imported before keeps its origin:\n%s", again)
	}
	r := events.DecodeRecord(events.Stored{Seq: 1, Subject: "gpuq.task.t1.completed", Data: []byte(got), Time: when.Add(48 * time.Hour)})
	if !r.Time.Equal(when) || r.Envelope.Origin == nil || r.Envelope.Origin.Seq != 7 {
		t.Errorf("imported record folds at %s with origin %+v", r.Time, r.Envelope.Origin)
	}
}

// A bad archive line is an error naming the line and the field.
func TestReadLinesErrors(t *testing.T) {
	cases := map[string]string{
		"not json":  "line 1:",
		`{"seq":0}`: "line 1: seq",
		`{"seq":1,"time":"2026-11-29T22:17:28Z","data":{}}`: "line 1: subject",
		`{"seq":1,"subject":"s","data":{}}`:                 "line 1: time",
		`{"seq":2,"subject":"s","time":"2026-11-29T22:17:28Z","data":{}}` + "\n" + `{"seq":2,"subject":"s","time":"2026-11-29T22:17:28Z","data":{}}`: "line 2: seq",
	}
	for in, want := range cases {
		_, err := audit.ReadLines(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadLines(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

// TestArchiveBounded: an archive line nested deeper than 64 levels is
// refused before it is decoded, and a record that deep in a log is
// exported as raw bytes, so that every export imports again.
func TestArchiveBounded(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	line := func(data string) string {
		return `{"seq":1,"subject":"gpuq.task.t1.completed","time":"2026-11-29T22:17:28Z","data":` + data + `}`
	}
	for name, tc := range map[string]struct {
		in, wantErr string
	}{
		"data nested 63 deep":      {in: line(deep(63))},
		"data nested 64 deep":      {in: line(deep(64)), wantErr: "line 1: must not nest arrays and objects deeper than 64 levels"},
		"a million brackets":       {in: strings.Repeat("[", 1<<20), wantErr: "line 1: must not nest"},
		"a deep line after a good": {in: line("{}") + "\n" + strings.Replace(line(deep(100)), `"seq":1`, `"seq":2`, 1), wantErr: "line 2: must not nest"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := audit.ReadLines(strings.NewReader(tc.in))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want …%s…", err, tc.wantErr)
			}
		})
	}
	for name, data := range map[string]string{"63 deep": deep(63), "64 deep": deep(64), "1000 deep": deep(1000)} {
		t.Run("export "+name, func(t *testing.T) {
			l := audit.LineOf(events.Stored{Seq: 1, Subject: "gpuq.task.t1.completed", Data: []byte(data), Time: time.Now()})
			b, err := jsonLine(l)
			if err != nil {
				t.Fatal(err)
			}
			ls, err := audit.ReadLines(strings.NewReader(string(b)))
			if err != nil || len(ls) != 1 || string(ls[0].Stored().Data) != data {
				t.Fatalf("export then import: %v", err)
			}
		})
	}
}
