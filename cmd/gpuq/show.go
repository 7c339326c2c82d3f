package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/api"
)

// timeFmt prints times for people: local with the zone's name by default,
// UTC with --utc.
type timeFmt struct{ utc bool }

func (f *timeFmt) add(c *cobra.Command) {
	c.Flags().BoolVar(&f.utc, "utc", false, "print times in UTC (default: local time, with the zone)")
}

func (f timeFmt) in(t time.Time) time.Time {
	if f.utc {
		return t.UTC()
	}
	return t.Local()
}

// at is a time to the second, with its zone: 2026-11-29 22:17:28 CET.
func (f timeFmt) at(t time.Time) string { return f.in(t).Format("2006-01-02 15:04:05 MST") }

// ms is a time to the millisecond, with its zone.
func (f timeFmt) ms(t time.Time) string { return f.in(t).Format("2006-01-02 15:04:05.000 MST") }

// elapsed is a duration for people, to the second (to the millisecond
// under a second).
func elapsed(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// taskElapsed is the time from the task's first start to its end (to now
// while it has not ended); ok false when it never started.
func taskElapsed(v api.TaskView, now time.Time) (time.Duration, bool) {
	if v.StartedAt == nil {
		return 0, false
	}
	end := now
	if v.EndedAt != nil {
		end = *v.EndedAt
	}
	return max(0, end.Sub(*v.StartedAt)), true
}

// gpuHours is an amount of GPU-hours for people: two decimals, four
// under a hundredth (a GPU-second is 0.0003).
func gpuHours(h float64) string {
	if h < 0.01 {
		return fmt.Sprintf("%.4f", h)
	}
	return fmt.Sprintf("%.2f", h)
}

// printTask prints one task as `show` does: what was asked, then when it
// ran, where, where its output is and how it ended.
func printTask(out io.Writer, v api.TaskView, tf timeFmt, now time.Time) {
	w := newTable(out)
	row := func(k string, val any) { fmt.Fprintf(w, "%s:\t%v\n", k, val) }
	row("task", v.TaskID)
	row("name", v.Name)
	row("team", v.Team)
	row("priority", v.Priority)
	row("state", v.State)
	row("gpus", v.GPUs)
	row("hours", v.Hours)
	row("hypothesis", v.Hypothesis)
	row("submitted", tf.at(v.SubmittedAt))
	if v.Deadline != nil {
		row("deadline", tf.at(*v.Deadline)+"  ("+untilText(*v.Deadline, now)+")")
	}
	for _, u := range v.Notify {
		row("notify", u)
	}
	if v.StartedAt != nil {
		row("started", tf.at(*v.StartedAt))
	}
	if v.EndedAt != nil {
		row("ended", tf.at(*v.EndedAt))
	}
	if d, ok := taskElapsed(v, now); ok {
		e := elapsed(d)
		if v.EndedAt == nil {
			e += " (so far)"
		}
		row("elapsed", e)
	}
	printProgress(row, v, tf)
	if v.Node != "" {
		row("node", v.Node)
	}
	for _, p := range v.Placements {
		row("  "+p.Node, strings.Join(p.GPUs, ","))
	}
	if v.LogNode != "" {
		loc := v.LogNode
		if v.LogPath != "" {
			loc += ":" + v.LogPath
		}
		row("log", loc+"  (gpuq logs "+v.TaskID+")")
	}
	if v.ExitCode != nil {
		row("exit_code", *v.ExitCode)
	}
	if v.Reason != "" {
		row("reason", v.Reason)
	}
	if v.Error != "" && !strings.Contains(v.Reason, v.Error) {
		row("error", v.Error)
	}
	if v.Preemptions > 0 {
		row("preemptions", v.Preemptions)
	}
	if v.Checkpoint != "" {
		row("checkpoint", v.Checkpoint)
	}
	if v.ResumeFrom != "" {
		row("resume_from", v.ResumeFrom)
	}
	if v.LostGPUHours > 0 {
		row("lost_gpu_hours", gpuHours(v.LostGPUHours)+"  (work since the last checkpoint, lost to forced preemptions)")
	}
	w.Flush()
	if tail := strings.TrimRight(v.StderrTail, "\n"); tail != "" {
		fmt.Fprintln(out, "stderr (last lines):")
		for _, l := range strings.Split(tail, "\n") {
			fmt.Fprintln(out, "  | "+l)
		}
	}
}

// untilText says how far t is from now: "in 2h30m" or "passed 5m ago".
func untilText(t, now time.Time) string {
	d := t.Sub(now).Round(time.Minute)
	if d < 0 {
		return "passed " + (-d).String() + " ago"
	}
	return "in " + d.String()
}

// printProgress adds a running task's latest progress report and its
// predicted end (the scheduler's run-time predictor, what it rests on).
func printProgress(row func(string, any), v api.TaskView, tf timeFmt) {
	if p := v.Progress; p != nil {
		s := fmt.Sprintf("%.0f %%", 100*p.Fraction)
		if p.Total > 0 {
			s = fmt.Sprintf("step %d of %d (%s)", p.Step, p.Total, s)
		}
		row("progress", s+", reported "+tf.at(p.At))
	}
	if v.PredictedEnd != nil {
		end := tf.at(*v.PredictedEnd)
		if v.PredictedBasis != "" {
			end += "  (" + v.PredictedBasis + ")"
		}
		row("predicted_end", end)
	}
}
