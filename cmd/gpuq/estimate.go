package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	js "github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
)

func newEstimate() *cobra.Command {
	var f clientFlags
	var req api.EstimateRequest
	c := &cobra.Command{
		Use:   "estimate ID [--what-if-gpus N] [--what-if-priority P]",
		Short: "When the task will start (P50/P90), why it waits, what to do meanwhile",
		Args:  oneID,
		RunE: func(c *cobra.Command, args []string) error {
			req.TaskID = args[0]
			if c.Flags().Changed("what-if-gpus") && req.WhatIfGPUs < 1 {
				return invalid("what-if-gpus", "must be ≥ 1")
			}
			if req.WhatIfPriority != "" {
				if _, err := domain.ParsePriority(req.WhatIfPriority); err != nil {
					return invalid("what-if-priority", "must be one of critical, high, medium, low")
				}
			}
			return f.withClient(func(cl *api.Client) error {
				var a estimate.Advice
				if err := cl.Call(api.OpEstimate, req, &a); err != nil {
					return err
				}
				if f.json {
					return printJSON(os.Stdout, a)
				}
				printAdvice(os.Stdout, a, time.Now())
				return nil
			})
		},
	}
	f.add(c)
	c.Flags().IntVar(&req.WhatIfGPUs, "what-if-gpus", 0, "the estimate with this many GPUs instead (changes nothing)")
	c.Flags().StringVar(&req.WhatIfPriority, "what-if-priority", "", "the estimate at this class instead (changes nothing)")
	return c
}

func printAdvice(w io.Writer, a estimate.Advice, now time.Time) {
	fmt.Fprintf(w, "task %s: %s", a.TaskID, a.State)
	if a.State != string(domain.Queued) {
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, ", position %d\n", a.Position)
	switch a.Method {
	case "never":
		fmt.Fprintf(w, "start: never on this cluster as it is (%s)\n", a.Reason)
	case "capped":
		fmt.Fprintf(w, "start: after %s (in %s) at the earliest: the simulation's budget ran out before it started\n",
			timeFmt{}.at(a.P50Start), until(a.P50Start, now))
	default:
		fmt.Fprintf(w, "start: P50 %s (in %s), P90 %s (in %s)\n", timeFmt{}.at(a.P50Start), until(a.P50Start, now),
			timeFmt{}.at(a.P90Start), until(a.P90Start, now))
	}
	if a.Basis != "" {
		fmt.Fprintf(w, "basis: %s\n", a.Basis)
	}
	if a.Deadline != nil {
		if a.DeadlineAtRisk {
			fmt.Fprintf(w, "deadline: AT RISK: %s\n", a.DeadlineReason)
		} else {
			fmt.Fprintf(w, "deadline: %s (in %s): in time at P90\n", timeFmt{}.at(*a.Deadline), until(*a.Deadline, now))
		}
	}
	why := a.Reason
	if len(a.Blockers) > 0 {
		why += " (" + strings.Join(a.Blockers, ", ") + ")"
	}
	fmt.Fprintf(w, "why:   %s\nnow:   %s\n", why, a.ActionText)
	for _, s := range a.Suggestions {
		fmt.Fprintf(w, "idea:  %s", s.Text)
		if s.Command != "" {
			fmt.Fprintf(w, " — %s", s.Command)
		}
		fmt.Fprintln(w)
	}
	if a.Alert != "" && a.Late != nil && !a.Late.Alarm {
		fmt.Fprintf(w, "late, not broken: %s\n", a.Alert) // the 2× rule crossed for a legitimate reason
	} else if a.Alert != "" {
		fmt.Fprintf(w, "ALERT: %s\n", a.Alert)
	}
}

func until(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return d.String()
}

