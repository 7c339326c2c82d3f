package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/events"
)

// newNode is `gpuq node list|drain|undrain`: the operator's view of the
// GPUs and the way to take a node out of service.
func newNode() *cobra.Command {
	c := &cobra.Command{
		Use:   "node",
		Short: "List nodes and their GPUs; drain and undrain a node",
		Args:  cobra.NoArgs,
	}
	c.AddCommand(newNodeList(), newNodeDrain(false), newNodeDrain(true))
	return c
}

func newNodeList() *cobra.Command {
	var f clientFlags
	c := &cobra.Command{
		Use:   "list",
		Short: "Every node with its state, last heartbeat and GPUs (who holds each)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return f.withClient(func(cl *api.Client) error {
				var v []api.NodeView
				if err := cl.Call(api.OpNodes, struct{}{}, &v); err != nil {
					return err
				}
				if v == nil {
					v = []api.NodeView{}
				}
				if f.json {
					return printJSON(c.OutOrStdout(), v)
				}
				printNodes(c.OutOrStdout(), v, time.Now())
				return nil
			})
		},
	}
	f.add(c)
	return c
}

// printNodes writes one line per node, then one per GPU.
func printNodes(w io.Writer, nodes []api.NodeView, now time.Time) {
	if len(nodes) == 0 {
		fmt.Fprintln(w, "no nodes have reported yet")
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "NODE\tSTATE\tGPUS\tFREE\tHEARTBEAT\tREASON")
	for _, n := range nodes {
		free := 0
		for _, g := range n.GPUs {
			if g.Healthy && g.TaskID == nil {
				free++
			}
		}
		beat := "never"
		if n.LastHeartbeat != nil {
			beat = now.Sub(*n.LastHeartbeat).Round(time.Second).String() + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", n.Node, n.State, len(n.GPUs), free, beat, n.Reason)
		for _, g := range n.GPUs {
			task, health := "-", "healthy"
			if g.TaskID != nil {
				task = *g.TaskID
			}
			if !g.Healthy {
				health = "UNHEALTHY"
			}
			if g.Utilization != nil {
				health += fmt.Sprintf(", %d%% busy", *g.Utilization)
			}
			fmt.Fprintf(tw, "  %d %s\t%s\t%d MiB\t%s\t%s\t\n", g.Index, g.UUID, g.Model, g.MemoryMiB, health, task)
		}
	}
	tw.Flush()
}

func newNodeDrain(undrain bool) *cobra.Command {
	var (
		f       clientFlags
		reason  string
		preempt bool
	)
	use, short, op := "drain NODE", "No new tasks on the node; running ones finish (--preempt: they are preempted and resume elsewhere)", api.OpDrain
	if undrain {
		use, short, op = "undrain NODE", "Put a drained node back into service", api.OpUndrain
	}
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return invalid("node", "exactly one node name is required")
			}
			if !events.ValidKey(args[0]) {
				return invalid("node", "must be a node name (no '.', '*', '>' or spaces)")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			return f.withClient(func(cl *api.Client) error {
				var v api.NodeView
				req := api.DrainRequest{Node: args[0], Reason: reason, By: os.Getenv("USER"), Preempt: preempt}
				if err := cl.Call(op, req, &v); err != nil {
					return err
				}
				if f.json {
					return printJSON(c.OutOrStdout(), v)
				}
				busy := []string{}
				for _, g := range v.GPUs {
					if g.TaskID != nil && !strings.Contains(strings.Join(busy, " "), *g.TaskID) {
						busy = append(busy, *g.TaskID)
					}
				}
				switch {
				case undrain:
					fmt.Fprintf(c.OutOrStdout(), "%s is %s again\n", v.Node, v.State)
				case preempt:
					fmt.Fprintf(c.OutOrStdout(), "%s drained; its preemptible tasks are being preempted (%d running: %s)\n", v.Node, len(busy), strings.Join(busy, " "))
				default:
					fmt.Fprintf(c.OutOrStdout(), "%s drained; %d running tasks finish there: %s\n", v.Node, len(busy), strings.Join(busy, " "))
				}
				return nil
			})
		},
	}
	f.add(c)
	c.Flags().StringVar(&reason, "reason", "", "why (kept in the log)")
	if !undrain {
		c.Flags().BoolVar(&preempt, "preempt", false, "preempt the node's preemptible tasks politely; they resume elsewhere")
	}
	return c
}
