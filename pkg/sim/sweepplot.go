package sim

import (
	"math"
	"os"
	"path/filepath"

	"github.com/gpuq/gpuq/pkg/domain"
)

// Plot files WriteSweepPlots writes.
const (
	PlotSweepWait        = "sweep_wait.svg"
	PlotSweepJCT         = "sweep_jct.svg"
	PlotSweepWaitByClass = "sweep_wait_by_class.svg"
)

// SweepGoal is the wait drawn as a reference line on the sweep's wait
// charts: the operator's question, "how many GPUs do we need so that LOW
// tasks wait under 2 h".
const SweepGoal = 2 * 3600.0

// WriteSweepPlots draws a sweep against cluster size (GPUs, linear) into
// dir (created if missing), in the style of WritePlots: each policy's
// average (dashed) and p95 (solid) queueing delay, log scale, with a
// dashed 2 h line (PlotSweepWait); its average and p95 JCT
// (PlotSweepJCT); and, when the tasks are of several classes, each
// policy's p95 queueing delay by class (PlotSweepWaitByClass: one colour
// per class, dashed for every policy after the first). A delay under a
// second is drawn at one second. It returns the files written.
func WriteSweepPlots(dir string, sw SweepResult, policies []string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	write := func(name string, c chart) error {
		p := filepath.Join(dir, name)
		files = append(files, p)
		return os.WriteFile(p, c.svg(), 0o644)
	}
	xs := make([]float64, len(sw.Sweep))
	for i, e := range sw.Sweep {
		xs[i] = float64(e.Scenario.TotalGPUs)
	}
	series := func(f func(Metrics) float64) func(p string) []float64 {
		return func(p string) []float64 {
			ys := make([]float64, len(sw.Sweep))
			for i, e := range sw.Sweep {
				ys[i] = math.Max(1, f(e.Policies[p]))
			}
			return ys
		}
	}
	goal := func() line {
		return line{name: "2 h", xs: []float64{xs[0], xs[len(xs)-1]}, ys: []float64{SweepGoal, SweepGoal}, color: "#888888", dashed: true}
	}
	pair := func(avg, p95 func(string) []float64, what string) []line {
		var ls []line
		for k, p := range policies {
			c := palette[k%len(palette)]
			ls = append(ls, line{name: p + " p95 " + what, xs: xs, ys: p95(p), color: c},
				line{name: p + " avg " + what, xs: xs, ys: avg(p), color: c, dashed: true})
		}
		return ls
	}
	// 1. Queueing delay against size.
	waits := append(pair(series(func(m Metrics) float64 { return m.AvgQueue }),
		series(func(m Metrics) float64 { return m.P95Queue }), "queue"), goal())
	if err := write(PlotSweepWait, chart{title: "Queueing delay against cluster size", xlabel: "cluster size (GPUs)",
		ylabel: "queueing delay (log scale)", lines: waits, logY: true}); err != nil {
		return files, err
	}
	// 2. JCT against size.
	jcts := pair(series(func(m Metrics) float64 { return m.AvgJCT }),
		series(func(m Metrics) float64 { return m.P95JCT }), "JCT")
	if err := write(PlotSweepJCT, chart{title: "Job completion time against cluster size", xlabel: "cluster size (GPUs)",
		ylabel: "JCT (log scale)", lines: jcts, logY: true}); err != nil {
		return files, err
	}
	// 3. By class, when there are classes.
	if len(sw.Sweep) == 0 || len(sw.Sweep[0].Policies[policies[0]].ByClass) == 0 {
		return files, nil
	}
	var byClass []line
	for k, p := range policies {
		for ci, cl := range domain.Priorities {
			name := cl.String()
			if _, ok := sw.Sweep[0].Policies[p].ByClass[name]; !ok {
				continue
			}
			ys := make([]float64, len(sw.Sweep))
			for i, e := range sw.Sweep {
				ys[i] = math.Max(1, e.Policies[p].ByClass[name].P95Queue)
			}
			byClass = append(byClass, line{name: p + " " + name + " p95 queue", xs: xs, ys: ys, color: palette[ci%len(palette)], dashed: k > 0})
		}
	}
	byClass = append(byClass, goal())
	if err := write(PlotSweepWaitByClass, chart{title: "p95 queueing delay by class against cluster size", xlabel: "cluster size (GPUs)",
		ylabel: "p95 queueing delay (log scale)", lines: byClass, logY: true}); err != nil {
		return files, err
	}
	return files, nil
}
