package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
)

func newWatch() *cobra.Command {
	var f clientFlags
	var ef entryFmt
	c := &cobra.Command{
		Use:   "watch ID",
		Short: "Stream a task's events as they happen; ends when the task ends",
		Args:  oneID,
		RunE: func(c *cobra.Command, args []string) error {
			if f.scoped() {
				return f.withClient(func(cl *api.Client) error {
					return watchAPI(c.Context(), cl, args[0], f.json, ef, isTTY(os.Stdout), os.Stdout, c.ErrOrStderr())
				})
			}
			return f.withLog(func(l *jetstream.Log) error {
				return watch(c.Context(), l, args[0], f.json, ef, isTTY(os.Stdout), os.Stdout, c.ErrOrStderr())
			})
		},
	}
	f.add(c)
	ef.add(c)
	return c
}

// watch prints a task's events from the first, then each new one, until
// the task completes, fails or is cancelled: exit 0 however it ended (the
// last line says how). A task not in the log yet is waited for, with a
// note on stderr.
func watch(ctx context.Context, l events.Log, id string, asJSON bool, ef entryFmt, short bool, w, stderr io.Writer) error {
	if !taskExists(ctx, l, id) {
		fmt.Fprintf(stderr, "gpuq: task %s is not in the log yet; waiting for it (Ctrl-C to stop)\n", id)
	}
	fl, err := l.Follow(ctx, 1, events.TaskSubjects(id))
	if err != nil {
		return err
	}
	defer fl.Close()
	enc := json.NewEncoder(w)
	for {
		m, err := fl.Next(ctx)
		if err != nil {
			return err
		}
		r, err := events.Decode(m)
		if err != nil {
			fmt.Fprintf(stderr, "gpuq: skipping record %d: %v\n", m.Seq, err)
			continue
		}
		e := historyEntry(r)
		if asJSON {
			_ = enc.Encode(e)
		} else {
			printEntry(w, e, ef, short)
		}
		switch r.Event.(type) {
		case events.Completed, events.Failed, events.Cancelled:
			return nil
		}
	}
}

// watchAPI is watch for a team's credentials, which may not read the log:
// it asks the submitter for the task's history every second and prints
// what is new, with the same end and output, riding out a NATS stall
// (stallRider) as the log's follower does.
func watchAPI(ctx context.Context, cl *api.Client, id string, asJSON bool, ef entryFmt, short bool, w, stderr io.Writer) error {
	enc := json.NewEncoder(w)
	var last uint64
	waiting := false
	r := &stallRider{stderr: stderr, wait: time.Second}
	for {
		var hist []api.HistoryEntry
		err := r.do(ctx, func() error { hist = nil; return cl.Call(api.OpHistory, api.IDRequest{TaskID: id}, &hist) })
		switch {
		case api.IsNotFound(err):
			if !waiting {
				fmt.Fprintf(stderr, "gpuq: task %s is not in the log yet; waiting for it (Ctrl-C to stop)\n", id)
				waiting = true
			}
		case err != nil:
			return err
		}
		for _, e := range hist {
			if e.Seq <= last {
				continue
			}
			last = e.Seq
			if asJSON {
				_ = enc.Encode(e)
			} else {
				printEntry(w, e, ef, short)
			}
			switch events.Type(e.Type) {
			case events.TypeCompleted, events.TypeFailed, events.TypeCancelled:
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
