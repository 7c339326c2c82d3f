package main

import (
	"bytes"
	"encoding/json"
	"errors"
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
	run := func(args ...string) ([]byte, []byte, int) {
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
