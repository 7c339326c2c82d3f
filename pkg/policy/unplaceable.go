package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpuq/gpuq/pkg/domain"
)

// Unplaceable says why the policy could never place t on the cluster the
// state knows, whatever runs there: no GPU of its model, none with its
// memory, or more GPUs than all the fitting ones of every node (gangs
// span nodes). It counts every known node, up or not, and every GPU,
// healthy or not: a drained or lost node, an unhealthy GPU may come back.
// nil when t could run, and when the state knows no node yet (a cluster
// still starting says nothing about what it will hold). The error names
// the request's field and the rule.
func Unplaceable(s *domain.State, t *domain.Task) *domain.FieldError {
	if len(s.Nodes) == 0 {
		return nil
	}
	var models []string
	modelOK, memOK, largest := 0, 0, 0
	for _, n := range s.Nodes {
		for _, g := range n.GPUs {
			if !slices.Contains(models, g.Model) {
				models = append(models, g.Model)
			}
			byModel := *t
			byModel.MinGPUMemMiB = 0
			if gpuFits(&byModel, g) {
				modelOK++
				largest = max(largest, g.MemoryMiB)
			}
			if gpuFits(t, g) {
				memOK++
			}
		}
	}
	slices.Sort(models)
	switch {
	case t.GPUModel != "" && modelOK == 0:
		return &domain.FieldError{Field: "gpu_model", Rule: fmt.Sprintf("no node has a GPU whose model contains %q (the cluster has %s)",
			t.GPUModel, strings.Join(models, ", "))}
	case t.MinGPUMemMiB > 0 && memOK == 0:
		return &domain.FieldError{Field: "min_gpu_mem_mib", Rule: fmt.Sprintf("no GPU has %d MiB (%d GiB); the largest has %d MiB (%d GiB)",
			t.MinGPUMemMiB, t.MinGPUMemMiB/1024, largest, largest/1024)}
	case t.GPUs > memOK:
		of := "GPUs"
		if t.GPUModel != "" || t.MinGPUMemMiB > 0 {
			of = "GPUs that fit its gpu_model and min_gpu_mem_mib"
		}
		return &domain.FieldError{Field: "gpus", Rule: fmt.Sprintf("the cluster has %d %s in all (got %d)", memOK, of, t.GPUs)}
	}
	return nil
}
