// Command analysis holds the simulator's manual analysis aids, run by hand
// on the Philly trace (never by the test suite):
//
//	go run ./pkg/sim/internal/analysis lost [-jobs N] [-starve 96h] [-patience 30m]
//	go run ./pkg/sim/internal/analysis profile -jobs 10000 -nodes 72 -policy gpuq -est [-cpuprofile cpu.out]
//
// lost runs the mix scenario (72 × 8 GPUs, classes 5/15/60/20 %, teams by
// VC, checkpoints every 30 min, no estimates) under least-lost and newest
// victims, and says where each one's lost work comes from: preemptions by
// CRITICAL and by a team's reclaim, the grace's share, and how often the
// same task is preempted again. profile runs the first -jobs Philly jobs
// under -policy and prints the metrics, timings and the average wait by
// real-duration bucket. -trace and -vcs name the Philly files (defaults:
// ../shared/traces/philly/, from the repository root). -h lists each
// command's flags.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/sim"
	"github.com/gpuq/gpuq/pkg/trace"
)

const usage = "usage: analysis lost|profile [flags] (-h for the flags)"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "lost":
		err = lost(os.Args[2:], os.Stdout)
	case "profile":
		err = profile(os.Args[2:], os.Stdout)
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "analysis:", err)
		os.Exit(1)
	}
}

// philly loads the first n jobs of the Philly trace (0: all).
func philly(path string, n int) ([]trace.Job, error) {
	if n < 0 {
		return nil, fmt.Errorf("-jobs %d: must be ≥ 0", n)
	}
	jobs, err := trace.Load(path, "philly")
	if err != nil {
		return nil, err
	}
	if n > 0 && n < len(jobs) {
		jobs = jobs[:n]
	}
	return jobs, nil
}

