package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestPrintTask: show prints when the task ran, for how long, where its
// output is and how it ended; the reason matches the state; its latest
// checkpoint, the one it resumes (or resumed) from and the GPU-hours
// forced preemptions lost.
func TestPrintTask(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 22, 17, 28, 0, time.UTC)
	task := func(st domain.TaskState, mod func(*domain.Task)) api.TaskView {
		tk := &domain.Task{ID: "t1", Name: "n", Team: "vision", Priority: domain.High, GPUs: 2, Hours: 1, Hypothesis: "h",
			State: st, SubmittedAt: t0, FirstStarted: t0.Add(time.Minute), Node: "node-1", Reason: "placed in queue order"}
		if st.Terminal() {
			tk.EndedAt = t0.Add(6 * time.Minute)
		}
		mod(tk)
		v := api.View(tk)
		v.LogNode, v.LogPath = "node-1", "/data/agents/node-1/tasks/t1/output.log"
		return v
	}
	now := t0.Add(10 * time.Minute)
	for name, tc := range map[string]struct {
		v    api.TaskView
		want []string
		not  []string
	}{
		"failed": {
			v: task(domain.Failed, func(t *domain.Task) {
				t.ExitCode, t.Error, t.StderrTail = 1, "exit code 1", "Traceback (most recent call last):\nValueError: bad lr\n"
			}),
			want: []string{"started:     2026-11-29 22:18:28 UTC", "ended:       2026-11-29 22:23:28 UTC", "elapsed:     5m0s",
				"log:         node-1:/data/agents/node-1/tasks/t1/output.log  (gpuq logs t1)", "exit_code:   1",
				"reason:      failed: exit code 1", "stderr (last lines):\n  | Traceback (most recent call last):\n  | ValueError: bad lr\n"},
			not: []string{"placed in queue order"},
		},
		"completed": {
			v:    task(domain.Completed, func(*domain.Task) {}),
			want: []string{"elapsed:     5m0s", "exit_code:   0", "reason:      completed: exit code 0"},
			not:  []string{"placed in queue order", "stderr"},
		},
		"running": {
			v:    task(domain.Running, func(*domain.Task) {}),
			want: []string{"started:     2026-11-29 22:18:28 UTC", "elapsed:     9m0s (so far)", "reason:      placed in queue order"},
			not:  []string{"ended:", "exit_code"},
		},
		"preempted, resuming": {
			v: task(domain.Queued, func(t *domain.Task) {
				t.Preemptions, t.Checkpoint, t.ResumeFrom, t.LostGPUSecs = 1, "/ck/t1/step-100.json", "/ck/t1/step-100.json", 0.42*3600
			}),
			want: []string{"preemptions:     1", "checkpoint:      /ck/t1/step-100.json", "resume_from:     /ck/t1/step-100.json",
				"lost_gpu_hours:  0.42  (work since the last checkpoint, lost to forced preemptions)"},
		},
		"completed after a resume": {
			v: task(domain.Completed, func(t *domain.Task) {
				t.Preemptions, t.Checkpoint, t.ResumeFrom, t.LostGPUSecs = 2, "/ck/t1/step-300.json", "/ck/t1/step-200.json", 3
			}),
			want: []string{"checkpoint:      /ck/t1/step-300.json", "resume_from:     /ck/t1/step-200.json", "lost_gpu_hours:  0.0008"},
		},
		"a checkpoint, nothing lost": {
			v:    task(domain.Running, func(t *domain.Task) { t.Checkpoint = "s3://ck/t1/7" }),
			want: []string{"checkpoint:  s3://ck/t1/7"},
			not:  []string{"resume_from", "lost_gpu_hours"},
		},
		"running, with progress and a predicted end": {
			v: func() api.TaskView {
				v := task(domain.Running, func(t *domain.Task) {
					t.StartedAt, t.Placements = t.FirstStarted, []events.Placement{{Node: "node-1", GPUs: []string{"GPU-0", "GPU-1"}}}
					t.ProgressStep, t.ProgressTotal, t.ProgressFraction, t.ProgressAt = 400, 1000, 0.4, t0.Add(8*time.Minute)
				})
				end := t0.Add(43 * time.Minute)
				v.PredictedEnd, v.PredictedBasis = &end, "progress 40 %"
				return v
			}(),
			want: []string{"step 400 of 1000 (40 %), reported 2026-11-29 22:25:28 UTC", "2026-11-29 23:00:28 UTC  (progress 40 %)"},
		},
		"running, a report of an earlier run": {
			v: task(domain.Running, func(t *domain.Task) {
				t.StartedAt, t.Placements = t.FirstStarted, []events.Placement{{Node: "node-1", GPUs: []string{"GPU-0"}}}
				t.ProgressFraction, t.ProgressAt = 0.4, t0
			}),
			not: []string{"progress", "predicted_end"},
		},
		"queued": {
			v:    task(domain.Queued, func(t *domain.Task) { t.FirstStarted, t.Reason = time.Time{}, "" }),
			want: []string{"submitted:   2026-11-29 22:17:28 UTC"},
			not:  []string{"started:", "elapsed:", "exit_code", "deadline", "notify"},
		},
		"a deadline and its own destinations": {
			v: task(domain.Queued, func(t *domain.Task) {
				t.FirstStarted, t.Deadline, t.Notify = time.Time{}, t0.Add(6*time.Hour), []string{"https://hooks.example.com/a", "https://b.example/x"}
			}),
			want: []string{"deadline:    2026-11-30 04:17:28 UTC  (in 5h50m0s)", "notify:      https://hooks.example.com/a", "notify:      https://b.example/x"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			printTask(&b, tc.v, timeFmt{utc: true}, now)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("missing %q in:\n%s", w, b.String())
				}
			}
			for _, w := range tc.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("unexpected %q in:\n%s", w, b.String())
				}
			}
		})
	}
}
