package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/sim"
)

// TestSimFaultCLI: `gpuq sim --fault` measures the alarm on a faulted run
// against the healthy one (estimates.gpuq.alarms), and bad --fault and
// --alarms flags exit 2 naming the flag and the rule.
func TestSimFaultCLI(t *testing.T) {
	bin := buildCLI(t)
	run := simRunner(t, bin)
	base := []string{"--workload", "synthetic:jobs=200,seed=3", "--nodes", "4", "--compare", "gpuq"}
	out, errOut, code := run(append(base, "--fault", "stall@24h+2h", "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r sim.Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	a := r.Estimates[sim.EstGPUQ].Alarms
	if a == nil || len(a.Faults) != 1 || a.Faults[0].N == 0 || a.Faults[0].Fault.Kind != sim.FaultStall || a.Faults[0].Fault.AtS != 24*3600 {
		t.Fatalf("alarms %+v, want the healthy run's and one stall's", a)
	}

	invalid := map[string]struct {
		args       []string
		field, why string
	}{
		"fault without kind":       {args: append(base[:6:6], "--fault", "240h+3h"), field: "fault", why: "KIND@OFFSET+DURATION"},
		"unknown fault":            {args: append(base[:6:6], "--fault", "crash@1h+1h"), field: "fault", why: "unknown kind"},
		"fault without duration":   {args: append(base[:6:6], "--fault", "stall@1h"), field: "fault", why: "OFFSET+DURATION"},
		"zero duration":            {args: append(base[:6:6], "--fault", "stall@1h+0s"), field: "fault", why: "> 0"},
		"nodes-down without count": {args: append(base[:6:6], "--fault", "nodes-down@1h+1h"), field: "fault", why: "node count"},
		"every node down":          {args: append(base[:6:6], "--fault", "nodes-down@1h+1h:4"), field: "fault", why: "fewer than the cluster's nodes"},
		"a fault twice":            {args: append(base[:6:6], "--fault", "stall@1h+1h", "--fault", "stall@1h+1h"), field: "fault", why: "twice"},
		"fault without gpuq":       {args: []string{"--workload", "synthetic:jobs=20,seed=3", "--nodes", "4", "--compare", "fifo-strict", "--fault", "stall@1h+1h"}, field: "fault", why: "gpuq run with estimates"},
		"alarms without estimates": {args: append(base[:6:6], "--alarms", "--estimates=false"), field: "alarms", why: "with estimates"},
	}
	for name, tt := range invalid {
		t.Run(name, func(t *testing.T) {
			_, stderr, code := run(tt.args...)
			if code != exitInvalid || !strings.Contains(string(stderr), tt.field) || !strings.Contains(string(stderr), tt.why) {
				t.Errorf("exit %d, stderr %q; want exit %d naming %q and %q", code, stderr, exitInvalid, tt.field, tt.why)
			}
		})
	}
}
