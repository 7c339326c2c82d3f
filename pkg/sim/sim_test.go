package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpuq/gpuq/pkg/decide"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/trace"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var epoch = time.Date(2017, 10, 1, 0, 0, 0, 0, time.UTC)

// synthetic is a deterministic trace of n jobs: Poisson arrivals every
// gap on average, log-normal durations (median e^6 s ≈ 7 min, mean ≈ 50
// min), mostly 1-GPU jobs with some of 2–16 GPUs, in three VCs.
func synthetic(n int, gap time.Duration, seed uint64) []trace.Job {
	r := rand.New(rand.NewPCG(seed, 7))
	vcs := []string{"vision", "nlp", "speech"}
	sizes := []int{1, 1, 1, 1, 1, 1, 2, 2, 4, 8, 12, 16}
	var at time.Duration
	jobs := make([]trace.Job, 0, n)
	for i := range n {
		at += time.Duration(r.ExpFloat64() * float64(gap))
		dur := time.Duration(math.Exp(6+2*r.NormFloat64())*float64(time.Second)) + time.Second
		jobs = append(jobs, trace.Job{ID: fmt.Sprintf("job-%04d", i), VC: vcs[r.IntN(len(vcs))],
			Submit: at.Truncate(time.Second), Duration: dur.Truncate(time.Second), GPUs: sizes[r.IntN(len(sizes))], GPUMilli: 1000})
	}
	return jobs
}

// syntheticScenario exercises every path: four policies, teams by VC
// (reclaiming preempts), a class mix with CRITICAL tasks (they preempt),
// and the estimates.
func syntheticScenario(t testing.TB) (Config, Scenario, []Task) {
	t.Helper()
	em, err := ParseEstimateModel(DefaultEstimateModel)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := ParseClassMix("critical=0.05,high=0.15,medium=0.6,low=0.2,seed=3")
	if err != nil {
		t.Fatal(err)
	}
	jobs := synthetic(400, 7*time.Minute, 1)
	tasks, unplaceable := Prepare(jobs, 4*8, em, cm, true)
	cfg := Config{Nodes: 4, GPUsPerNode: 8, Policies: Policies(), Estimates: true, Epoch: epoch,
		Options: policy.Options{Teams: TeamsByVC(map[string]int{"vision": 2, "nlp": 1, "speech": 1})}}
	sc := Scenario{Trace: "synthetic", Format: "test", Teams: "vc", EstimateModel: em.String(), ClassMix: cm.String(),
		TraceJobs: len(jobs), Unplaceable: unplaceable}
	return cfg, sc, tasks
}

func encode(t testing.TB, r Result) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestGolden pins the whole result of the synthetic scenarios; run with
// -update after an intended change and review the diff. "synthetic" is
// the scenario of old (every task preemptible, no work lost);
// "synthetic-checkpoint" the realistic model: checkpoints every 10 min
// (preemptions lose work), a fifth of the tasks not preemptible, the
// starvation guard across classes, and both choices of victims.
func TestGolden(t *testing.T) {
	cases := []struct {
		name   string
		golden string
		tune   func(*Config, *Scenario, []Task)
		lost   bool // preemptions must lose work
	}{
		{name: "synthetic", golden: "synthetic.golden.json", tune: func(*Config, *Scenario, []Task) {}},
		{name: "synthetic-checkpoint", golden: "synthetic-checkpoint.golden.json", lost: true,
			tune: func(c *Config, sc *Scenario, ts []Task) {
				c.CheckpointEvery = 10 * time.Minute
				c.Options.ClassAging = 30 * time.Minute
				MarkPreemptible(ts, 0.8, 1)
				sc.Preemptible = "0.8 (seed 1)"
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, sc, tasks := syntheticScenario(t)
			tc.tune(&cfg, &sc, tasks)
			rep, err := Run(context.Background(), cfg, sc, tasks)
			if err != nil {
				t.Fatal(err)
			}
			got := encode(t, rep.Result)
			path := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("result differs from %s (-want +got):\n%s", path, diff)
			}
			// The scenario must exercise preemption and the estimators.
			for _, p := range []string{GPUQ, GPUQSPF, GPUQNewest} {
				m := rep.Result.Policies[p]
				if m.Preemptions == 0 {
					t.Errorf("%s: no preemption in the synthetic scenario", p)
				}
				if lost := m.LostGPUHours > 0; lost != tc.lost {
					t.Errorf("%s: %v GPU-hours lost, want lost work %v", p, m.LostGPUHours, tc.lost)
				}
				if len(m.ByClass) != 4 {
					t.Errorf("%s: by_class has %d classes, want 4", p, len(m.ByClass))
				}
			}
			if e := rep.Result.Estimates[EstGPUQ]; e.N == 0 || len(e.ByClass) == 0 {
				t.Error("no estimate judged, or none by class")
			}
		})
	}
}

