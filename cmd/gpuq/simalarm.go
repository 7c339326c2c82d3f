package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/gpuq/gpuq/pkg/sim"
)

// simAlarms reads --alarms and --fault: the alarm is measured on the gpuq
// run with estimates, and each fault needs a cluster it leaves a node of.
func simAlarms(f simFlags, policies []string, sizes []int) (bool, []sim.Fault, error) {
	var faults []sim.Fault
	seen := map[string]bool{}
	for _, s := range f.faults {
		ft, err := sim.ParseFault(s)
		if err != nil {
			return false, nil, invalid("fault", err.Error())
		}
		if seen[s] {
			return false, nil, invalid("fault", fmt.Sprintf("%q given twice", s))
		}
		seen[s] = true
		if ft.Kind == sim.FaultNodesDown && ft.Nodes >= sizes[0] {
			return false, nil, invalid("fault", fmt.Sprintf("%q takes %d nodes down of %d: want fewer than the cluster's nodes", s, ft.Nodes, sizes[0]))
		}
		faults = append(faults, ft)
	}
	on := f.alarms || len(faults) > 0
	if on && (!f.estimates || !slices.Contains(policies, sim.GPUQ)) {
		field := "alarms"
		if len(faults) > 0 {
			field = "fault"
		}
		return false, nil, invalid(field, "is measured on the gpuq run with estimates: want gpuq in --compare and --estimates on")
	}
	return on, faults, nil
}

// printAlarms writes the alarm's figures (estimates.gpuq.alarms).
func printAlarms(w io.Writer, r sim.Result) {
	e, ok := r.Estimates[sim.EstGPUQ]
	if !ok || e.Alarms == nil {
		return
	}
	a := e.Alarms
	fmt.Fprintf(w, "\nalarms (the advisor's, a wait past 2× its estimate that scheduling is broken): %d of %d judged tasks (rate %.4f), %d late; by cause %v\n",
		a.Alarmed, a.N, a.Rate, a.Late, a.ByCause)
	if len(a.Faults) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault\tn\tlate\tlate by fault\talarmed\trecall\tfalse rate\tmedian delay (s)\tavg queue (s)\twithout (s)\t")
	for _, f := range a.Faults {
		recall := "-" // the fault made no task late
		if f.Recall != nil {
			recall = fmt.Sprintf("%.3f", *f.Recall)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%.4f\t%.0f\t%.0f\t%.0f\t\n", f.Fault.Spec, f.N, f.Late, f.ByFault, f.Alarmed, recall, f.FalseRate, f.MedianDelayS, f.AvgQueueS, f.BaseAvgQueueS)
	}
	tw.Flush()
}
