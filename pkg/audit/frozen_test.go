package audit_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/audit"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

var update = flag.Bool("update", false, "rewrite testdata/archive-v1.jsonl")

// frozenLog is the log behind testdata/archive-v1.jsonl: the capacity case
// of TestExplain.
func frozenLog() []events.Record {
	return newTimed().
		at(0, dt.Node("n1").GPUs(4).Available(), task("hog").GPUs(4).Submitted(), dt.Dispatch("hog", dt.On("n1", 0, 1, 2, 3)), started("hog", "n1")).
		at(4, task("q").GPUs(4).Submitted()).
		at(104, completed("hog", "n1")).
		at(105, dt.Dispatch("q", dt.On("n1", 0, 1, 2, 3))).
		at(106, started("q", "n1")).recs()
}

// TestFrozenArchive: an archive written by this version of `gpuq audit
// export` of a log that was itself imported once (every envelope carries
// its origin) must read, fold at its original times and explain the same
// forever. Never edit the file; a new archive version gets a new one.
func TestFrozenArchive(t *testing.T) {
	path := filepath.Join("testdata", "archive-v1.jsonl")
	if *update {
		var buf bytes.Buffer
		for _, m := range stored(t, frozenLog()) {
			l := audit.LineOf(m)
			imported := events.Stored{Seq: l.Seq, Subject: l.Subject, Data: audit.ImportData(l), Time: l.Time.Add(30 * 24 * time.Hour)}
			b, err := jsonLine(audit.LineOf(imported))
			if err != nil {
				t.Fatal(err)
			}
			buf.Write(b)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	ls, err := audit.ReadLines(fh)
	if err != nil {
		t.Fatal(err)
	}
	recs := audit.Records(ls)
	if len(recs) != 8 {
		t.Fatalf("%d records, want 8", len(recs))
	}
	for i, r := range recs {
		if r.Envelope.Origin == nil || r.Envelope.Origin.Seq != r.Seq || !r.Time.Equal(frozenLog()[i].Envelope.Time) {
			t.Errorf("record %d: origin %+v, time %s; want its own sequence and %s", r.Seq, r.Envelope.Origin, r.Time, frozenLog()[i].Envelope.Time)
		}
	}
	if rep := audit.Verify(recs, audit.Options{}); !rep.OK || len(rep.Skipped) != 0 {
		t.Errorf("verify: %+v", rep)
	}
	ex, err := audit.Explain(recs, policy.New(policy.Options{}), "q")
	if err != nil {
		t.Fatal(err)
	}
	want := []audit.Part{{Cause: audit.CauseCapacity, S: 100, Blocking: []string{"hog"}},
		{Cause: audit.CauseNoScheduler, S: 1, Blocking: []string{}}, {Cause: audit.CauseStarting, S: 1, Blocking: []string{}}}
	if d := cmp.Diff(want, ex.Parts); d != "" {
		t.Errorf("explain q (-want +got):\n%s", d)
	}
}
