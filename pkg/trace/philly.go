package trace

import (
	"fmt"
	"io"
	"time"
)

// phillyTimeLayout is submit_time's layout; the trace gives no zone, read
// as UTC.
const phillyTimeLayout = "2006-01-02 15:04:05"

// ReadPhillyReport is ReadPhilly that also returns what was kept and
// dropped.
func ReadPhillyReport(r io.Reader) ([]Job, Report, error) {
	const (
		colSubmit   = "submit_time"
		colDuration = "duration_s"
		colGPUs     = "num_gpus"
		colVC       = "vc"
	)
	jobs, rep, err := readJobs(FormatPhilly, r, []string{colSubmit, colDuration, colGPUs, colVC}, func(t *table, n int) (Job, DropReason, error) {
		s, err := t.required(colSubmit)
		if err != nil {
			return Job{}, "", err
		}
		submit, err := time.ParseInLocation(phillyTimeLayout, s, time.UTC)
		if err != nil {
			return Job{}, "", t.errf(colSubmit, "not a time in layout %q: %q", "YYYY-MM-DD HH:MM:SS", s)
		}
		gpus, err := t.count(colGPUs)
		if err != nil {
			return Job{}, "", err
		}
		vc, err := t.required(colVC)
		if err != nil {
			return Job{}, "", err
		}
		var dur time.Duration
		ds := t.str(colDuration)
		if ds != "" {
			if dur, err = t.seconds(colDuration, ds); err != nil {
				return Job{}, "", err
			}
		}
		switch {
		case gpus == 0:
			return Job{}, DropZeroGPUs, nil
		case ds == "":
			return Job{}, DropNotStarted, nil
		case dur < 0:
			return Job{}, DropNegativeDuration, nil
		}
		return Job{
			ID:         fmt.Sprintf("philly-%07d", n),
			VC:         vc,
			SubmitTime: submit,
			Duration:   dur,
			GPUs:       gpus,
			GPUMilli:   1000,
		}, "", nil
	})
	if err != nil {
		return nil, rep, err
	}
	if len(jobs) > 0 {
		first := jobs[0].SubmitTime
		for _, j := range jobs[1:] {
			if j.SubmitTime.Before(first) {
				first = j.SubmitTime
			}
		}
		for i := range jobs {
			jobs[i].Submit = jobs[i].SubmitTime.Sub(first)
		}
	}
	sortJobs(jobs)
	return jobs, rep, nil
}

// ReadPhillyVCs reads a VC table (vc, nodes[, gpus_per_node]) such as
// shared/traces/philly/vcs.csv: VC → node count, the sizes HeliosArtifact
// simulates each VC with (8 GPUs per node). A gpus_per_node column, if
// present, must be a positive integer; it is checked, not returned.
func ReadPhillyVCs(r io.Reader) (map[string]int, error) {
	const (
		format      = "philly-vcs"
		colVC       = "vc"
		colNodes    = "nodes"
		colPerNodes = "gpus_per_node"
	)
	t, err := newTable(format, r, colVC, colNodes)
	if err != nil {
		return nil, err
	}
	_, hasPerNode := t.cols[colPerNodes]
	vcs := map[string]int{}
	err = t.each(func() error {
		vc, err := t.required(colVC)
		if err != nil {
			return err
		}
		if _, dup := vcs[vc]; dup {
			return t.errf(colVC, "VC %q listed twice", vc)
		}
		nodes, err := t.count(colNodes)
		if err != nil {
			return err
		}
		if hasPerNode {
			per, err := t.count(colPerNodes)
			if err != nil {
				return err
			}
			if per == 0 {
				return t.errf(colPerNodes, "must be positive")
			}
		}
		vcs[vc] = nodes
		return nil
	})
	if err != nil {
		return nil, err
	}
	return vcs, nil
}
