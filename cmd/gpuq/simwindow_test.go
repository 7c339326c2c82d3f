package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/sim"
)

// TestSimWindowCLI cuts a small two-month Philly-format trace: --split
// month gives one result per month and the whole; each part is, byte for
// byte, what --from/--until of its window gives (as dates and as
// offsets); the whole is the run without a window; and invalid windows
// are exit 2, naming the flag.
func TestSimWindowCLI(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	tr := filepath.Join(dir, "jobs.csv")
	csv := "submit_time,duration_s,num_gpus,vc\n" +
		"2017-10-30 23:00:00,7200,8,a\n" + // runs into November: not in November's window
		"2017-10-30 23:10:00,600,8,b\n" +
		"2017-10-31 23:59:59,3600,4,a\n" +
		"2017-11-01 00:00:00,600,8,b\n" + // November's first: its run starts on an empty cluster
		"2017-11-01 00:05:00,1200,8,a\n" +
		"2017-11-01 00:06:00,60,16,a\n" + // larger than the cluster
		"2017-11-02 10:00:00,300,2,b\n"
	if err := os.WriteFile(tr, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vcs.csv"), []byte("vc,nodes,gpus_per_node\na,1,8\nb,1,8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := simRunner(t, bin)
	ok := func(args ...string) []byte {
		t.Helper()
		out, stderr, code := run(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		return out
	}
	base := []string{"--trace", tr, "--format", "philly", "--nodes", "1", "--compare", "sjf-oracle,gpuq", "--teams", "vc", "--json"}

	var split simSplit
	if err := json.Unmarshal(ok(append(base, "--split", "month")...), &split); err != nil {
		t.Fatal(err)
	}
	type part struct {
		name              string
		jobs, unplaceable int
		from, until       string // the dates
		fromOff, untilOff string // the same as offsets from the first submission (2017-10-30 23:00:00)
	}
	want := []part{
		{"2017-10", 3, 0, "2017-10-01T00:00:00Z", "2017-11-01", "", ""}, // an offset cannot reach back to 1 October
		{"2017-11", 3, 1, "2017-11-01", "2017-12-01T00:00:00Z", "25h", "745h"},
	}
	if len(split.Split) != len(want) {
		t.Fatalf("%d parts, want %d", len(split.Split), len(want))
	}
	for i, w := range want {
		r := split.Split[i]
		if r.Scenario.Window == nil || r.Scenario.Window.Name != w.name || r.Jobs != w.jobs || r.Scenario.Unplaceable != w.unplaceable {
			t.Errorf("part %d: window %v, %d jobs, %d left out; want %s, %d, %d", i, r.Scenario.Window, r.Jobs, r.Scenario.Unplaceable, w.name, w.jobs, w.unplaceable)
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
		// The part's window as --from/--until, by date and by offset,
		// gives the same run with the part's name left out.
		r.Scenario.Window.Name = ""
		b.Reset()
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
		for _, bounds := range [][2]string{{w.from, w.until}, {w.fromOff, w.untilOff}} {
			if bounds[0] == "" {
				continue
			}
			alone := ok(append(base, "--from", bounds[0], "--until", bounds[1])...)
			if !bytes.Equal(b.Bytes(), alone) {
				t.Errorf("part %s differs from --from %s --until %s:\n%s\nalone:\n%s", w.name, bounds[0], bounds[1], b.Bytes(), alone)
			}
		}
	}
	var whole bytes.Buffer
	enc := json.NewEncoder(&whole)
	enc.SetIndent("", "  ")
	if err := enc.Encode(split.Whole); err != nil {
		t.Fatal(err)
	}
	if alone := ok(base...); !bytes.Equal(whole.Bytes(), alone) {
		t.Errorf("the split's whole differs from the run without a window:\n%s\nalone:\n%s", whole.Bytes(), alone)
	}
	if split.Whole.Scenario.Window != nil || split.Whole.Jobs != 6 {
		t.Errorf("whole: window %v, %d jobs; want none, 6", split.Whole.Scenario.Window, split.Whole.Jobs)
	}
	var nov sim.Result
	if err := json.Unmarshal(ok(append(base, "--from", "2017-11-01", "--compare", "fifo-strict")...), &nov); err != nil {
		t.Fatal(err)
	}
	// November starts on an empty cluster, without October's 4-GPU job
	// that runs into it. By hand (fifo-strict, 8 GPUs): 00:00 8 GPUs for
	// 600 s; 00:05 8 GPUs waits until 00:10 (300 s); 2 November alone.
	// Average queue 100 s.
	if got := nov.Policies["fifo-strict"].AvgQueue; got != 100 {
		t.Errorf("November from an empty cluster: fifo-strict avg queue %v s, want 100", got)
	}

	// Halves: the first ends 15.5 days after the first submission.
	if err := json.Unmarshal(ok(append(base, "--split", "2")...), &split); err != nil {
		t.Fatal(err)
	}
	if len(split.Split) != 2 || split.Split[0].Scenario.Window.Name != "1/2" || split.Split[0].Jobs+split.Split[1].Jobs != 6 {
		t.Errorf("halves: %d parts, %v", len(split.Split), split.Split)
	}
	text, stderr, code := run("--trace", tr, "--format", "philly", "--nodes", "1", "--compare", "gpuq", "--split", "month")
	if code != 0 || !strings.Contains(string(text), "=== part 2017-11 ===") || !strings.Contains(string(text), "=== the whole trace ===") ||
		!strings.Contains(string(text), "on an empty cluster") {
		t.Errorf("text: exit %d %s\n%s", code, stderr, text)
	}

	openb := filepath.Join(dir, "pods.csv")
	if err := os.WriteFile(openb, []byte("name,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"+
		"p0,1,1000,,LS,Running,0,600,0\np1,1,1000,,LS,Running,100,900,100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	invalid := map[string]struct {
		args  []string
		field string
	}{
		"from not a date":         {args: []string{"--from", "2017-13-01"}, field: "from"},
		"from negative":           {args: []string{"--from", "-1h"}, field: "from"},
		"until garbage":           {args: []string{"--until", "soon"}, field: "until"},
		"until before from":       {args: []string{"--from", "2017-11-01", "--until", "2017-10-31"}, field: "until"},
		"until at from":           {args: []string{"--from", "25h", "--until", "25h"}, field: "until"},
		"window without jobs":     {args: []string{"--from", "2017-11-03", "--until", "2017-11-20"}, field: "until"},
		"from after the trace":    {args: []string{"--from", "745h"}, field: "from"},
		"split and from":          {args: []string{"--split", "month", "--from", "1h"}, field: "split"},
		"split of one":            {args: []string{"--split", "1"}, field: "split"},
		"split by week":           {args: []string{"--split", "week"}, field: "split"},
		"split with an empty one": {args: []string{"--split", "40"}, field: "split"},
		"split of a sweep":        {args: []string{"--split", "2", "--nodes", "1,2"}, field: "split"},
		"a date without a clock":  {args: []string{"--trace", openb, "--format", "alibaba-openb", "--from", "2017-11-01"}, field: "from"},
		"months without a clock":  {args: []string{"--trace", openb, "--format", "alibaba-openb", "--split", "month"}, field: "split"},
		"split with plots":        {args: []string{"--split", "2", "--plot", filepath.Join(dir, "plots")}, field: "plot"},
	}
	for name, tt := range invalid {
		t.Run(name, func(t *testing.T) {
			args := []string{"--compare", "gpuq"}
			if !slices.Contains(tt.args, "--trace") {
				args = append(args, "--trace", tr, "--format", "philly")
			}
			if !slices.Contains(tt.args, "--nodes") {
				args = append(args, "--nodes", "1")
			}
			args = append(args, tt.args...)
			_, stderr, code := run(args...)
			if code != exitInvalid || !strings.HasPrefix(string(stderr), "gpuq: "+tt.field+":") {
				t.Errorf("exit %d, stderr %q; want exit %d naming %q", code, stderr, exitInvalid, tt.field)
			}
		})
	}
}