func newStats() *cobra.Command {
	var f clientFlags
	c := &cobra.Command{
		Use:   "stats [estimates]",
		Short: "The queue now (tasks by state, GPUs held) and how right the estimates were; `estimates`: only those",
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 1 || len(args) == 1 && args[0] != "estimates" {
				return invalid("what", fmt.Sprintf("the only statistics are `estimates`, or none for a summary (got %q)", strings.Join(args, " ")))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			return f.withClient(func(cl *api.Client) error {
				var s map[string]any
				if err := cl.Call(api.OpStats, struct{}{}, &s); err != nil {
					return err
				}
				if len(args) == 1 {
					if f.json {
						return printJSON(os.Stdout, s)
					}
					printEstimateStats(os.Stdout, s)
					return nil
				}
				vs, err := cl.Queue(true)
				if err != nil {
					return err
				}
				sum := summarise(vs)
				if f.json {
					return printJSON(os.Stdout, map[string]any{"tasks": sum.states, "gpus_held": sum.gpus, "teams": sum.teams, "estimates": s})
				}
				printSummary(os.Stdout, sum)
				printEstimateStats(os.Stdout, s)
				return nil
			})
		},
	}
	f.add(c)
	return c
}

func printEstimateStats(w io.Writer, s map[string]any) {
	fmt.Fprintf(w, "judged: %v tasks (waited ≥ 60 s)\nP90 coverage: %.1f%%\nmedian |P50 error|: %s\nalerts raised: %v\n",
		s["n"], 100*num(s["p90_coverage"]), time.Duration(num(s["p50_median_abs_err_s"])*float64(time.Second)).Round(time.Second), s["alerts_raised"])
	if n := num(s["capped"]); n > 0 {
		fmt.Fprintf(w, "capped estimates: %v (the simulation's budget ran out first: lower bounds; the last tasks: %v)\n", n, s["capped_tasks"])
	}
}

// summary counts tasks by state, and the GPUs held, in all and per team.
type summary struct {
	states map[string]int
	gpus   int
	teams  map[string]map[string]int // team → state → tasks, and "gpus_held"
}

func summarise(vs []api.TaskView) summary {
	s := summary{states: map[string]int{}, teams: map[string]map[string]int{}}
	for _, st := range allStates {
		s.states[st] = 0
	}
	for _, v := range vs {
		s.states[v.State]++
		if s.teams[v.Team] == nil {
			s.teams[v.Team] = map[string]int{"gpus_held": 0}
		}
		s.teams[v.Team][v.State]++
		if len(v.Placements) > 0 {
			s.gpus += v.GPUs
			s.teams[v.Team]["gpus_held"] += v.GPUs
		}
	}
	return s
}

