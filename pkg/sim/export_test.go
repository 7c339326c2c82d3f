package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/audit"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/trace"
)

// exportOf runs the gpuq policy on tasks and returns its log as `gpuq
// audit export` writes it.
func exportOf(t *testing.T, cfg Config, tasks []Task) []byte {
	t.Helper()
	d := newDriver(context.Background(), cfg, policy.New(cfg.Options), tasks, false)
	if _, err := d.simulate(cfg.Nodes, cfg.GPUsPerNode); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := d.log.Read(context.Background(), 1, "", func(m events.Stored) error {
		line, err := json.Marshal(audit.LineOf(m))
		b.Write(line)
		b.WriteByte('\n')
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestReadExportRoundTrip simulates the synthetic scenario under gpuq —
// classes, teams, a fifth of the tasks not preemptible, checkpoints every
// 10 min so that preemptions lose work — exports its log and reads it
// back: every task comes back as the job it was, with the work it needed
// (not the run time its preemptions wasted), its own class, team,
// estimate and preemptibility.
func TestReadExportRoundTrip(t *testing.T) {
	cfg, _, tasks := syntheticScenario(t)
	cfg.CheckpointEvery = 10 * time.Minute
	MarkPreemptible(tasks, 0.8, 1)
	exp := exportOf(t, cfg, tasks)

	jobs, rep, err := ReadExport(bytes.NewReader(exp))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rows != len(tasks) || rep.Kept != len(tasks) || len(rep.Dropped) != 0 {
		t.Fatalf("report %+v, want %d tasks all kept", rep, len(tasks))
	}
	want := make([]trace.Job, len(tasks))
	for i, tk := range tasks {
		want[i] = trace.Job{ID: tk.ID, VC: tk.Team, Submit: tk.Submit - tasks[0].Submit, SubmitTime: epoch.Add(tk.Submit),
			Duration: tk.Duration, GPUs: tk.GPUs, GPUMilli: 1000, Status: "completed", Class: tk.Priority.String(),
			Estimate: time.Duration(tk.Hours * float64(time.Hour)), NotPreemptible: tk.Fixed}
	}
	// Jobs come in submit order, then by ID; the tasks are in submit order.
	byID := map[string]trace.Job{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	for _, w := range want {
		g := byID[w.ID]
		if d := g.Estimate - w.Estimate; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: estimate %v, want %v", w.ID, g.Estimate, w.Estimate)
		}
		g.Estimate = w.Estimate
		if diff := cmp.Diff(w, g); diff != "" {
			t.Errorf("%s (-want +got):\n%s", w.ID, diff)
		}
	}
	preempted := 0
	for _, l := range bytes.Split(exp, []byte("\n")) {
		if bytes.Contains(l, []byte(`"type":"preempted"`)) {
			preempted++
		}
	}
	if preempted == 0 {
		t.Error("no task was preempted: the round trip does not test the work lost")
	}
}

// TestReadExportDrops reads the audit package's frozen archive (a task
// completed, one still running) with a task submitted after it that
// never starts: one job, one dropped for each reason.
func TestReadExportDrops(t *testing.T) {
	b, err := os.ReadFile("../audit/testdata/archive-v1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	late := `{"seq":9,"subject":"gpuq.task.late.submitted","time":"2025-01-06T09:02:00Z","data":{"id":"01a233f0-092a-7961-bfb6-bf0ba65a4599","type":"submitted","v":1,"time":"2025-01-06T09:02:00Z","data":{"task_id":"late","name":"late","team":"nlp","priority":"low","gpus":1,"hours":2,"hypothesis":"h","command":"c","preemptible":false,"grace_s":120,"submitted_at":"2025-01-06T09:02:00Z"}}}`
	jobs, rep, err := ReadExport(strings.NewReader(string(b) + late + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []trace.Job{{ID: "hog", VC: "vision", SubmitTime: time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC), Duration: 104 * time.Second,
		GPUs: 4, GPUMilli: 1000, Status: "completed", Class: "medium", Estimate: time.Hour}}
	if diff := cmp.Diff(want, jobs); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	wantRep := trace.Report{Rows: 3, Kept: 1, Dropped: map[trace.DropReason]int{trace.DropNotEnded: 1, trace.DropNotStarted: 1}}
	if diff := cmp.Diff(wantRep, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if _, _, err := ReadExport(strings.NewReader("{\"seq\":0}\n")); err == nil || !strings.Contains(err.Error(), "seq") {
		t.Errorf("a bad line: err %v, want one naming seq", err)
	}
}
