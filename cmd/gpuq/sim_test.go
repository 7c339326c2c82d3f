package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/sim"
)

// TestSimCLI runs `gpuq sim` on a small Philly-format trace: JSON twice
// (identical bytes), the text table, plots, and invalid flags (exit 2,
// naming the field).
func TestSimCLI(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	tr := filepath.Join(dir, "jobs.csv")
	csv := "submit_time,duration_s,num_gpus,vc\n" +
		"2017-10-01 00:00:00,3600,8,a\n" +
		"2017-10-01 00:00:10,600,12,b\n" +
		"2017-10-01 00:00:20,60,1,a\n" +
		"2017-10-01 00:01:00,1200,2,b\n" +
		"2017-10-01 00:02:00,30,1,a\n" +
		"2017-10-01 00:03:00,90000,64,a\n"
	if err := os.WriteFile(tr, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vcs.csv"), []byte("vc,nodes,gpus_per_node\na,1,8\nb,1,8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := simRunner(t, bin)
	base := []string{"--trace", tr, "--format", "philly", "--nodes", "2", "--compare", "fifo-strict,sjf-oracle,gpuq,gpuq-spf", "--teams", "vc"}

	a, errA, code := run(append(base, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errA)
	}
	b, _, _ := run(append(base, "--json")...)
	if !bytes.Equal(a, b) {
		t.Errorf("two runs differ:\n%s\n%s", a, b)
	}
	var r sim.Result
	if err := json.Unmarshal(a, &r); err != nil {
		t.Fatalf("%v\n%s", err, a)
	}
	if r.Jobs != 5 || r.Scenario.Unplaceable != 1 || len(r.Policies) != 4 || len(r.Estimates) != 3 {
		t.Errorf("jobs %d, unplaceable %d, %d policies, %d estimators; want 5, 1 (64 GPUs on 16), 4, 3",
			r.Jobs, r.Scenario.Unplaceable, len(r.Policies), len(r.Estimates))
	}
	// fifo-strict by hand: the 8-GPU job at 0 on node 1; the 12-GPU job
	// waits for it (3600 s) and blocks the rest behind it.
	if got := r.Policies["fifo-strict"].MaxQueue; got != 3590 {
		t.Errorf("fifo-strict max queue %v s, want 3590", got)
	}

	plots := filepath.Join(dir, "plots")
	text, errText, code := run(append(base, "--plot", plots)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errText)
	}
	for _, want := range []string{"fifo-strict", "gpuq-spf", "slurm-backfill", "P90 coverage"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
	for _, f := range []string{sim.PlotQueueLength, sim.PlotDelayCDF} {
		if _, err := os.Stat(filepath.Join(plots, f)); err != nil {
			t.Error(err)
		}
	}

	invalid := map[string]struct {
		args  []string
		field string
	}{
		"no trace":           {args: []string{"--format", "philly", "--nodes", "2"}, field: "trace"},
		"bad format":         {args: []string{"--trace", tr, "--format", "slurm", "--nodes", "2"}, field: "format"},
		"no nodes":           {args: []string{"--trace", tr, "--format", "philly"}, field: "nodes"},
		"unknown policy":     {args: append(base[:6:6], "--compare", "fifo,gpuq"), field: "compare"},
		"bad estimate model": {args: append(base[:6:6], "--estimate-model", "lognormal:sigma=-1"), field: "estimate-model"},
		"bad progress model": {args: append(base[:6:6], "--progress-model", "share=2"), field: "progress-model"},
		"progress model key": {args: append(base[:6:6], "--progress-model", "share=0.5,late=1"), field: "progress-model"},
		"bad class mix":      {args: append(base[:6:6], "--class-mix", "high=0.3"), field: "class-mix"},
		"bad within-class":   {args: append(base[:6:6], "--within-class", "random"), field: "within-class"},
		"teams without VCs":  {args: []string{"--trace", tr, "--format", "alibaba-openb", "--nodes", "2", "--teams", "vc"}, field: "teams"},
		"missing trace file": {args: []string{"--trace", filepath.Join(dir, "nope.csv"), "--format", "philly", "--nodes", "2"}, field: "trace"},
	}
	for name, tt := range invalid {
		t.Run(name, func(t *testing.T) {
			_, stderr, code := run(tt.args...)
			if code != exitInvalid || !strings.Contains(string(stderr), tt.field) {
				t.Errorf("exit %d, stderr %q; want exit %d naming %q", code, stderr, exitInvalid, tt.field)
			}
		})
	}
}

// TestSimWorkloadCLI runs `gpuq sim` with no trace file: a synthetic
// workload swept over two sizes (each entry of the sweep is, byte for
// byte, the result of a run at that size alone), its text and plots; an
// export of a log (the audit package's frozen archive); and the invalid
// flags of these modes (exit 2, naming the field).
func TestSimWorkloadCLI(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	run := simRunner(t, bin)
	const workload = "synthetic:jobs=120,seed=1,gpus=16"
	base := []string{"--workload", workload, "--compare", "fifo-strict,gpuq", "--class-mix", "high=0.5,low=0.5,seed=1"}

	out, errOut, code := run(append(base, "--nodes", "4,2", "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var sw sim.SweepResult
	if err := json.Unmarshal(out, &sw); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(sw.Sweep) != 2 || sw.Sweep[0].Nodes != 2 || sw.Sweep[1].Nodes != 4 {
		t.Fatalf("sweep of %d entries, want nodes 2 then 4:\n%s", len(sw.Sweep), out)
	}
	for _, e := range sw.Sweep {
		single, errOut, code := run(append(base, "--nodes", fmt.Sprint(e.Nodes), "--json")...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(e.Result); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), single) {
			t.Errorf("sweep entry for %d nodes differs from the run at that size:\n%s\nalone:\n%s", e.Nodes, b.Bytes(), single)
		}
		if e.Scenario.Trace != "synthetic:jobs=120,seed=1,load=0.82,gpus=16,mix=philly" || e.Scenario.Format != "synthetic" || e.Jobs != 120 {
			t.Errorf("%d nodes: trace %q (%s), %d jobs", e.Nodes, e.Scenario.Trace, e.Scenario.Format, e.Jobs)
		}
	}
	if got := sw.Sweep[0].Scenario.OfferedLoad; got != 0.82 {
		t.Errorf("offered load on the smallest cluster %v, want 0.82 (the workload's load)", got)
	}

	plots := filepath.Join(dir, "plots")
	text, errText, code := run(append(base, "--nodes", "2,4", "--plot", plots)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errText)
	}
	for _, want := range []string{"clusters of 2, 4 nodes", "left out", "queueing delay by class", "low"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
	for _, f := range []string{sim.PlotSweepWait, sim.PlotSweepJCT, sim.PlotSweepWaitByClass} {
		if _, err := os.Stat(filepath.Join(plots, f)); err != nil {
			t.Error(err)
		}
	}

	archive, err := filepath.Abs("../../pkg/audit/testdata/archive-v1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code = run("--trace", archive, "--format", "audit-export", "--nodes", "1", "--json")
	if code != 0 {
		t.Fatalf("audit-export: exit %d: %s", code, errOut)
	}
	var r sim.Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Jobs != 1 || r.Scenario.ClassMix != "from the log" || r.Policies["gpuq"].AvgJCT != 104 {
		t.Errorf("audit-export: %d jobs, classes %q, gpuq avg JCT %v; want 1 (the completed task), from the log, 104 s", r.Jobs, r.Scenario.ClassMix, r.Policies["gpuq"].AvgJCT)
	}

	// --export: the gpuq run's log as gpuq audit export writes it; audit
	// verify passes it, and its replay on the same cluster is the same
	// schedule (the same average JCT, to the hundredth of a second).
	exported := filepath.Join(dir, "sim-log.jsonl")
	out, errOut, code = run(append(base, "--nodes", "2", "--json", "--export", exported)...)
	if code != 0 {
		t.Fatalf("--export: exit %d: %s", code, errOut)
	}
	var first sim.Result
	if err := json.Unmarshal(out, &first); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	verify := exec.Command(bin, "audit", "verify", "--file", exported)
	if b, err := verify.CombinedOutput(); err != nil || !strings.Contains(string(b), "0 violations") {
		t.Errorf("audit verify --file of the export: %v\n%s", err, b)
	}
	out, errOut, code = run("--trace", exported, "--format", "audit-export", "--nodes", "2", "--compare", "gpuq", "--json")
	if code != 0 {
		t.Fatalf("replaying the export: exit %d: %s", code, errOut)
	}
	var again sim.Result
	if err := json.Unmarshal(out, &again); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if again.Jobs != 120 || again.Policies["gpuq"].AvgJCT != first.Policies["gpuq"].AvgJCT {
		t.Errorf("the export replayed: %d jobs, gpuq avg JCT %v; want 120 and the exported run's %v", again.Jobs, again.Policies["gpuq"].AvgJCT, first.Policies["gpuq"].AvgJCT)
	}

	invalid := map[string]struct {
		args  []string
		field string
	}{
		"export of a sweep":      {args: []string{"--workload", workload, "--nodes", "2,4", "--export", exported}, field: "export"},
		"export of a split":      {args: []string{"--workload", workload, "--nodes", "2", "--split", "2", "--export", exported}, field: "export"},
		"export to no directory": {args: []string{"--workload", workload, "--nodes", "2", "--compare", "fifo-strict", "--export", filepath.Join(dir, "no", "such", "dir.jsonl")}, field: "export"},
		"trace and workload":     {args: []string{"--workload", workload, "--trace", archive, "--nodes", "2"}, field: "workload"},
		"workload with format":   {args: []string{"--workload", workload, "--format", "philly", "--nodes", "2"}, field: "format"},
		"bad workload":           {args: []string{"--workload", "synthetic:jobs=0", "--nodes", "2"}, field: "workload"},
		"unknown workload key":   {args: []string{"--workload", "synthetic:jobs=5,rate=2", "--nodes", "2"}, field: "workload"},
		"no nodes":               {args: []string{"--workload", workload}, field: "nodes"},
		"zero nodes in a sweep":  {args: []string{"--workload", workload, "--nodes", "2,0"}, field: "nodes"},
		"a size twice":           {args: []string{"--workload", workload, "--nodes", "2,4,2"}, field: "nodes"},
		"teams without VCs":      {args: []string{"--workload", workload + ",mix=alibaba", "--nodes", "2", "--teams", "vc"}, field: "teams"},
		"export with class mix":  {args: []string{"--trace", archive, "--format", "audit-export", "--nodes", "1", "--class-mix", "low=1"}, field: "class-mix"},
		"export with estimates":  {args: []string{"--trace", archive, "--format", "audit-export", "--nodes", "1", "--estimate-model", "exact"}, field: "estimate-model"},
		"export not an archive":  {args: []string{"--trace", filepath.Join(dir, "plots", sim.PlotSweepWait), "--format", "audit-export", "--nodes", "1"}, field: "trace"},
		"export file is missing": {args: []string{"--trace", filepath.Join(dir, "nope.jsonl"), "--format", "audit-export", "--nodes", "1"}, field: "trace"},
	}
	for name, tt := range invalid {
		t.Run(name, func(t *testing.T) {
			_, stderr, code := run(tt.args...)
			if code != exitInvalid || !strings.Contains(string(stderr), tt.field) {
				t.Errorf("exit %d, stderr %q; want exit %d naming %q", code, stderr, exitInvalid, tt.field)
			}
		})
	}
}

// simRunner runs `bin sim ARGS…` and returns its stdout, stderr and exit
// code.
func simRunner(t *testing.T, bin string) func(args ...string) ([]byte, []byte, int) {
	return func(args ...string) ([]byte, []byte, int) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, append([]string{"sim"}, args...)...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			return stdout.Bytes(), stderr.Bytes(), ee.ExitCode()
		case err != nil:
			t.Fatal(err)
		}
		return stdout.Bytes(), stderr.Bytes(), 0
	}
}