func printSummary(w io.Writer, s summary) {
	var parts []string
	for _, st := range allStates {
		parts = append(parts, fmt.Sprintf("%d %s", s.states[st], st))
	}
	fmt.Fprintf(w, "tasks: %s\nGPUs held: %d\n", strings.Join(parts, ", "), s.gpus)
	teams := slices.Sorted(maps.Keys(s.teams))
	for _, t := range teams {
		c := s.teams[t]
		fmt.Fprintf(w, "  %s: %d queued, %d running, %d GPUs held\n", t, c["queued"], c["running"]+c["dispatched"]+c["preempting"], c["gpus_held"])
	}
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

func newWait() *cobra.Command {
	var f clientFlags
	var timeout time.Duration
	var bell bool
	c := &cobra.Command{
		Use:   "wait ID [--timeout D] [--notify]",
		Short: "Block until the task starts (exit 0) or ends without starting (exit 4); shows when, why and what to do",
		Args:  oneID,
		RunE: func(c *cobra.Command, args []string) error {
			id := args[0]
			return f.withClient(func(cl *api.Client) error {
				ctx := c.Context()
				if timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, timeout)
					defer cancel()
				}
				tty := isTTY(os.Stdout) && !f.json
				enc := json.NewEncoder(os.Stdout)
				var last string
				lines := 0
				for {
					var v api.TaskView
					if err := cl.Call(api.OpShow, api.IDRequest{TaskID: id}, &v); err != nil {
						return err
					}
					started := v.StartedAt != nil || v.State == string(domain.Running)
					var a estimate.Advice
					switch {
					case started:
						a = startedAdvice(v, time.Now())
					case !domain.TaskState(v.State).Terminal():
						if err := cl.Call(api.OpEstimate, api.EstimateRequest{TaskID: id}, &a); err != nil && !api.IsNotFound(err) {
							return err
						}
					}
					a.TaskID, a.State = id, v.State
					key := fmt.Sprintf("%s|%d|%s|%s|%s|%.0f", a.State, a.Position, a.Reason, a.Action, a.Alert, a.P50WaitS/60)
					switch {
					case f.json && key != last:
						_ = enc.Encode(a)
					case tty:
						if lines > 0 {
							fmt.Printf("\033[%dA\033[J", lines)
						}
						var b strings.Builder
						printAdvice(&b, a, time.Now())
						fmt.Print(b.String())
						lines = strings.Count(b.String(), "\n")
					case key != last:
						printAdvice(os.Stdout, a, time.Now())
					}
					last = key
					switch {
					case started:
						if !f.json {
							fmt.Println(startedLine(v, timeFmt{}))
						}
						if bell {
							terminalNotify(os.Stderr, fmt.Sprintf("gpuq: %s started on %s", v.Name, v.Node))
						}
						return nil
					case domain.TaskState(v.State).Terminal():
						if bell {
							terminalNotify(os.Stderr, fmt.Sprintf("gpuq: %s ended without starting (%s)", v.Name, v.State))
						}
						return &exitError{exitNotRun, fmt.Errorf("task %s ended without starting: %s", id, v.State)}
					case a.Action == estimate.ChangeRequest:
						return &exitError{exitNotRun, fmt.Errorf("task %s cannot start on this cluster as it is (%s); change the request or cancel it", id, a.Reason)}
					}
					select {
					case <-ctx.Done():
						if errors.Is(ctx.Err(), context.DeadlineExceeded) {
							return &exitError{exitTimeout, fmt.Errorf("task %s has not started after %s", id, timeout)}
						}
						return ctx.Err()
					case <-time.After(time.Second):
					}
				}
			})
		},
	}
	f.add(c)
	c.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (exit 5)")
	c.Flags().BoolVar(&bell, "notify", false, "when it starts or ends: a terminal bell and a desktop notification (OSC 9) on stderr, if a terminal")
	return c
}

// startedAdvice is the advice object of a task that started, as the
// advisor gives it (estimate.AdviseOne): its first start as P50 and P90
// start, nothing else to advise.
func startedAdvice(v api.TaskView, now time.Time) estimate.Advice {
	a := estimate.Advice{TaskID: v.TaskID, State: v.State, Blockers: []string{}, Suggestions: []estimate.Suggestion{}, BasedOnSeq: v.Seq, At: now}
	if v.StartedAt != nil {
		a.P50Start, a.P90Start = *v.StartedAt, *v.StartedAt
	}
	return a
}

// startedLine is what wait prints when the task started: where, when.
func startedLine(v api.TaskView, tf timeFmt) string {
	s := "started"
	if v.Node != "" {
		s += " on " + v.Node
	}
	if v.StartedAt != nil {
		s += " at " + tf.at(*v.StartedAt)
	}
	return s
}

func isTTY(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// lastAdvice reads the latest published advice of a task (no advisor round trip).
func lastAdvice(ctx context.Context, j js.JetStream, id string) (estimate.Advice, error) {
	var a estimate.Advice
	s, err := j.Stream(ctx, events.AdviceStreamName)
	if err != nil {
		return a, err
	}
	m, err := s.GetLastMsgForSubject(ctx, events.AdviceSubject(id))
	if err != nil {
		return a, err
	}
	return a, json.Unmarshal(m.Data, &a)
}
