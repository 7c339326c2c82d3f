package bench

import (
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// ciEnv is the environment a CI runner exports with a submission (the
// CLI's default is --export ALL, minus secrets and GPUQ_*): eight
// variables, about 250 bytes.
var ciEnv = map[string]string{
	"PATH":       "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME":       "/home/ci",
	"USER":       "ci",
	"LANG":       "C.UTF-8",
	"SHELL":      "/bin/bash",
	"CI":         "true",
	"GIT_COMMIT": "4f1c2d9e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e",
	"HF_HOME":    "/scratch/ci/hf",
}

// request is the i-th submission of the benchmarks' workload: what `gpuq
// submit` sends from a CI job, with a unique idempotency key. The caller
// sets GPUs, priority, hours and preemptibility for its scenario.
func request(i int) domain.Request {
	n := strconv.Itoa(i)
	return domain.Request{
		Name:           "sweep-lr-" + n,
		Team:           "team" + strconv.Itoa(i%8),
		Priority:       "medium",
		GPUs:           1,
		Hours:          4,
		Hypothesis:     "a lower warmup keeps the loss under 2.1 at step 20k (sweep point " + n + ")",
		Command:        "python train.py --config configs/llama-1b.yaml --lr 3e-4 --seed " + n,
		IdempotencyKey: "ci-run-20250303-" + n,
		Env:            maps.Clone(ciEnv),
		Dir:            "/home/ci/builds/llm/train",
	}
}

// submittedOf is the event the submitter appends for a validated request
// (services/submitter's submit).
func submittedOf(r domain.Request, id string, now time.Time) events.Submitted {
	return events.Submitted{
		TaskID: id, Name: r.Name, Team: r.Team, Priority: r.Priority, GPUs: r.GPUs,
		Hours: r.Hours, Hypothesis: r.Hypothesis, Command: r.Command, Preemptible: !r.NoPreempt,
		PreemptSignal: r.PreemptSignal, GraceS: r.GraceS, GPUModel: r.GPUModel,
		MinGPUMemMiB: r.MinGPUMemMiB, IdempotencyKey: r.IdempotencyKey, SubmittedAt: now.UTC(), Env: r.Env, Dir: r.Dir,
	}
}

// submitMsgID is the submitter's Nats-Msg-Id of a keyed submission
// (services/submitter's submitMsgID).
func submitMsgID(team, key string) string { return "submit:" + team + ":" + key }

// nodeName and gpuUUID name the benchmarks' nodes and GPUs.
func nodeName(i int) string             { return fmt.Sprintf("node%04d", i) }
func gpuUUID(node string, i int) string { return "GPU-" + node + "-" + strconv.Itoa(i) }

// available is a node's inventory: per GPUs of 80 GiB H100s, all healthy.
func available(name string, per int) events.Available {
	a := events.Available{Node: name, BootID: "boot-" + name, FreeGPUs: per, Driver: "550.54.15"}
	for i := 0; i < per; i++ {
		a.GPUs = append(a.GPUs, events.GPU{UUID: gpuUUID(name, i), Index: i, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true})
	}
	return a
}

// taskID is a task id of the same shape as the submitter's (a UUID v7
// string, 36 characters), derived from i so that history logs are cheap to
// generate.
func taskID(i int) string {
	return fmt.Sprintf("0195%04x-0000-7000-8000-%012x", i>>48&0xffff, i&0xffffffffffff)
}

// history calls emit for the events of a busy cluster, in log order:
// nodes×8 GPUs become available, then tasks go through submitted →
// dispatched → started → completed, overlapped so that about 2,000 are
// queued and 500 running at any time (fewer on small clusters). It stops
// after total events. Every event is one the fold applies.
func history(nodes, total int, emit func(e events.Event, at time.Time) error) error {
	const per = 8
	gpus := nodes * per
	queued, run := 2000, min(500, gpus/2)
	if run < 1 {
		run = 1
	}
	at := time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)
	n := 0
	out := func(e events.Event) error {
		if n >= total {
			return errDone
		}
		n++
		return emit(e, at)
	}
	for i := 0; i < nodes; i++ {
		if err := out(available(nodeName(i), per)); err != nil {
			return ignoreDone(err)
		}
	}
	for step := 0; ; step++ {
		at = at.Add(10 * time.Millisecond)
		r := request(step)
		r.Priority, r.PreemptSignal, r.GraceS = []string{"low", "medium", "high"}[step%3], "SIGUSR1", 120
		if err := out(submittedOf(r, taskID(step), at)); err != nil {
			return ignoreDone(err)
		}
		// Task j is dispatched queued steps after its submission, starts
		// one step later and completes run steps after its dispatch; its
		// GPU (j mod gpus) is free again before task j+gpus needs it.
		if j := step - queued; j >= 0 {
			g := j % gpus
			node := nodeName(g / per)
			d := events.Dispatched{TaskID: taskID(j), Placements: []events.Placement{{Node: node, GPUs: []string{gpuUUID(node, g%per)}}},
				BasedOnSeq: uint64(n), Reason: "placed in queue order"}
			if err := out(d); err != nil {
				return ignoreDone(err)
			}
		}
		if j := step - queued - 1; j >= 0 {
			node := nodeName(j % gpus / per)
			if err := out(events.Started{TaskID: taskID(j), Node: node, PID: 1000 + j%30000, LogDir: "/var/lib/gpuq/tasks/" + taskID(j)}); err != nil {
				return ignoreDone(err)
			}
		}
		if j := step - queued - run; j >= 0 {
			if err := out(events.Completed{TaskID: taskID(j), Node: nodeName(j % gpus / per)}); err != nil {
				return ignoreDone(err)
			}
		}
	}
}

type doneErr struct{}

func (doneErr) Error() string { return "done" }

var errDone error = doneErr{}

func ignoreDone(err error) error {
	if err == errDone {
		return nil
	}
	return err
}
