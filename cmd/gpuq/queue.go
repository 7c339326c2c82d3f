package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
)

var allStates = []string{"queued", "dispatched", "running", "preempting", "completed", "failed", "cancelled"}

// queueFilter selects tasks like squeue's -A/-t/-p: each list empty (all)
// or the values a task must have one of.
type queueFilter struct {
	teams, states, priorities []string
}

// list splits a comma-separated flag value.
func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(strings.ToLower(s)); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parseQueueFilter checks the flags' values (exit 2 naming the flag).
func parseQueueFilter(team, state, prio string) (queueFilter, error) {
	f := queueFilter{states: list(state), priorities: list(prio)}
	for _, t := range strings.Split(team, ",") {
		if t = strings.TrimSpace(t); t != "" {
			f.teams = append(f.teams, t)
		}
	}
	for _, s := range f.states {
		if !slices.Contains(allStates, s) {
			return f, invalid("state", fmt.Sprintf("must be one of %s, or several joined by commas (got %q)", strings.Join(allStates, ", "), s))
		}
	}
	for _, p := range f.priorities {
		if _, err := domain.ParsePriority(p); err != nil {
			return f, invalid("priority", fmt.Sprintf("must be one of critical, high, medium, low, or several joined by commas (got %q)", p))
		}
	}
	return f, nil
}

// needsAll reports whether the filter asks for finished tasks.
func (f queueFilter) needsAll() bool {
	return slices.ContainsFunc(f.states, func(s string) bool { return domain.TaskState(s).Terminal() })
}

func (f queueFilter) keep(v api.TaskView) bool {
	return (len(f.teams) == 0 || slices.Contains(f.teams, v.Team)) &&
		(len(f.states) == 0 || slices.Contains(f.states, v.State)) &&
		(len(f.priorities) == 0 || slices.Contains(f.priorities, v.Priority))
}

func newQueue() *cobra.Command {
	var f clientFlags
	var tf timeFmt
	var all bool
	var team, state, prio, output string
	c := &cobra.Command{
		Use:   "queue [--all] [--team T] [--state S] [--priority P] [-o json|wide|name]",
		Short: "List tasks not yet finished (--all: every task)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			filter, err := parseQueueFilter(team, state, prio)
			if err != nil {
				return err
			}
			switch output {
			case "", "json", "wide", "name":
			default:
				return invalid("output", fmt.Sprintf("must be json, wide or name (got %q)", output))
			}
			if f.json {
				output = "json"
			}
			return f.withClient(func(cl *api.Client) error {
				// A page at a time (api.QueueRequest): a long queue does not
				// fit one NATS message.
				vs, err := cl.Queue(all || filter.needsAll())
				if err != nil {
					return err
				}
				kept := []api.TaskView{}
				for _, v := range vs {
					if filter.keep(v) {
						kept = append(kept, v)
					}
				}
				if output == "json" {
					return printJSON(os.Stdout, kept)
				}
				return printQueue(os.Stdout, kept, output, tf, time.Now())
			})
		},
	}
	f.add(c)
	tf.add(c)
	fl := c.Flags()
	fl.BoolVar(&all, "all", false, "include finished tasks")
	fl.StringVar(&team, "team", "", "only these teams (comma-separated)")
	fl.StringVar(&state, "state", "", "only these states (comma-separated: queued, dispatched, running, preempting, completed, failed, cancelled); a finished state implies --all")
	fl.StringVar(&prio, "priority", "", "only these classes (comma-separated)")
	fl.StringVarP(&output, "output", "o", "", "json (as --json), wide (every column) or name (task ids only, one a line)")
	return c
}

// printQueue prints the table: END, ELAPSED and EXIT when a finished task
// is listed (always with wide, which adds STARTED and REASON too); name
// prints only the ids.
func printQueue(out io.Writer, vs []api.TaskView, output string, tf timeFmt, now time.Time) error {
	if output == "name" {
		for _, v := range vs {
			fmt.Fprintln(out, v.TaskID)
		}
		return nil
	}
	wide := output == "wide"
	ends := wide || slices.ContainsFunc(vs, func(v api.TaskView) bool { return v.EndedAt != nil })
	w := newTable(out)
	cols := []string{"TASK", "NAME", "TEAM", "PRIORITY", "GPUS", "STATE", "NODE", "SUBMITTED"}
	if wide {
		cols = append(cols, "STARTED")
	}
	if ends {
		cols = append(cols, "END", "ELAPSED", "EXIT")
	}
	if wide {
		cols = append(cols, "REASON")
	}
	fmt.Fprintln(w, strings.Join(cols, "\t"))
	for _, v := range vs {
		row := []string{v.TaskID, v.Name, v.Team, v.Priority, fmt.Sprint(v.GPUs), v.State, v.Node, tf.at(v.SubmittedAt)}
		if wide {
			row = append(row, when(tf, v.StartedAt))
		}
		if ends {
			el, exit := "", ""
			if d, ok := taskElapsed(v, now); ok {
				el = elapsed(d)
			}
			if v.ExitCode != nil {
				exit = fmt.Sprint(*v.ExitCode)
			}
			row = append(row, when(tf, v.EndedAt), el, exit)
		}
		if wide {
			row = append(row, v.Reason)
		}
		fmt.Fprintln(w, strings.Join(row, "\t"))
	}
	return w.Flush()
}

func when(tf timeFmt, t *time.Time) string {
	if t == nil {
		return ""
	}
	return tf.at(*t)
}
