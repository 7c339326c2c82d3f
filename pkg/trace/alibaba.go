package trace

import (
	"cmp"
	"io"
	"slices"
	"time"
)

// ReadAlibabaOpenB reads an Alibaba openb pod trace such as
// shared/traces/alibaba-openb-2023/pods.csv.
func ReadAlibabaOpenB(r io.Reader) ([]Job, error) {
	jobs, _, err := ReadAlibabaOpenBReport(r)
	return jobs, err
}

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

// Node is one GPU node of the Alibaba openb cluster (gpu_nodes.csv).
type Node struct {
	Name      string // sn
	GPUs      int    // gpu
	Model     string // model: P100, T4, V100M16, V100M32, A10, G2, G3, …
	CPUMilli  int    // cpu_milli
	MemoryMiB int    // memory_mib
}

// ReadAlibabaNodes reads an openb node table (sn, cpu_milli, memory_mib,
// gpu, model) such as shared/traces/alibaba-openb-2023/gpu_nodes.csv,
// sorted by name.
func ReadAlibabaNodes(r io.Reader) ([]Node, error) {
	const (
		format = "alibaba-nodes"
		colSN  = "sn"
		colCPU = "cpu_milli"
		colMem = "memory_mib"
		colGPU = "gpu"
		colMod = "model"
	)
	t, err := newTable(format, r, colSN, colCPU, colMem, colGPU, colMod)
	if err != nil {
		return nil, err
	}
	seen := map[string]int{}
	var nodes []Node
	err = t.each(func() error {
		var n Node
		if n.Name, err = t.required(colSN); err != nil {
			return err
		}
		if l, dup := seen[n.Name]; dup {
			return t.errf(colSN, "node %q already on line %d", n.Name, l)
		}
		seen[n.Name] = t.line()
		if n.CPUMilli, err = t.count(colCPU); err != nil {
			return err
		}
		if n.MemoryMiB, err = t.count(colMem); err != nil {
			return err
		}
		if n.GPUs, err = t.count(colGPU); err != nil {
			return err
		}
		n.Model = t.str(colMod)
		nodes = append(nodes, n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(nodes, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	return nodes, nil
}