// TestDeterministic runs the same input twice — serially and in parallel —
// and wants the same bytes: the synthetic scenario (estimates, classes,
// teams, preemption) and a slice of the real Philly trace (the first 2,000
// jobs on the standard 72 × 8 cluster, without estimates to stay fast).
func TestDeterministic(t *testing.T) {
	cfg, sc, tasks := syntheticScenario(t)
	em, _ := ParseEstimateModel(DefaultEstimateModel)
	philly, _ := Prepare(phillySlice(t, 2000), 72*8, em, ClassMix{}, false)
	pcfg := Config{Nodes: 72, GPUsPerNode: 8, Policies: Policies(), Epoch: epoch, Estimates: true}
	tests := map[string]struct {
		cfg   Config
		sc    Scenario
		tasks []Task
	}{
		"synthetic":     {cfg, sc, tasks},
		"philly[:2000]": {pcfg, Scenario{Trace: "philly[:2000]"}, philly},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			run := func(par int) []byte {
				c := tt.cfg
				c.Parallel = par
				c.EstimateWorkers = par // 1: every forward simulation in Observe
				rep, err := Run(context.Background(), c, tt.sc, tt.tasks)
				if err != nil {
					t.Fatal(err)
				}
				return encode(t, rep.Result)
			}
			a, b := run(1), run(4)
			if !bytes.Equal(a, b) {
				t.Errorf("two runs differ:\n%s", cmp.Diff(string(a), string(b)))
			}
			var r Result
			if err := json.Unmarshal(a, &r); err != nil {
				t.Fatal(err)
			}
			if r.Jobs != len(tt.tasks) || len(r.Policies) != len(Policies()) {
				t.Errorf("result has %d jobs, %d policies; want %d, %d", r.Jobs, len(r.Policies), len(tt.tasks), len(Policies()))
			}
		})
	}
}

func phillySlice(t testing.TB, n int) []trace.Job {
	t.Helper()
	jobs, err := trace.Load(filepath.Join("..", "..", "..", "shared", "traces", "philly", "jobs-2017-10-11.csv"), trace.FormatPhilly)
	if err != nil {
		t.Skipf("Philly trace not available: %v", err)
	}
	return jobs[:n]
}

