// Readers and filters only the tests use (the simulator reads traces with
// Load, LoadReport and the *Report and ReadPhillyVCs readers).
package trace

import (
	"cmp"
	"io"
	"slices"
)

// ReadAlibabaOpenB reads an Alibaba openb pod trace such as
// shared/traces/alibaba-openb-2023/pods.csv.
func ReadAlibabaOpenB(r io.Reader) ([]Job, error) {
	jobs, _, err := ReadAlibabaOpenBReport(r)
	return jobs, err
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
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		var n Node
		if n.Name, err = t.required(colSN); err != nil {
			return nil, err
		}
		if l, dup := seen[n.Name]; dup {
			return nil, t.errf(colSN, "node %q already on line %d", n.Name, l)
		}
		seen[n.Name] = t.line()
		if n.CPUMilli, err = t.count(colCPU); err != nil {
			return nil, err
		}
		if n.MemoryMiB, err = t.count(colMem); err != nil {
			return nil, err
		}
		if n.GPUs, err = t.count(colGPU); err != nil {
			return nil, err
		}
		n.Model = t.str(colMod)
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	return nodes, nil
}

// ReadPhilly reads a Philly job trace (submit_time, duration_s, num_gpus,
// vc) such as shared/traces/philly/jobs-2017-10-11.csv.
func ReadPhilly(r io.Reader) ([]Job, error) {
	jobs, _, err := ReadPhillyReport(r)
	return jobs, err
}

// FilterVCs keeps the jobs whose VC is a key of vcs (as HeliosArtifact
// does with its VC list) and says how many it left out. Order is kept.
func FilterVCs(jobs []Job, vcs map[string]int) (kept []Job, dropped int) {
	kept = make([]Job, 0, len(jobs))
	for _, j := range jobs {
		if _, ok := vcs[j.VC]; ok {
			kept = append(kept, j)
		} else {
			dropped++
		}
	}
	return kept, dropped
}

// ByVC splits jobs by VC, keeping their order, for simulations that
// schedule each VC on its own nodes (HeliosArtifact's setup).
func ByVC(jobs []Job) map[string][]Job {
	out := map[string][]Job{}
	for _, j := range jobs {
		out[j.VC] = append(out[j.VC], j)
	}
	return out
}

// DroppedTotal is the number of rows dropped for any reason.
func (r Report) DroppedTotal() int {
	n := 0
	for _, c := range r.Dropped {
		n += c
	}
	return n
}
