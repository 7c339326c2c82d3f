package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/audit"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/policy/policyflag"
)

// policyFlags are the policy flags (pkg/policy/policyflag, the
// scheduler's very flags) of the commands that run the one policy: dev,
// and over the past replay, explain and audit verify (give them the
// scheduler's values).
type policyFlags struct{ v *policyflag.Values }

func (p *policyFlags) add(c *cobra.Command) { p.v = policyflag.Bind(policyflag.Pflag(c.Flags())) }

// options are the flags' policy options, exit 2 when invalid.
func (p *policyFlags) options() (policy.Options, error) {
	o, err := p.v.Options()
	if err != nil {
		return o, &exitError{exitInvalid, err}
	}
	return o, nil
}

// withRecords is the policy the flags give and the whole log, read as a
// fold does: what replay and explain run the policy over.
func (p *policyFlags) withRecords(ctx context.Context, f *clientFlags) (*policy.Policy, []events.Record, error) {
	o, err := p.options()
	if err != nil {
		return nil, nil, err
	}
	recs, err := readRecords(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	return policy.New(o), recs, nil
}

// readRecords reads the whole log as a fold does.
func readRecords(ctx context.Context, f *clientFlags) ([]events.Record, error) {
	var recs []events.Record
	err := f.withLog(func(l *jetstream.Log) error {
		_, err := events.ReadAll(ctx, l, 1, "", func(r events.Record) error {
			recs = append(recs, r)
			return nil
		})
		return err
	})
	return recs, err
}

func newReplay() *cobra.Command {
	var (
		f   clientFlags
		p   policyFlags
		seq uint64
		at  string
		all bool
	)
	c := &cobra.Command{
		Use:   "replay (--seq N | --at RFC3339)",
		Short: "The queue as it was at a sequence or a time: queued tasks in order with their reasons, running tasks, nodes",
		Long: `Folds the log up to a sequence (--seq) or a time (--at: the last record at
or before it) and shows the state there: the queued tasks in the policy's
order with the reason each waited (the policy's own, run on that state at
that time), the tasks dispatched, running or preempting with their
placements, and the nodes with their free and unhealthy GPUs. A task
submitted later does not appear. Give it the scheduler's policy flags.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			seqSet, atSet := c.Flags().Changed("seq"), c.Flags().Changed("at")
			switch {
			case seqSet == atSet:
				return usageError(c, errors.New("give exactly one of --seq and --at"))
			case seqSet && seq == 0:
				return invalid("seq", "must be ≥ 1")
			}
			var when time.Time
			if atSet {
				t, err := time.Parse(time.RFC3339Nano, at)
				if err != nil {
					return invalid("at", fmt.Sprintf("must be an RFC 3339 time such as 2026-11-29T22:17:28Z (got %q)", at))
				}
				when = t
			}
			pol, recs, err := p.withRecords(c.Context(), &f)
			if err != nil {
				return err
			}
			last := uint64(0)
			if len(recs) > 0 {
				last = recs[len(recs)-1].Seq
			}
			if atSet {
				if seq = audit.SeqAt(recs, when); seq == 0 {
					return invalid("at", "is before the log's first record")
				}
			} else if seq > last {
				return invalid("seq", fmt.Sprintf("the log ends at sequence %d (got %d)", last, seq))
			}
			v := audit.Replay(recs, pol, seq, all)
			if f.json {
				return printJSON(os.Stdout, v)
			}
			printView(v)
			return nil
		},
	}
	c.Flags().Uint64Var(&seq, "seq", 0, "fold up to and including this sequence")
	c.Flags().StringVar(&at, "at", "", "fold up to this time (RFC 3339)")
	c.Flags().BoolVar(&all, "all", false, "also list the tasks finished by then")
	f.add(c)
	p.add(c)
	return c
}

func printView(v audit.View) {
	fmt.Printf("as of sequence %d, %s\n\n", v.Seq, v.Time.Local().Format("2006-01-02 15:04:05.000"))
	w := newTable(os.Stdout)
	fmt.Fprintln(w, "TASK\tNAME\tTEAM\tPRIORITY\tGPUS\tSTATE\tPOS\tREASON / PLACEMENT")
	for _, t := range v.Tasks {
		pos, what := "", ""
		if t.State == "queued" {
			pos, what = fmt.Sprint(t.Position), t.Reason
			if len(t.Blocking) > 0 {
				what += " (" + strings.Join(t.Blocking, ", ") + ")"
			}
		} else {
			var ps []string
			for _, p := range t.Placements {
				ps = append(ps, fmt.Sprintf("%s×%d", p.Node, len(p.GPUs)))
			}
			what = strings.Join(ps, " ")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", t.TaskID, t.Name, t.Team, t.Priority, t.GPUs, t.State, pos, what)
	}
	w.Flush()
	fmt.Println()
	w = newTable(os.Stdout)
	fmt.Fprintln(w, "NODE\tSTATE\tGPUS\tFREE\tUNHEALTHY")
	for _, n := range v.Nodes {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\n", n.Node, n.State, n.GPUs, n.FreeGPUs, len(n.Unhealthy))
	}
	w.Flush()
}

func newExplain() *cobra.Command {
	var (
		f clientFlags
		p policyFlags
	)
	c := &cobra.Command{
		Use:   "explain ID",
		Short: "Why a task waited: its whole wait broken down into causes, with the tasks that blocked it",
		Long: `Folds the whole log and, at every record while the task waited (from its
submission to its start, and from each preemption to the next start),
runs the one policy on the state there and takes its reason for the task
as the cause of the time until the next record. Causes: capacity, ahead,
reservation, fragmentation, constraint, node, preempted, no-scheduler,
starting. The parts add up to waited_s. Give it the scheduler's policy
flags.`,
		Args: oneID,
		RunE: func(c *cobra.Command, args []string) error {
			pol, recs, err := p.withRecords(c.Context(), &f)
			if err != nil {
				return err
			}
			ex, err := audit.Explain(recs, pol, args[0])
			if errors.Is(err, audit.ErrNotFound) {
				return &exitError{exitNotFound, fmt.Errorf("task %s not found", args[0])}
			}
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(os.Stdout, ex)
			}
			fmt.Printf("task %s (%s): %s\n", ex.TaskID, ex.State, ex.Text())
			return nil
		},
	}
	f.add(c)
	p.add(c)
	return c
}
