package sim

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/trace"
)

// TestLostWorkAnalysis is a manual analysis aid, skipped unless SIM_LOST
// is set: the mix scenario (SIM_LOST jobs of Philly, 0: all; 72 × 8 GPUs,
// classes 5/15/60/20 %, teams by VC, checkpoints every 30 min, no
// estimates) under least-lost and newest victims, and where each one's
// lost work comes from: preemptions by CRITICAL and by a team's reclaim,
// the grace's share, and how often the same task is preempted again.
// SIM_STARVE sets StarvationWait, SIM_PATIENCE PreemptPatience (the
// defaults of gpuq sim are 96h and 30m). E.g.
//
//	SIM_LOST=0 SIM_STARVE=96h SIM_PATIENCE=30m go test ./pkg/sim -run LostWorkAnalysis -v -timeout 1h
func TestLostWorkAnalysis(t *testing.T) {
	v, ok := os.LookupEnv("SIM_LOST")
	if !ok {
		t.Skip("set SIM_LOST")
	}
	var n int
	fmt.Sscan(v, &n)
	jobs, err := trace.Load("../../../shared/traces/philly/jobs-2017-10-11.csv", "philly")
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		jobs = jobs[:n]
	}
	f, err := os.Open("../../../shared/traces/philly/vcs.csv")
	if err != nil {
		t.Fatal(err)
	}
	vcs, err := trace.ReadPhillyVCs(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	em, _ := ParseEstimateModel(DefaultEstimateModel)
	cm, _ := ParseClassMix("critical=0.05,high=0.15,medium=0.6,low=0.2,seed=1")
	tasks, _ := Prepare(jobs, 72*8, em, cm, true)
	starve, _ := time.ParseDuration(os.Getenv("SIM_STARVE"))
	patience, _ := time.ParseDuration(os.Getenv("SIM_PATIENCE"))
	for _, victims := range []string{policy.LeastLost, policy.Newest} {
		o := policy.Options{Teams: TeamsByVC(vcs), Victims: victims, StarvationWait: starve, PreemptPatience: patience}
		cfg := Config{Nodes: 72, GPUsPerNode: 8, Epoch: time.Unix(0, 0).UTC(), Options: o, CheckpointEvery: 30 * time.Minute}
		recs, err := Log(context.Background(), cfg, policy.New(o), tasks)
		if err != nil {
			t.Fatal(err)
		}
		prio := map[string]domain.Priority{}
		gpus := map[string]int{}
		for _, tk := range tasks {
			prio[tk.ID], gpus[tk.ID] = tk.Priority, tk.GPUs
		}
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
				t.Fatal(err)
			}
			switch e := r.Event.(type) {
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
				g := float64(gpus[e.TaskID]) * simGrace.Seconds()
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
		again := 0
		for _, c := range counts {
			if c > 1 {
				again += c - 1
			}
		}
		t.Logf("%s: lost %.1f GPU-h (grace %.1f), %d victims, %d preemptions of a task preempted before, max %d", victims, total/3600, grace/3600, len(times), again, counts[len(counts)-1])
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
		t.Logf("  %d preemptors' requests, %.2f victims each, victims' GPUs %.2f× the preemptors'; gangs %d with %d victims; victims by GPUs %v",
			len(reqOrder), float64(nv)/float64(max(1, len(reqOrder))), float64(over)/float64(max(1, need)), gangs, gangVictims, victimGPUs)
		t.Logf("  victims by run age (<10m <30m <1h <6h <1d more) %v, by real time left %v", ages, left)
		for w, x := range byWhy {
			t.Logf("  %s: %.0f preemptions, lost %.1f GPU-h, of it grace %.1f", w, x[0], x[1]/3600, x[2]/3600)
		}
	}
}