// lost is the lost-work analysis (formerly TestLostWorkAnalysis).
func lost(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("lost", flag.ContinueOnError)
	n := fs.Int("jobs", 0, "the first N Philly jobs (0: all)")
	path := fs.String("trace", "../shared/traces/philly/jobs-2017-10-11.csv", "the Philly job trace")
	vcsPath := fs.String("vcs", "../shared/traces/philly/vcs.csv", "the Philly VC table")
	starve := fs.Duration("starve", 0, "policy StarvationWait (gpuq sim's default: 96h)")
	patience := fs.Duration("patience", 0, "policy PreemptPatience (gpuq sim's default: 30m)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	jobs, err := philly(*path, *n)
	if err != nil {
		return err
	}
	f, err := os.Open(*vcsPath)
	if err != nil {
		return err
	}
	vcs, err := trace.ReadPhillyVCs(f)
	f.Close()
	if err != nil {
		return err
	}
	em, err := sim.ParseEstimateModel(sim.DefaultEstimateModel)
	if err != nil {
		return err
	}
	cm, err := sim.ParseClassMix("critical=0.05,high=0.15,medium=0.6,low=0.2,seed=1")
	if err != nil {
		return err
	}
	tasks, _ := sim.Prepare(jobs, 72*8, em, cm, true)
	for _, victims := range []string{policy.LeastLost, policy.Newest} {
		o := policy.Options{Teams: sim.TeamsByVC(vcs), Victims: victims, StarvationWait: *starve, PreemptPatience: *patience}
		cfg := sim.Config{Nodes: 72, GPUsPerNode: 8, Epoch: time.Unix(0, 0).UTC(), Options: o, CheckpointEvery: 30 * time.Minute}
		recs, err := sim.Log(context.Background(), cfg, policy.New(o), tasks)
		if err != nil {
			return err
		}
		prio := map[string]domain.Priority{}
		gpus := map[string]int{}
		for _, tk := range tasks {
			prio[tk.ID], gpus[tk.ID] = tk.Priority, tk.GPUs
		}
		graceS := map[string]float64{}    // each task's grace, from its submitted
		byWhy := map[string]*[3]float64{} // preemptions, lost GPU-s, grace GPU-s
		why := map[string]string{}
		times := map[string]int{}
		var total, grace float64
		// Per preemptor and instant: its GPUs, the victims and their GPUs.
		type req struct{ victims, vgpus int }
		reqs := map[string]*req{}
		var reqOrder []string
		victimGPUs := map[int]int{} // victims by GPUs
		started := map[string]time.Time{}
		ranBefore := map[string]time.Duration{}
		var ages [6]int // victims by age of their run: <10m <30m <1h <6h <1d more
		var left [6]int // victims by real time left: same buckets
		dur := map[string]time.Duration{}
		for _, tk := range tasks {
			dur[tk.ID] = tk.Duration
		}
		bucket := func(d time.Duration) int {
			for i, b := range []time.Duration{10 * time.Minute, 30 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour} {
				if d < b {
					return i
				}
			}
			return 5
		}
		for _, m := range recs {
			r, err := events.Decode(m)
			if err != nil {
				return err
			}
			switch e := r.Event.(type) {
			case events.Submitted:
				graceS[e.TaskID] = e.GraceS
			case events.PreemptRequested:
				w := "reclaim"
				if prio[e.For] == domain.Critical {
					w = "critical"
				}
				if !strings.Contains(e.Reason, "team guarantee") && prio[e.For] != domain.Critical {
					w = "class"
				}
				why[e.TaskID] = w
				k := e.For + "@" + r.At().String()
				if reqs[k] == nil {
					reqs[k] = &req{}
					reqOrder = append(reqOrder, k)
				}
				reqs[k].victims++
				reqs[k].vgpus += gpus[e.TaskID]
				victimGPUs[gpus[e.TaskID]]++
			case events.Started:
				started[e.TaskID] = r.At()
			case events.Preempted:
				age := r.At().Sub(started[e.TaskID])
				ages[bucket(age)]++
				left[bucket(dur[e.TaskID]-ranBefore[e.TaskID]-age)]++
				ranBefore[e.TaskID] += age - time.Duration(e.LostGPUSeconds/float64(gpus[e.TaskID]))*time.Second
				w := why[e.TaskID]
				if byWhy[w] == nil {
					byWhy[w] = &[3]float64{}
				}
				g := float64(gpus[e.TaskID]) * graceS[e.TaskID]
				byWhy[w][0]++
				byWhy[w][1] += e.LostGPUSeconds
				byWhy[w][2] += g
				total += e.LostGPUSeconds
				grace += g
				times[e.TaskID]++
			}
		}
		var counts []int
		for _, c := range times {
			counts = append(counts, c)
		}
		slices.Sort(counts)
		again, most := 0, 0
		for _, c := range counts {
			if c > 1 {
				again += c - 1
			}
			most = max(most, c)
		}
		fmt.Fprintf(out, "%s: lost %.1f GPU-h (grace %.1f), %d victims, %d preemptions of a task preempted before, max %d\n", victims, total/3600, grace/3600, len(times), again, most)
		var nv, over, need, gangs, gangVictims int
		for _, k := range reqOrder {
			q := reqs[k]
			id := k[:strings.Index(k, "@")]
			nv += q.victims
			need += gpus[id]
			over += q.vgpus
			if gpus[id] > 8 {
				gangs++
				gangVictims += q.victims
			}
		}
		fmt.Fprintf(out, "  %d preemptors' requests, %.2f victims each, victims' GPUs %.2f× the preemptors'; gangs %d with %d victims; victims by GPUs %v\n",
			len(reqOrder), float64(nv)/float64(max(1, len(reqOrder))), float64(over)/float64(max(1, need)), gangs, gangVictims, victimGPUs)
		fmt.Fprintf(out, "  victims by run age (<10m <30m <1h <6h <1d more) %v, by real time left %v\n", ages, left)
		for w, x := range byWhy {
			fmt.Fprintf(out, "  %s: %.0f preemptions, lost %.1f GPU-h, of it grace %.1f\n", w, x[0], x[1]/3600, x[2]/3600)
		}
	}
	return nil
}

// profile is the profiling scenario (formerly TestProfileScenario).
func profile(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("profile", flag.ContinueOnError)
	n := fs.Int("jobs", 0, "the first N Philly jobs (0: all)")
	path := fs.String("trace", "../shared/traces/philly/jobs-2017-10-11.csv", "the Philly job trace")
	nodes := fs.Int("nodes", 72, "8-GPU nodes")
	pol := fs.String("policy", "gpuq", "policies, comma-separated")
	est := fs.Bool("est", false, "run the estimator")
	model := fs.String("model", sim.DefaultEstimateModel, "the estimate model")
	teams := fs.Bool("teams", false, "teams by VC (labels only, no guarantees)")
	tau := fs.Duration("tau", 0, "gpuq-spf AgingTau")
	maxWait := fs.Duration("maxwait", 0, "gpuq-spf MaxWait")
	backfill := fs.String("backfill", "", "backfill order")
	depth := fs.Int("depth", 0, "backfill depth")
	window := fs.Float64("window", 0, "the estimator's forward window")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nodes <= 0 {
		return fmt.Errorf("-nodes %d: must be > 0", *nodes)
	}
	jobs, err := philly(*path, *n)
	if err != nil {
		return err
	}
	em, err := sim.ParseEstimateModel(*model)
	if err != nil {
		return err
	}
	tasks, _ := sim.Prepare(jobs, *nodes*8, em, sim.ClassMix{}, *teams)
	opts := policy.Options{MaxWait: *maxWait, AgingTau: *tau, Backfill: *backfill, BackfillDepth: *depth}
	pols := strings.Split(*pol, ",")
	cfg := sim.Config{Nodes: *nodes, GPUsPerNode: 8, Policies: pols, Estimates: *est, Epoch: time.Unix(0, 0).UTC(), Options: opts, EstimateWindow: *window}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	t0 := time.Now()
	rep, err := sim.Run(context.Background(), cfg, sim.Scenario{}, tasks)
	if err != nil {
		return err
	}
	b, _ := json.MarshalIndent(rep.Result.Policies, "", " ")
	e, _ := json.Marshal(rep.Result.Estimates)
	fmt.Fprintf(out, "model %s, %s: %s\n%s\n%+v %+v\n", *model, time.Since(t0), b, e, rep.Timings.Policies, rep.Timings.Estimates)
	if we := rep.WaitEstimates; len(we) > 0 {
		q := func(f func(sim.WaitEstimate) float64) string {
			xs := make([]float64, len(we))
			for i, w := range we {
				xs[i] = f(w)
			}
			slices.Sort(xs)
			return fmt.Sprintf("p10 %.0f p50 %.0f p90 %.0f", xs[len(xs)/10], xs[len(xs)/2], xs[len(xs)*9/10])
		}
		fmt.Fprintf(out, "judged %d: actual %s | P50 %s | P90 %s | log((P50+60)/(actual+60))×100 %s\n", len(we),
			q(func(w sim.WaitEstimate) float64 { return w.Actual.Seconds() }), q(func(w sim.WaitEstimate) float64 { return w.P50.Seconds() }),
			q(func(w sim.WaitEstimate) float64 { return w.P90.Seconds() }),
			q(func(w sim.WaitEstimate) float64 { return 100 * math.Log((w.P50.Seconds()+60)/(w.Actual.Seconds()+60)) }))
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
		fmt.Fprintf(out, "%-12s avg wait by real duration (≤1m ≤10m ≤1h ≤6h ≤1d >1d):", p)
		for k := range sum {
			fmt.Fprintf(out, " %.0f(%d)", sum[k]/float64(max(1, cnt[k])), cnt[k])
		}
		fmt.Fprintln(out)
	}
	return nil
}