// TestSameDecisionsAsScheduler: one policy, two drivers. The simulation's
// log is replayed the way the scheduler service consumes it — fold each
// record, the predictor learning from completions — and at every point
// where the simulation decided, decide.Plan on the replayed state must
// return exactly the decisions the log holds next; where an instant ends,
// it must have nothing left to decide.
func TestSameDecisionsAsScheduler(t *testing.T) {
	cfg, _, tasks := syntheticScenario(t)
	for _, name := range []string{GPUQ, GPUQSPF} {
		t.Run(name, func(t *testing.T) {
			opts := cfg.Options
			if name == GPUQSPF {
				opts.WithinClass = policy.ShortestPredicted
			}
			pol := policy.New(opts)
			d := newDriver(context.Background(), cfg, pol, tasks, false)
			if _, err := d.simulate(cfg.Nodes, cfg.GPUsPerNode); err != nil {
				t.Fatal(err)
			}
			var recs []events.Record
			if _, err := events.ReadAll(context.Background(), d.log, 1, "", func(r events.Record) error {
				recs = append(recs, r)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			st, pred := domain.NewState(), estimate.NewPredictor(0)
			decision := func(r events.Record) bool {
				switch r.Event.(type) {
				case events.Dispatched, events.PreemptRequested, events.Requeued:
					return true
				}
				return false
			}
			points, decided, preempts := 0, 0, 0
			for i := 0; i < len(recs); {
				// Fold what the agents and submitters appended.
				for ; i < len(recs) && !decision(recs[i]); i++ {
					st.Apply(recs[i])
					if c, ok := recs[i].Event.(events.Completed); ok {
						pred.Observe(st.Tasks[c.TaskID])
					}
					last := i == len(recs)-1 || recs[i+1].Envelope.Time.After(recs[i].Envelope.Time)
					if last {
						// The instant ends here: nothing may be left to decide.
						if cmds := decide.Plan(st, pol, recs[i].Envelope.Time, decide.Liveness{}, pred.ForPolicy(recs[i].Envelope.Time)); len(cmds) > 0 {
							t.Fatalf("seq %d: the instant ends but the scheduler would still append %d events, first %+v",
								recs[i].Seq, len(cmds), cmds[0].Event)
						}
						points++
					}
				}
				if i == len(recs) {
					break
				}
				// A decision point: the scheduler's commands must be the log's next records.
				now := recs[i].Envelope.Time
				cmds := decide.Plan(st, pol, now, decide.Liveness{}, pred.ForPolicy(now))
				if len(cmds) == 0 {
					t.Fatalf("seq %d: the simulation decided %+v, the scheduler nothing", recs[i].Seq, recs[i].Event)
				}
				var want, got []events.Event
				for k, c := range cmds {
					want = append(want, c.Event)
					if i+k < len(recs) {
						got = append(got, recs[i+k].Event)
					}
				}
				if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("seq %d: decisions differ (-scheduler +simulation):\n%s", recs[i].Seq, diff)
				}
				for _, c := range cmds {
					st.Apply(recs[i])
					if _, ok := c.Event.(events.PreemptRequested); ok {
						preempts++
					}
					i++
				}
				points++
				decided += len(cmds)
			}
			if decided < len(tasks) || preempts == 0 {
				t.Errorf("checked %d decisions (%d preemptions) at %d points; want every task dispatched and some preemption", decided, preempts, points)
			}
			t.Logf("%s: %d decisions (%d preemptions) at %d decision points agree", name, decided, preempts, points)
		})
	}
}

// TestEstimatesAgreeWithEstimatorStats: the gpuq estimator's own
// self-measurement and this package's judging count the same tasks.
func TestEstimatesAgreeWithEstimatorStats(t *testing.T) {
	cfg, _, tasks := syntheticScenario(t)
	d := newDriver(context.Background(), cfg, policy.New(cfg.Options), tasks, true)
	out, err := d.simulate(cfg.Nodes, cfg.GPUsPerNode)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := d.est.judge(tasks, out)
	s := d.est.est.Stats()
	g := got[EstGPUQ]
	if g.N != s.N || g.P90Coverage != round(s.P90Coverage, 4) || g.P50MedianAbsErrS != round(s.MedianAbsS, 2) {
		t.Errorf("judged n=%d coverage=%v median=%v; estimator's Stats n=%d coverage=%v median=%v",
			g.N, g.P90Coverage, g.P50MedianAbsErrS, s.N, s.P90Coverage, s.MedianAbsS)
	}
}

func TestPlots(t *testing.T) {
	cfg, sc, tasks := syntheticScenario(t)
	cfg.Estimates = true
	rep, err := Run(context.Background(), cfg, sc, tasks)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files, err := WritePlots(dir, rep, cfg.Policies)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, PlotQueueLength), filepath.Join(dir, PlotDelayCDF), filepath.Join(dir, PlotPredicted)}
	if diff := cmp.Diff(want, files); diff != "" {
		t.Fatalf("files (-want +got):\n%s", diff)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(bytes.NewReader(b))
		for {
			_, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s is not well-formed XML: %v", f, err)
			}
		}
		for _, p := range cfg.Policies {
			if filepath.Base(f) != PlotPredicted && !bytes.Contains(b, []byte(">"+p+"<")) {
				t.Errorf("%s has no legend entry for %s", f, p)
			}
		}
	}
}
