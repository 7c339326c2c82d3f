package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
)

func newLogs() *cobra.Command {
	var f clientFlags
	var follow bool
	var tail int
	c := &cobra.Command{
		Use:   "logs ID [-f] [--tail N]",
		Short: "A task's output (stdout and stderr) from its node; -f follows it until the task ends",
		Args:  oneID,
		RunE: func(c *cobra.Command, args []string) error {
			if tail < 0 {
				return invalid("tail", fmt.Sprintf("must be ≥ 0 (got %d)", tail))
			}
			return f.withClient(func(cl *api.Client) error {
				src := logSource{
					show: func(id string) (api.TaskView, error) {
						var v api.TaskView
						err := cl.Call(api.OpShow, api.IDRequest{TaskID: id}, &v)
						return v, err
					},
					logs: cl.Logs,
					poll: 500 * time.Millisecond,
				}
				return streamLogs(c.Context(), src, args[0], follow, tail, f.json, c.OutOrStdout(), c.ErrOrStderr())
			})
		},
	}
	f.add(c)
	c.Flags().BoolVarP(&follow, "follow", "f", false, "follow the output until the task ends (waits for a queued task to start)")
	c.Flags().IntVar(&tail, "tail", 0, "only the last N lines (0: all)")
	return c
}

// logSource is where streamLogs reads: the submitter for the task, its
// node's agent for the output.
type logSource struct {
	show func(id string) (api.TaskView, error)
	logs func(node string, req api.LogsRequest) (api.LogsReply, error)
	poll time.Duration
}

// streamLogs writes a task's output to w: all of it, or its last tail
// lines, from the node of its latest start. With follow it waits for the
// task to start, then keeps reading until the task has ended and its
// output is drained; a task that moves to another node (preempted,
// resumed elsewhere) continues with that node's output from its start.
// asJSON writes each piece as an api.LogsReply, one per line. While it
// follows, a NATS stall is ridden out (stallRider), as watch does.
func streamLogs(ctx context.Context, src logSource, id string, follow bool, tail int, asJSON bool, w, stderr io.Writer) error {
	node, offset, first := "", int64(0), true
	enc := json.NewEncoder(w)
	ask := func(fn func() error) error { return fn() }
	if follow {
		r := &stallRider{stderr: stderr, wait: src.poll}
		ask = func(fn func() error) error { return r.do(ctx, fn) }
	}
	for {
		var v api.TaskView
		err := ask(func() (err error) { v, err = src.show(id); return err })
		if err != nil {
			return err
		}
		ended := domain.TaskState(v.State).Terminal()
		switch {
		case v.LogNode == "" && (!follow || ended):
			fmt.Fprintf(stderr, "gpuq: task %s is %s and has not started: no output\n", id, v.State)
			return nil
		case v.LogNode == "":
			// Not started yet: wait for it.
		default:
			if v.LogNode != node {
				node, offset = v.LogNode, 0
			}
			for {
				req := api.LogsRequest{TaskID: id, Offset: offset}
				if first && tail > 0 {
					req.Tail = tail
				}
				first = false
				var out api.LogsReply
				err := ask(func() (err error) { out, err = src.logs(node, req); return err })
				if api.IsNotFound(err) && follow && !ended {
					break // started, but no output file yet
				}
				if err != nil {
					return err
				}
				if asJSON {
					if out.Data != "" {
						_ = enc.Encode(out)
					}
				} else if _, err := io.WriteString(w, out.Data); err != nil {
					return err
				}
				offset = out.Next
				if out.Next >= out.Size || out.Next == out.Offset {
					break
				}
			}
		}
		if !follow || ended {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(src.poll):
		}
	}
}
