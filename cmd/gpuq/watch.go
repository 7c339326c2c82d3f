package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/events"
)

func newWatch() *cobra.Command {
	var f clientFlags
	var ef entryFmt
	c := &cobra.Command{
		Use:   "watch ID",
		Short: "Stream a task's events as they happen; ends when the task ends",
		Args:  oneID,
		RunE: func(c *cobra.Command, args []string) error {
			l, done, err := attach(&f)
			if err != nil {
				return err
			}
			defer done()
			return watch(c.Context(), l, args[0], f.json, ef, isTTY(os.Stdout), os.Stdout, c.ErrOrStderr())
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
