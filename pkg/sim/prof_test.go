package sim

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/trace"
)

// TestProfileScenario is a manual profiling aid: SIM_PROFILE=N runs the
// first N Philly jobs (0: all) on SIM_NODES nodes under SIM_POLICY.
func TestProfileScenario(t *testing.T) {
	v, ok := os.LookupEnv("SIM_PROFILE")
	if !ok {
		t.Skip("set SIM_PROFILE")
	}
	n, _ := strconv.Atoi(v)
	nodes, _ := strconv.Atoi(os.Getenv("SIM_NODES"))
	jobs, err := trace.Load("../../../shared/traces/philly/jobs-2017-10-11.csv", "philly")
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		jobs = jobs[:n]
	}
	em, _ := ParseEstimateModel(DefaultEstimateModel)
	tasks, _ := Prepare(jobs, nodes*8, em, ClassMix{}, false)
	cfg := Config{Nodes: nodes, GPUsPerNode: 8, Policies: []string{os.Getenv("SIM_POLICY")}, Estimates: os.Getenv("SIM_EST") != "", Epoch: time.Unix(0, 0).UTC(), Options: policy.Options{}}
	t0 := time.Now()
	rep, err := Run(context.Background(), cfg, Scenario{}, tasks)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %+v %+v", time.Since(t0), rep.Result.Policies, rep.Timings.Estimates)
}
