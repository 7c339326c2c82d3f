package trace

import (
	"io"
	"time"
)

// ReadAlibabaOpenBReport is ReadAlibabaOpenB that also returns what was
// kept and dropped.
func ReadAlibabaOpenBReport(r io.Reader) ([]Job, Report, error) {
	const (
		colName      = "name"
		colGPUs      = "num_gpu"
		colMilli     = "gpu_milli"
		colSpec      = "gpu_spec"
		colQoS       = "qos"
		colPhase     = "pod_phase"
		colCreated   = "creation_time"
		colDeleted   = "deletion_time"
		colScheduled = "scheduled_time"
	)
	seen := map[string]int{} // name → line
	jobs, rep, err := readJobs(FormatAlibabaOpenB, r, []string{colName, colGPUs, colMilli, colSpec, colQoS, colPhase,
		colCreated, colDeleted, colScheduled}, func(t *table, _ int) (Job, DropReason, error) {
		name, err := t.required(colName)
		if err != nil {
			return Job{}, "", err
		}
		if l, dup := seen[name]; dup {
			return Job{}, "", t.errf(colName, "pod %q already on line %d", name, l)
		}
		seen[name] = t.line()
		gpus, err := t.count(colGPUs)
		if err != nil {
			return Job{}, "", err
		}
		milli, err := t.count(colMilli)
		if err != nil {
			return Job{}, "", err
		}
		if milli > 1000 {
			return Job{}, "", t.errf(colMilli, "over 1000 thousandths of a GPU: %d", milli)
		}
		cs, err := t.required(colCreated)
		if err != nil {
			return Job{}, "", err
		}
		created, err := t.intSeconds(colCreated, cs)
		if err != nil {
			return Job{}, "", err
		}
		var scheduled, deleted time.Duration
		ss, ds := t.str(colScheduled), t.str(colDeleted)
		if ss != "" {
			if scheduled, err = t.intSeconds(colScheduled, ss); err != nil {
				return Job{}, "", err
			}
		}
		if ds != "" {
			if deleted, err = t.intSeconds(colDeleted, ds); err != nil {
				return Job{}, "", err
			}
		}
		switch {
		case gpus == 0:
			return Job{}, DropZeroGPUs, nil
		case ss == "":
			return Job{}, DropNotStarted, nil
		case ds == "":
			return Job{}, DropNotEnded, nil
		case scheduled < created:
			return Job{}, DropNegativeWait, nil
		case deleted < scheduled:
			return Job{}, DropNegativeDuration, nil
		}
		return Job{
			ID:       name,
			Submit:   created,
			Duration: deleted - scheduled,
			GPUs:     gpus,
			Status:   t.str(colPhase),
			GPUModel: t.str(colSpec),
			GPUMilli: milli,
			Wait:     scheduled - created,
			QoS:      t.str(colQoS),
		}, "", nil
	})
	if err != nil {
		return nil, rep, err
	}
	sortJobs(jobs)
	return jobs, rep, nil
}
