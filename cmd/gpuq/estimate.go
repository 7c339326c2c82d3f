package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	js "github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
)

func newEstimate() *cobra.Command {
	var f clientFlags
	c := &cobra.Command{
		Use:   "estimate ID",
		Short: "When the task will start (P50/P90), why it waits, what to do meanwhile",
		Args:  oneID,
		RunE: func(c *cobra.Command, args []string) error {
			nc, err := f.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(c.Context(), 10*time.Second)
			defer cancel()
			j, err := js.New(nc)
			if err != nil {
				return err
			}
			s, err := j.Stream(ctx, events.AdviceStreamName)
			if err != nil {
				return fmt.Errorf("advice stream: %w (is the advisor running?)", err)
			}
			m, err := s.GetLastMsgForSubject(ctx, events.AdviceSubject(args[0]))
			if errors.Is(err, js.ErrMsgNotFound) {
				return &exitError{exitNotFound, fmt.Errorf("no advice for task %s (unknown, or not queued)", args[0])}
			}
			if err != nil {
				return err
			}
			var a estimate.Advice
			if err := json.Unmarshal(m.Data, &a); err != nil {
				return err
			}
			if f.json {
				return printJSON(os.Stdout, a)
			}
			fmt.Printf("task %s: %s, position %d\n", a.TaskID, a.State, a.Position)
			if a.State == "queued" {
				fmt.Printf("start: P50 %s (in %s), P90 %s\n", a.P50Start.Local().Format(time.DateTime),
					time.Duration(a.P50WaitS*float64(time.Second)).Round(time.Second), a.P90Start.Local().Format(time.DateTime))
				fmt.Printf("why:   %s\nnow:   %s\n", a.Reason, a.ActionText)
			}
			if a.Alert != "" {
				fmt.Printf("ALERT: %s\n", a.Alert)
			}
			return nil
		},
	}
	f.add(c)
	return c
}
