package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/service"
)

func newAudit() *cobra.Command {
	c := &cobra.Command{
		Use:   "audit",
		Short: "Check the log itself: the records every service skipped",
		Args:  cobra.NoArgs,
	}
	c.AddCommand(newAuditSkipped())
	return c
}

func newAuditSkipped() *cobra.Command {
	var f clientFlags
	c := &cobra.Command{
		Use:   "skipped",
		Short: "Records the fold skipped (undecodable, unknown, invalid, impossible), with why",
		Long: `Folds the whole log as every service does and lists each record the fold
did not apply, once, in log order: its sequence, subject and the reason
(it does not decode, has an unknown type or version, is too large, carries
invalid data, contradicts its subject, or is impossible in its task's
state). The log cannot be edited, so these records stay; no service
stops on them.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			l, done, err := attach(&f)
			if err != nil {
				return err
			}
			defer done()
			skips, err := service.Skipped(c.Context(), l)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(os.Stdout, skips)
			}
			if len(skips) == 0 {
				fmt.Println("no record skipped")
				return nil
			}
			fmt.Printf("%8s  %-48s  %s\n", "SEQ", "SUBJECT", "REASON")
			for _, s := range skips {
				fmt.Printf("%8d  %-48s  %s\n", s.Seq, s.Subject, s.Reason)
			}
			return nil
		},
	}
	f.add(c)
	return c
}
