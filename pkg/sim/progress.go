package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

// ProgressModel is the jobs' progress reports (gpuq sim --progress-model
// share=S,early=E[,every=D],seed=N): a deterministic model of what a task
// socket's POST /v1/progress gives the scheduler and the advisor.
//
//   - share: the share of the tasks that report their progress (one draw
//     per task); 0, the default, none — the simulation is then the same,
//     byte for byte, as without the model.
//   - early: the share of the reporting tasks that end before their
//     planned total, as failed and killed runs do: such a task plans a
//     total of its real run time over a share drawn uniformly in
//     [0.1, 0.9], reports against that plan, and ends (completes) at its
//     real run time — its reports promise more than it runs.
//   - every: the interval of a task's run between two reports (default
//     10m, the first that far into each run).
//   - seed: the draws' seed (default 1).
//
// A report gives the fraction of the planned total done — the work of
// earlier runs kept by checkpoints plus this run's so far — and is
// appended to the log as a progress_reported record of the task's node,
// so that the scheduler's and the advisor's predictors read it from the
// folded state as they do in production.
type ProgressModel struct {
	Share, Early float64
	Every        time.Duration
	Seed         uint64
}

// DefaultProgressEvery is a reporting task's interval between reports.
const DefaultProgressEvery = 10 * time.Minute

// Early enders end at a share of their planned total drawn in
// [earlyMin, earlyMax].
const earlyMin, earlyMax = 0.1, 0.9

// ParseProgressModel reads share=S,early=E[,every=D][,seed=N] ("" or
// "off": no reports).
func ParseProgressModel(s string) (ProgressModel, error) {
	m := ProgressModel{Every: DefaultProgressEvery, Seed: 1}
	if s == "" || s == "off" {
		return m, nil
	}
	kv, err := keyValues(s)
	if err != nil {
		return ProgressModel{}, err
	}
	for _, k := range sortedKeys(kv) {
		v := kv[k]
		switch k {
		case "share", "early":
			f, err := finite(k, v)
			if err != nil {
				return ProgressModel{}, err
			}
			if f < 0 || f > 1 {
				return ProgressModel{}, fmt.Errorf("%s must be between 0 and 1 (got %s)", k, v)
			}
			if k == "share" {
				m.Share = f
			} else {
				m.Early = f
			}
		case "every":
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Second || d > 24*time.Hour {
				return ProgressModel{}, fmt.Errorf("every must be a duration from 1s to 24h (got %q)", v)
			}
			m.Every = d
		case "seed":
			if m.Seed, err = strconv.ParseUint(v, 10, 64); err != nil {
				return ProgressModel{}, fmt.Errorf("seed must be a non-negative integer (got %q)", v)
			}
		default:
			return ProgressModel{}, fmt.Errorf("unknown key %q (want share, early, every, seed)", k)
		}
	}
	return m, nil
}

// On reports whether any task reports.
func (m ProgressModel) On() bool { return m.Share > 0 }

// String is the canonical form ("" when off, so that the scenario of a
// run without reports is the same as without the model).
func (m ProgressModel) String() string {
	if !m.On() {
		return ""
	}
	every := m.Every
	if every <= 0 {
		every = DefaultProgressEvery
	}
	return fmt.Sprintf("share=%s,early=%s,every=%s,seed=%d", num(m.Share), num(m.Early), every, m.Seed)
}

// plans is each task's planned total (0: it does not report): three
// draws per task, in order, from the model's own PCG(seed), so that the
// model shifts no other draw.
func (m ProgressModel) plans(tasks []Task) []time.Duration {
	if !m.On() {
		return nil
	}
	r := rand.New(rand.NewPCG(m.Seed, 0x70726f67))
	out := make([]time.Duration, len(tasks))
	for i, t := range tasks {
		reports, early, share := r.Float64() < m.Share, r.Float64() < m.Early, earlyMin+(earlyMax-earlyMin)*r.Float64()
		switch {
		case !reports:
		case early:
			out[i] = time.Duration(float64(t.Duration) / share)
		default:
			out[i] = t.Duration
		}
	}
	return out
}

// The driver's side: a reporting task's reports are due every
// progressEvery of each run (d.reports, by run generation as the ends).

// scheduleReport plans task i's next report, every after now, in its
// current run.
func (d *driver) scheduleReport(i int) {
	if d.plan == nil || d.plan[i] <= 0 {
		return
	}
	heap.Push(&d.reportsDue, taskEnd{at: d.vt + d.progressEvery, task: i, gen: d.runs[i].gen})
}

// reportLive: a report due is still of the task's run, and it runs.
func (d *driver) reportLive(c taskEnd) bool {
	return d.ckptLive(c)
}

// reports appends the progress reports due now and schedules each task's
// next one.
func (d *driver) reports() error {
	for d.reportsDue.Len() > 0 && d.reportsDue[0].at <= d.vt {
		c := heap.Pop(&d.reportsDue).(taskEnd)
		if !d.reportLive(c) {
			continue
		}
		r := &d.runs[c.task]
		done := r.done + d.vt - r.started
		f := min(done.Seconds()/d.plan[c.task].Seconds(), 1)
		t := d.st.Tasks[d.tasks[c.task].ID]
		if _, err := d.append(events.ProgressReported{TaskID: t.ID, Node: t.Node, Fraction: f}, "", nil); err != nil {
			return err
		}
		heap.Push(&d.reportsDue, taskEnd{at: d.vt + d.progressEvery, task: c.task, gen: c.gen})
	}
	return nil
}
