package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// TestUnplaceable: a task no node could ever hold is named with its field
// and the rule; the check counts every node and GPU.
func TestUnplaceable(t *testing.T) {
	st := domain.NewState()
	seq := uint64(0)
	node := func(name, model string, n, mib int, healthy bool) {
		var gs []events.GPU
		for i := 0; i < n; i++ {
			gs = append(gs, events.GPU{UUID: name + "-" + string(rune('a'+i)), Index: i, Model: model, MemoryMiB: mib, Healthy: healthy})
		}
		seq++
		st.Apply(events.Record{Seq: seq, Event: events.Available{Node: name, GPUs: gs}, Envelope: events.Envelope{Time: time.Now()}})
	}
	node("node-1", "NVIDIA A100-SXM4-80GB", 8, 81920, true)
	node("node-2", "NVIDIA H100 80GB HBM3", 4, 81559, false) // unhealthy now, not for ever
	for name, tc := range map[string]struct {
		task  domain.Task
		field string
		rule  string
	}{
		"fits":                {task: domain.Task{GPUs: 8}},
		"a gang of all":       {task: domain.Task{GPUs: 12}},
		"more than all":       {task: domain.Task{GPUs: 13}, field: "gpus", rule: "the cluster has 12 GPUs in all (got 13)"},
		"the model":           {task: domain.Task{GPUs: 4, GPUModel: "h100"}},
		"no such model":       {task: domain.Task{GPUs: 1, GPUModel: "TPU"}, field: "gpu_model", rule: `no node has a GPU whose model contains "TPU"`},
		"more of a model":     {task: domain.Task{GPUs: 5, GPUModel: "H100"}, field: "gpus", rule: "the cluster has 4 GPUs that fit"},
		"no GPU that big":     {task: domain.Task{GPUs: 1, MinGPUMemMiB: 100000 * 1024}, field: "min_gpu_mem_mib", rule: "the largest has 81920 MiB (80 GiB)"},
		"memory of the model": {task: domain.Task{GPUs: 1, GPUModel: "H100", MinGPUMemMiB: 81920}, field: "min_gpu_mem_mib", rule: "the largest has 81559 MiB"},
	} {
		t.Run(name, func(t *testing.T) {
			got := policy.Unplaceable(st, &tc.task)
			switch {
			case tc.field == "" && got != nil:
				t.Errorf("refused: %v", got)
			case tc.field != "" && (got == nil || got.Field != tc.field || !strings.Contains(got.Rule, tc.rule)):
				t.Errorf("got %v, want %s: …%s…", got, tc.field, tc.rule)
			}
		})
	}
	if got := policy.Unplaceable(domain.NewState(), &domain.Task{GPUs: 1000}); got != nil {
		t.Errorf("no node known yet: %v, want nil", got)
	}
}
