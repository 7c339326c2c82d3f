package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/sim"
	"github.com/gpuq/gpuq/pkg/trace"
)

// simWindowFlags are --from, --until and --split: a held-out slice of
// the trace, or the trace cut into parts, each simulated alone.
type simWindowFlags struct {
	from, until, split string
}

// simWindowHelp is the flags' part of gpuq sim's help.
const simWindowHelp = `--from and --until simulate a window of the trace's submit times,
[from, until): ` + trace.BoundRule + `; either may be left out (the trace's
first submission; one second after its last). --split cuts the trace into
parts, ` + trace.SplitRule + `, and simulates each part alone and then
the whole trace: the JSON is {"split": [the result of each part…],
"whole": the result of the whole trace}, each part's scenario naming its
window (an entry is, byte for byte, what --from/--until of its window
gives). A window holds the jobs submitted in it and nothing else: it
starts on an empty cluster, with no job submitted before it still
running or queued, and its offsets (--fault's) count from its own first
submission. Each job keeps the estimate, class and preemptibility the
model draws for it in the whole trace. --limit cuts the trace first, then
the window.`

// checkSimWindowFlags refuses combinations before the trace is read.
func checkSimWindowFlags(f simFlags, sizes []int) error {
	w := f.window
	switch {
	case w.split != "" && (w.from != "" || w.until != ""):
		return invalid("split", "give --split or --from/--until, not both")
	case w.split != "" && len(sizes) > 1:
		return invalid("split", "simulates one cluster size: give one --nodes")
	case w.split != "" && f.plot != "":
		return invalid("plot", "draws one run: not with --split")
	}
	return nil
}

// simWindows reads --from/--until (one window; nil: none) and --split
// (its parts; nil: none) against the trace's jobs (after --limit).
func simWindows(f simFlags, jobs []trace.Job) (*trace.Window, []trace.Window, error) {
	w := f.window
	if w.split != "" {
		parts, err := trace.Split(w.split, jobs)
		if err != nil {
			return nil, nil, invalid("split", err.Error())
		}
		for _, p := range parts {
			if len(p.Filter(jobs)) == 0 {
				return nil, nil, invalid("split", fmt.Sprintf("part %s holds no job of the trace: want fewer parts", p))
			}
		}
		return nil, parts, nil
	}
	if w.from == "" && w.until == "" {
		return nil, nil, nil
	}
	origin := trace.Origin(jobs)
	win := trace.Window{Origin: origin, From: jobs[0].Submit, Until: jobs[len(jobs)-1].Submit.Truncate(time.Second) + time.Second}
	var err error
	if w.from != "" {
		if win.From, err = trace.ParseBound(w.from, origin); err != nil {
			return nil, nil, invalid("from", err.Error())
		}
	}
	if w.until != "" {
		if win.Until, err = trace.ParseBound(w.until, origin); err != nil {
			return nil, nil, invalid("until", err.Error())
		}
	}
	field := "until"
	if w.until == "" {
		field = "from"
	}
	span := trace.Window{Origin: origin, From: jobs[0].Submit, Until: jobs[len(jobs)-1].Submit}
	if win.Until <= win.From {
		return nil, nil, invalid(field, fmt.Sprintf("--until must be after --from (without --from: the first submission; without --until: one second after the last): the window %s is empty", win))
	}
	if len(win.Filter(jobs)) == 0 {
		return nil, nil, invalid(field, fmt.Sprintf("the window %s holds no job of the trace (its submissions span %s)", win, span))
	}
	return &win, nil, nil
}

// preparer models the trace's jobs for a cluster of the given nodes
// (runSim's prepare).
type preparer func(nodes int) ([]sim.Task, sim.Scenario, error)

// windowed is prepare cut to window w: the tasks submitted in it, their
// submit times from the window's first job's, and the epoch moved there
// (so that a fault's offset counts from the window's first submission).
// The tasks are the whole trace's, cut after the model drew theirs, so a
// job has the same estimate, class and preemptibility in every window.
func windowed(prepare preparer, jobs []trace.Job, w trace.Window, perNode int, epoch time.Time) (preparer, time.Time) {
	in := w.Filter(jobs)
	base := in[0].Submit
	return func(nodes int) ([]sim.Task, sim.Scenario, error) {
		tasks, sc, err := prepare(nodes)
		if err != nil {
			return nil, sc, err
		}
		cut := make([]sim.Task, 0, len(in))
		for _, t := range tasks {
			if w.Contains(t.Submit) {
				t.Submit -= base
				cut = append(cut, t)
			}
		}
		unplaceable := 0
		for _, j := range in {
			if j.GPUs > nodes*perNode || j.GPUs <= 0 {
				unplaceable++
			}
		}
		if len(cut) == 0 {
			return nil, sc, invalid("nodes", fmt.Sprintf("no job of the window %s fits %d GPUs", w, nodes*perNode))
		}
		sc.Unplaceable, sc.Window = unplaceable, &w
		return cut, sc, nil
	}, epoch.Add(base)
}

// simSplit is gpuq sim --split's JSON.
type simSplit struct {
	Split []sim.Result `json:"split"`
	Whole sim.Result   `json:"whole"`
}

// runSplit simulates each part of the trace alone, then the whole, on one
// cluster size, and reports them together.
func runSplit(c *cobra.Command, f simFlags, cfg sim.Config, parts []trace.Window, names []string, jobs []trace.Job,
	prepare preparer, loaded time.Duration) error {
	var out simSplit
	run := func(label string, p preparer, epoch time.Time) (sim.Result, error) {
		tasks, sc, err := p(cfg.Nodes)
		if err != nil {
			return sim.Result{}, err
		}
		cfg := cfg
		cfg.Epoch = epoch
		if f.progress {
			var mu sync.Mutex
			cfg.Progress = func(name string, n, total int) {
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintf(os.Stderr, "%s: %s: %d%% (%d of %d submitted)\n", label, name, n*100/total, n, total)
			}
		}
		t1 := time.Now()
		rep, err := sim.Run(c.Context(), cfg, sc, tasks)
		if err != nil {
			return sim.Result{}, fmt.Errorf("%s: %w", label, err)
		}
		if f.times {
			fmt.Fprintf(os.Stderr, "%s: ", label)
			printTimings(os.Stderr, rep, names, loaded, time.Since(t1))
		}
		return rep.Result, nil
	}
	for _, w := range parts {
		p, epoch := windowed(prepare, jobs, w, f.perNode, cfg.Epoch)
		r, err := run("part "+w.Name, p, epoch)
		if err != nil {
			return err
		}
		out.Split = append(out.Split, r)
	}
	whole, err := run("whole", prepare, cfg.Epoch)
	if err != nil {
		return err
	}
	out.Whole = whole
	if f.json {
		return printJSON(os.Stdout, out)
	}
	printSplit(os.Stdout, out, names)
	return nil
}

// printSplit prints each part's tables, then the whole trace's.
func printSplit(w io.Writer, s simSplit, names []string) {
	for _, r := range s.Split {
		fmt.Fprintf(w, "=== part %s ===\n", r.Scenario.Window.Name)
		printSim(w, r, names)
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "=== the whole trace ===")
	printSim(w, s.Whole, names)
}
