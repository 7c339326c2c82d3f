package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/trace"
)

// TestProfileScenario is a manual profiling and analysis aid, skipped
// unless SIM_PROFILE is set. It runs the first SIM_PROFILE Philly jobs (0:
// all) on SIM_NODES 8-GPU nodes under SIM_POLICY (comma-separated), with
// estimates when SIM_EST is set, the estimate model SIM_MODEL (default the
// standard one), teams by VC (labels only, no guarantees) when SIM_TEAMS
// is set, the gpuq-spf knobs SIM_TAU and SIM_MAXWAIT, the backfill order
// SIM_BACKFILL and depth SIM_DEPTH, and the estimator's forward window SIM_WINDOW; it prints the
// metrics, timings and the average wait by real-duration bucket. E.g.
//
//	SIM_PROFILE=10000 SIM_NODES=72 SIM_POLICY=gpuq SIM_EST=1 \
//	  go test ./pkg/sim -run ProfileScenario -v -timeout 1h -cpuprofile cpu.out
//	go tool pprof -top -cum sim.test cpu.out
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
	model := os.Getenv("SIM_MODEL")
	if model == "" {
		model = DefaultEstimateModel
	}
	em, err := ParseEstimateModel(model)
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := Prepare(jobs, nodes*8, em, ClassMix{}, os.Getenv("SIM_TEAMS") != "")
	opts := policy.Options{}
	if s := os.Getenv("SIM_MAXWAIT"); s != "" {
		opts.MaxWait, _ = time.ParseDuration(s)
	}
	if s := os.Getenv("SIM_TAU"); s != "" {
		opts.AgingTau, _ = time.ParseDuration(s)
	}
	opts.Backfill = os.Getenv("SIM_BACKFILL")
	opts.BackfillDepth, _ = strconv.Atoi(os.Getenv("SIM_DEPTH"))
	window, _ := strconv.ParseFloat(os.Getenv("SIM_WINDOW"), 64)
	pols := strings.Split(os.Getenv("SIM_POLICY"), ",")
	cfg := Config{Nodes: nodes, GPUsPerNode: 8, Policies: pols, Estimates: os.Getenv("SIM_EST") != "", Epoch: time.Unix(0, 0).UTC(), Options: opts, EstimateWindow: window}
	t0 := time.Now()
	rep, err := Run(context.Background(), cfg, Scenario{}, tasks)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(rep.Result.Policies, "", " ")
	e, _ := json.Marshal(rep.Result.Estimates)
	fmt.Printf("model %s, %s: %s\n%s\n%+v %+v\n", model, time.Since(t0), b, e, rep.Timings.Policies, rep.Timings.Estimates)
	if we := rep.WaitEstimates; len(we) > 0 {
		q := func(f func(WaitEstimate) float64) string {
			xs := make([]float64, len(we))
			for i, w := range we {
				xs[i] = f(w)
			}
			slices.Sort(xs)
			return fmt.Sprintf("p10 %.0f p50 %.0f p90 %.0f", xs[len(xs)/10], xs[len(xs)/2], xs[len(xs)*9/10])
		}
		fmt.Printf("judged %d: actual %s | P50 %s | P90 %s | log((P50+60)/(actual+60))×100 %s\n", len(we),
			q(func(w WaitEstimate) float64 { return w.Actual.Seconds() }), q(func(w WaitEstimate) float64 { return w.P50.Seconds() }),
			q(func(w WaitEstimate) float64 { return w.P90.Seconds() }),
			q(func(w WaitEstimate) float64 { return 100 * math.Log((w.P50.Seconds()+60)/(w.Actual.Seconds()+60)) }))
	}
	buckets := []time.Duration{time.Minute, 10 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour, 1 << 62}
	for _, p := range pols {
		var sum [6]float64
		var cnt [6]int
		for i, w := range rep.Waits[p] {
			k := 0
			for tasks[i].Duration > buckets[k] {
				k++
			}
			sum[k] += w.Seconds()
			cnt[k]++
		}
		fmt.Printf("%-12s avg wait by real duration (≤1m ≤10m ≤1h ≤6h ≤1d >1d):", p)
		for k := range sum {
			fmt.Printf(" %.0f(%d)", sum[k]/float64(max(1, cnt[k])), cnt[k])
		}
		fmt.Println()
	}
}
