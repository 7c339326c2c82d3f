package sim

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gpuq/gpuq/pkg/audit"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/trace"
)

// FormatExport is the trace format of an export of the live log (`gpuq
// audit export`): `gpuq sim --trace FILE --format audit-export` replays an
// operator's own cluster under another policy or size.
const FormatExport = "audit-export"

// LoadExport reads an export file (ReadExport).
func LoadExport(path string) ([]trace.Job, trace.Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, trace.Report{}, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	jobs, rep, err := ReadExport(f)
	if err != nil {
		return nil, rep, fmt.Errorf("%s: %w", path, err)
	}
	return jobs, rep, nil
}

// ReadExport folds an export of the live log (the archive format of `gpuq
// audit export`, audit.ReadLines) as every service does, and turns each
// task that ran and ended (completed, failed, or cancelled while
// running) into a job:
//
//   - Submit is its submitted_at from the first task's; SubmitTime is
//     submitted_at (UTC).
//   - Duration is the work it needed: its run time over every run
//     (domain.Task.RunSeconds) less the work its preemptions lost
//     (LostGPUSecs ÷ GPUs), at least one second, in whole seconds.
//   - GPUs, VC (its team), Class, Estimate (its hours) and
//     NotPreemptible are the task's own, as last amended.
//
// A task that never started (queued at the end of the export, or
// cancelled while queued) is dropped as trace.DropNotStarted; one still
// dispatched, running or preempting at the end as trace.DropNotEnded.
// Records the fold skips are skipped here too. GPU models and memory are
// not simulated (the simulated GPUs are one model). Jobs come sorted by
// Submit, then ID.
func ReadExport(r io.Reader) ([]trace.Job, trace.Report, error) {
	var rep trace.Report
	lines, err := audit.ReadLines(r)
	if err != nil {
		return nil, rep, fmt.Errorf("%s: %w", FormatExport, err)
	}
	st := domain.NewState()
	for _, l := range lines {
		st.Apply(events.DecodeRecord(l.Stored()))
	}
	ids := make([]string, 0, len(st.Tasks))
	for id := range st.Tasks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var jobs []trace.Job
	var first time.Time
	for _, id := range ids {
		t := st.Tasks[id]
		rep.Rows++
		switch {
		case t.FirstStarted.IsZero():
			rep.Dropped = inc(rep.Dropped, trace.DropNotStarted)
			continue
		case !t.State.Terminal():
			rep.Dropped = inc(rep.Dropped, trace.DropNotEnded)
			continue
		}
		work := t.RunSeconds
		if t.GPUs > 0 {
			work -= t.LostGPUSecs / float64(t.GPUs)
		}
		secs := max(1, int64(work+0.5))
		job := trace.Job{ID: t.ID, VC: t.Team, SubmitTime: t.SubmittedAt.UTC(), Duration: time.Duration(secs) * time.Second,
			GPUs: t.GPUs, GPUMilli: 1000, Status: string(t.State), GPUModel: t.GPUModel,
			Class: t.Priority.String(), Estimate: time.Duration(t.Hours * float64(time.Hour)), NotPreemptible: !t.Preemptible}
		if first.IsZero() || job.SubmitTime.Before(first) {
			first = job.SubmitTime
		}
		jobs = append(jobs, job)
		rep.Kept++
	}
	for i := range jobs {
		jobs[i].Submit = jobs[i].SubmitTime.Sub(first)
	}
	slices.SortFunc(jobs, func(a, b trace.Job) int {
		if c := cmp.Compare(a.Submit, b.Submit); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return jobs, rep, nil
}

func inc(m map[trace.DropReason]int, why trace.DropReason) map[trace.DropReason]int {
	if m == nil {
		m = map[trace.DropReason]int{}
	}
	m[why]++
	return m
}
