package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/audit"
	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/embedded"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
)

// Bad input to the audit commands is exit 2, naming the field.
func TestAuditUsage(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"replay without a point":   {[]string{"replay"}, "give exactly one of --seq and --at"},
		"replay with both points":  {[]string{"replay", "--seq", "3", "--at", "2026-11-29T22:17:28Z"}, "give exactly one of --seq and --at"},
		"replay at sequence 0":     {[]string{"replay", "--seq", "0"}, "seq: must be ≥ 1"},
		"replay at a bad time":     {[]string{"replay", "--at", "yesterday"}, "at: must be an RFC 3339 time"},
		"replay with a bad policy": {[]string{"replay", "--seq", "1", "--policy", "nice"}, `policy "nice"`},
		"explain without an id":    {[]string{"explain"}, "task_id: exactly one task id is required"},
		"import without a file":    {[]string{"audit", "import"}, "file: exactly one archive file is required"},
		"verify a missing file":    {[]string{"audit", "verify", "--file", "/nonexistent/archive.jsonl"}, "file: open"},
		"export since a bad time":  {[]string{"audit", "export", "--since", "monday"}, "since: must be an RFC 3339 time"},
		"dev with negative nodes":  {[]string{"dev", "--nodes", "-1"}, "nodes: must be ≥ 0"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(c.args, &out, &errb); code != exitInvalid {
				t.Errorf("exit %d, want %d (stderr %q)", code, exitInvalid, errb.String())
			}
			if !strings.Contains(errb.String(), c.want) {
				t.Errorf("stderr %q, want it to say %q", errb.String(), c.want)
			}
		})
	}
}

// audit verify, export, verify --file and import into an empty stream on
// embedded servers: the same digest everywhere, a second import refused.
func TestAuditExportImport(t *testing.T) {
	ctx := context.Background()
	open := func(name string) (*embedded.Server, *jetstream.Log) {
		srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(t.TempDir(), name), Port: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		nc, err := srv.Connect(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		l, err := jetstream.Open(ctx, nc, jetstream.StreamConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return srv, l
	}
	a, la := open("a")
	for _, e := range []events.Event{
		dt.Node("n1").GPUs(4).Available(),
		dt.Task().ID("hog").GPUs(4).Submitted(), dt.Dispatch("hog", dt.On("n1", 0, 1, 2, 3)), events.Started{TaskID: "hog", Node: "n1"},
		dt.Task().ID("w").GPUs(2).Priority(domain.High).Submitted(),
		events.Completed{TaskID: "hog", Node: "n1"}, dt.Dispatch("w", dt.On("n1", 0, 1)), events.Started{TaskID: "w", Node: "n1"},
	} {
		if _, err := events.Append(ctx, la, e, events.Meta{Time: time.Now()}, "", nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // distinct stored times
	}
	verify := func(args ...string) audit.Report {
		t.Helper()
		code, out := runCLI(t, append([]string{"audit", "verify", "--json"}, args...)...)
		var r audit.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
			t.Fatalf("verify %v: exit %d, %v: %s", args, code, err, out)
		}
		return r
	}
	live := verify("--nats", a.URL())
	if !live.OK || live.Events != 8 || live.DenyDelete == nil || !*live.DenyDelete || !*live.DenyPurge {
		t.Fatalf("live report %+v", live)
	}
	if live.Live != audit.LiveNone || live.LiveDigest != "" {
		t.Errorf("no scheduler runs here; the report says live %q (digest %q)", live.Live, live.LiveDigest)
	}
	code, archive := runCLI(t, "audit", "export", "--nats", a.URL())
	if code != 0 || strings.Count(archive, "\n") != 8 {
		t.Fatalf("export: exit %d, %d lines", code, strings.Count(archive, "\n"))
	}
	file := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(file, []byte(archive), 0o600); err != nil {
		t.Fatal(err)
	}
	if off := verify("--file", file); off.Digest != live.Digest || off.DenyDelete != nil || off.Live != audit.LiveArchive {
		t.Fatalf("the archive's digest %s, the log's %s; live %q", off.Digest, live.Digest, off.Live)
	}
	b, _ := open("b")
	if code, out := runCLI(t, "audit", "import", file, "--nats", b.URL()); code != 0 {
		t.Fatalf("import: exit %d: %s", code, out)
	}
	if got := verify("--nats", b.URL()); got.Digest != live.Digest {
		t.Fatalf("digest after import %s, before %s", got.Digest, live.Digest)
	}
	if code, _ := runCLI(t, "audit", "import", file, "--nats", b.URL()); code != exitInvalid {
		t.Errorf("a second import into a stream that is not empty (refused): exit %d, want %d", code, exitInvalid)
	}
	code, out := runCLI(t, "replay", "--seq", "5", "--json", "--nats", b.URL())
	var v audit.View
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || len(v.Tasks) != 2 || v.Tasks[0].TaskID != "w" || v.Tasks[0].State != "queued" {
		t.Errorf("replay --seq 5 on the import: exit %d, %v: %s", code, err, out)
	}
	code, out = runCLI(t, "explain", "w", "--json", "--nats", b.URL())
	var ex audit.Explanation
	err := json.Unmarshal([]byte(out), &ex)
	blocked := false // the stored times are milliseconds apart: find the part, whatever its rank
	for _, p := range ex.Parts {
		blocked = blocked || p.Cause == audit.CauseCapacity && len(p.Blocking) == 1 && p.Blocking[0] == "hog"
	}
	if err != nil || code != 0 || !blocked {
		t.Errorf("explain w on the import: exit %d, %v: %s", code, err, out)
	}
	if code, _ := runCLI(t, "explain", "nope", "--nats", b.URL()); code != exitNotFound {
		t.Errorf("explain of an unknown task: exit %d, want %d", code, exitNotFound)
	}
}

// verified checks the stack's whole log with the audit's verifier: the
// logs of the end-to-end tests break no invariant.
func (s *stack) verified() {
	s.t.Helper()
	// The live scheduler's digest (read before the log, as gpuq audit
	// verify does), when one leads, must be the replay's.
	live, _ := liveDigest(context.Background(), s.log.JetStream())
	var recs []events.Record
	if _, err := events.ReadAll(context.Background(), s.log, 1, "", func(r events.Record) error { recs = append(recs, r); return nil }); err != nil {
		s.t.Fatal(err)
	}
	if rep := audit.Verify(recs, audit.Options{Live: live}); !rep.OK {
		s.t.Errorf("audit verify of the test's log: %+v", rep.Violations)
	}
}
