package sim

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/trace"
)

func TestParseProgressModel(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    ProgressModel
		wantErr bool
	}{
		"empty":          {in: "", want: ProgressModel{Every: DefaultProgressEvery, Seed: 1}},
		"off":            {in: "off", want: ProgressModel{Every: DefaultProgressEvery, Seed: 1}},
		"the issue's":    {in: "share=0.5,early=0.25,seed=1", want: ProgressModel{Share: 0.5, Early: 0.25, Every: DefaultProgressEvery, Seed: 1}},
		"every":          {in: "share=1,every=5m,seed=7", want: ProgressModel{Share: 1, Every: 5 * time.Minute, Seed: 7}},
		"share above 1":  {in: "share=1.5", wantErr: true},
		"early negative": {in: "share=0.5,early=-0.1", wantErr: true},
		"share NaN":      {in: "share=NaN", wantErr: true},
		"every too fine": {in: "share=0.5,every=1ms", wantErr: true},
		"unknown key":    {in: "share=0.5,late=0.1", wantErr: true},
		"bad seed":       {in: "share=0.5,seed=-1", wantErr: true},
		"no value":       {in: "share", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseProgressModel(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// progressWorkload is `--workload synthetic:jobs=300,seed=1` on 2 × 8
// GPUs, every task MEDIUM, with estimates.
func progressWorkload(t testing.TB) (Config, Scenario, []Task) {
	t.Helper()
	syn, err := trace.ParseSynthetic("synthetic:jobs=300,seed=1")
	if err != nil {
		t.Fatal(err)
	}
	syn.GPUs = 16
	jobs, err := syn.Generate()
	if err != nil {
		t.Fatal(err)
	}
	em, _ := ParseEstimateModel(DefaultEstimateModel)
	tasks, _ := Prepare(jobs, 16, em, ClassMix{}, false)
	cfg := Config{Nodes: 2, GPUsPerNode: 8, Policies: []string{GPUQ}, Estimates: true, Epoch: epoch, Parallel: 1, EstimateWorkers: 1}
	return cfg, Scenario{Trace: syn.String(), Format: "synthetic"}, tasks
}

// TestProgressModelShareZero: with share=0 nobody reports, and the result
// is the same, byte for byte, as without the model; with share=0.5 half
// the tasks report and the schedule or the estimates change.
func TestProgressModelShareZero(t *testing.T) {
	cfg, sc, tasks := progressWorkload(t)
	run := func(model string) Result {
		c := cfg
		m, err := ParseProgressModel(model)
		if err != nil {
			t.Fatal(err)
		}
		c.ProgressModel = m
		rep, err := Run(context.Background(), c, sc, tasks)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Result
	}
	none, zero := encode(t, run("")), encode(t, run("share=0,early=0.25,seed=1"))
	if !bytes.Equal(none, zero) {
		t.Errorf("share=0 differs from no model:\n%s", cmp.Diff(string(none), string(zero)))
	}
	// The scenario aside, which names the model.
	a, b := run(""), run("share=0.5,early=0.25,seed=1")
	if b.Scenario.ProgressModel != "share=0.5,early=0.25,every=10m0s,seed=1" {
		t.Errorf("scenario's progress model %q", b.Scenario.ProgressModel)
	}
	a.Scenario, b.Scenario = Scenario{}, Scenario{}
	if bytes.Equal(encode(t, a), encode(t, b)) {
		t.Error("share=0.5 changed neither the schedule nor the estimates")
	}
}

// TestProgressModelReports: the log of a run with the model holds the
// reports, each of a reporting task, of its node, its fraction the work
// done over the plan, no later than every 10 min of run; the early
// enders' last fraction is below 1 by at least a tenth.
func TestProgressModelReports(t *testing.T) {
	cfg, _, tasks := progressWorkload(t)
	cfg.Estimates = false
	cfg.ProgressModel = ProgressModel{Share: 0.5, Early: 0.25, Every: DefaultProgressEvery, Seed: 1}
	plan := cfg.ProgressModel.plans(tasks)
	log, err := Log(context.Background(), cfg, policy.New(cfg.Options), tasks)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]int{}
	for i, tk := range tasks {
		byID[tk.ID] = i
	}
	reports, reporting, early := 0, 0, 0
	last := map[string]float64{}
	for _, m := range log {
		r, err := events.Decode(m)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := r.Event.(events.ProgressReported)
		if !ok {
			continue
		}
		reports++
		i := byID[p.TaskID]
		if plan[i] <= 0 {
			t.Fatalf("%s reported but does not report", p.TaskID)
		}
		if !(p.Fraction > 0 && p.Fraction <= 1) || p.Node == "" {
			t.Fatalf("report %+v", p)
		}
		last[p.TaskID] = p.Fraction
	}
	for i, tk := range tasks {
		if plan[i] > 0 {
			reporting++
			if plan[i] > tk.Duration {
				early++
				if f, ok := last[tk.ID]; ok && f > 0.9+1e-9 {
					t.Errorf("%s ends early but reported %.3f", tk.ID, f)
				}
			}
		}
	}
	if reports == 0 || reporting < 100 || reporting > 200 || early == 0 || early > reporting/2 {
		t.Errorf("%d reports; %d of %d tasks report, %d of them end early", reports, reporting, len(tasks), early)
	}
}
