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
	var rep Report
	t, err := newTable(FormatAlibabaOpenB, r, colName, colGPUs, colMilli, colSpec, colQoS, colPhase,
		colCreated, colDeleted, colScheduled)
	if err != nil {
		return nil, rep, err
	}
	seen := map[string]int{} // name → line
	var jobs []Job
	for {
		ok, err := t.next()
		if err != nil {
			return nil, rep, err
		}
		if !ok {
			break
		}
		rep.Rows++
		name, err := t.required(colName)
		if err != nil {
			return nil, rep, err
		}
		if l, dup := seen[name]; dup {
			return nil, rep, t.errf(colName, "pod %q already on line %d", name, l)
		}
		seen[name] = t.line()
		gpus, err := t.count(colGPUs)
		if err != nil {
			return nil, rep, err
		}
		milli, err := t.count(colMilli)
		if err != nil {
			return nil, rep, err
		}
		if milli > 1000 {
			return nil, rep, t.errf(colMilli, "over 1000 thousandths of a GPU: %d", milli)
		}
		cs, err := t.required(colCreated)
		if err != nil {
			return nil, rep, err
		}
		created, err := t.intSeconds(colCreated, cs)
		if err != nil {
			return nil, rep, err
		}
		var scheduled, deleted time.Duration
		ss, ds := t.str(colScheduled), t.str(colDeleted)
		if ss != "" {
			if scheduled, err = t.intSeconds(colScheduled, ss); err != nil {
				return nil, rep, err
			}
		}
		if ds != "" {
			if deleted, err = t.intSeconds(colDeleted, ds); err != nil {
				return nil, rep, err
			}
		}
		switch {
		case gpus == 0:
			rep.drop(DropZeroGPUs)
			continue
		case ss == "":
			rep.drop(DropNotStarted)
			continue
		case ds == "":
			rep.drop(DropNotEnded)
			continue
		case scheduled < created:
			rep.drop(DropNegativeWait)
			continue
		case deleted < scheduled:
			rep.drop(DropNegativeDuration)
			continue
		}
		jobs = append(jobs, Job{
			ID:       name,
			Submit:   created,
			Duration: deleted - scheduled,
			GPUs:     gpus,
			Status:   t.str(colPhase),
			GPUModel: t.str(colSpec),
			GPUMilli: milli,
			Wait:     scheduled - created,
			QoS:      t.str(colQoS),
		})
	}
	rep.Kept = len(jobs)
	sortJobs(jobs)
	return jobs, rep, nil
}
