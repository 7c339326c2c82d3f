package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/services/notifier"
)

// newNotify is `gpuq notify add|list|remove|test|failed`: the teams'
// webhook destinations, kept in a replicated KV bucket that only the
// admin (and the notifier) may read and write.
func newNotify() *cobra.Command {
	c := &cobra.Command{
		Use:   "notify",
		Short: "Teams' webhook destinations for notifications (admin): add, list, remove, test, failed",
		Long: `Notifications (starts_soon, eta_changed, alert, preempt_requested, started,
completed, failed) are signed JSON POSTs from the notifier: X-Gpuq-Event-Id
(stable across retries) and X-Gpuq-Signature: t=UNIX,v1=HEX, the HMAC-SHA256
of "UNIX.BODY" with the destination's secret. Destinations live in the KV
bucket gpuq_notify_destinations; with --auth only the admin credentials
reach it. See docs/operations.md, "Notifications".`,
		Args: cobra.NoArgs,
	}
	c.AddCommand(newNotifyAdd(), newNotifyList(), newNotifyRemove(), newNotifyTest(), newNotifyFailed())
	return c
}

// destinations opens the bucket as the admin.
func (f *clientFlags) destinations(ctx context.Context) (*notifier.Destinations, func(), error) {
	if f.scoped() {
		return nil, nil, &exitError{exitInvalid, errors.New("notify: admin only (these credentials are a team's or a job's)")}
	}
	nc, err := f.connect()
	if err != nil {
		return nil, nil, err
	}
	j, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	d, err := notifier.OpenDestinations(ctx, j, 0)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("notify: the destinations bucket: %w (admin credentials needed with --auth)", err)
	}
	return d, nc.Close, nil
}

// withDestinations opens the bucket as the admin for at most timeout and
// runs fn with it, closing the connection after.
func (f *clientFlags) withDestinations(timeout time.Duration, fn func(context.Context, *notifier.Destinations) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s, done, err := f.destinations(ctx)
	if err != nil {
		return err
	}
	defer done()
	return fn(ctx, s)
}

// notifyErr turns a refused value into exit 2 naming its flag.
func notifyErr(err error) error {
	var fe *notifier.FieldError
	if errors.As(err, &fe) {
		return invalid(fe.Field, fe.Msg)
	}
	return err
}

func newNotifyAdd() *cobra.Command {
	var (
		f                     clientFlags
		team, url, secretFile string
		types                 []string
	)
	c := &cobra.Command{
		Use:   "add --team T --url URL [--events TYPE,...] [--secret-file F]",
		Short: "Send a team's notifications to a webhook (replaces the same team and URL)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			secret := ""
			if secretFile != "" {
				b, err := os.ReadFile(secretFile)
				if err != nil {
					return invalid("secret-file", err.Error())
				}
				if secret = strings.TrimSpace(string(b)); secret == "" {
					return invalid("secret-file", "is empty")
				}
			}
			d, err := notifier.NewTeamDest(team, url, types, secret, time.Now())
			if err != nil {
				return notifyErr(err)
			}
			return f.withDestinations(15*time.Second, func(ctx context.Context, s *notifier.Destinations) error {
				if err := s.Add(ctx, d); err != nil {
					return err
				}
				if f.json {
					return printJSON(c.OutOrStdout(), d)
				}
				fmt.Fprintf(c.OutOrStdout(), "destination %s: team %s → %s\n", d.ID, d.Team, d.URL)
				if secretFile == "" {
					fmt.Fprintf(c.OutOrStdout(), "secret (shown once; verify X-Gpuq-Signature with it): %s\n", d.Secret)
				}
				return nil
			})
		},
	}
	c.Flags().StringVar(&team, "team", "", "the team whose tasks' notifications go there")
	c.Flags().StringVar(&url, "url", "", "the webhook URL (http:// or https://)")
	c.Flags().StringSliceVar(&types, "events", nil, "notification types to send (default: all): "+strings.Join(notifier.Types, ", "))
	c.Flags().StringVar(&secretFile, "secret-file", "", "file holding the signing secret (default: a new random one, printed once)")
	f.add(c)
	return c
}

func newNotifyList() *cobra.Command {
	var f clientFlags
	c := &cobra.Command{
		Use:   "list",
		Short: "The teams' destinations (secrets not shown)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return f.withDestinations(15*time.Second, func(ctx context.Context, s *notifier.Destinations) error {
				ds, err := s.List(ctx)
				if err != nil {
					return err
				}
				for i := range ds {
					ds[i].Secret = ""
				}
				if ds == nil {
					ds = []notifier.TeamDest{}
				}
				if f.json {
					return printJSON(c.OutOrStdout(), ds)
				}
				printDests(c.OutOrStdout(), ds)
				return nil
			})
		},
	}
	f.add(c)
	return c
}

func printDests(w io.Writer, ds []notifier.TeamDest) {
	if len(ds) == 0 {
		fmt.Fprintln(w, "no destinations (gpuq notify add --team T --url URL)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTEAM\tEVENTS\tURL")
	for _, d := range ds {
		ev := "all"
		if len(d.Events) > 0 {
			ev = strings.Join(d.Events, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.ID, d.Team, ev, d.URL)
	}
	_ = tw.Flush()
}

func newNotifyRemove() *cobra.Command {
	var f clientFlags
	c := &cobra.Command{
		Use:   "remove ID",
		Short: "Stop sending to a destination",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return f.withDestinations(15*time.Second, func(ctx context.Context, s *notifier.Destinations) error {
				if err := s.Remove(ctx, args[0]); err != nil {
					return notifyErr(err)
				}
				fmt.Fprintf(c.OutOrStdout(), "destination %s removed\n", args[0])
				return nil
			})
		},
	}
	f.add(c)
	return c
}

func newNotifyTest() *cobra.Command {
	var (
		f    clientFlags
		wait time.Duration
	)
	c := &cobra.Command{
		Use:   "test ID",
		Short: "Have the notifier send a test notification to a destination, and say how it went",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return f.withDestinations(wait+15*time.Second, func(ctx context.Context, s *notifier.Destinations) error {
				id, err := s.Test(ctx, args[0])
				if err != nil {
					return notifyErr(err)
				}
				deadline := time.Now().Add(wait)
				for {
					ok, lastErr, err := s.TestResult(ctx, args[0], id)
					switch {
					case err != nil:
						return err
					case ok:
						fmt.Fprintf(c.OutOrStdout(), "delivered: test notification %s\n", id)
						return nil
					case lastErr != "":
						return fmt.Errorf("test notification %s not delivered: %s (retried on the usual schedule; gpuq notify failed lists it once given up)", id, lastErr)
					case time.Now().After(deadline):
						return fmt.Errorf("test notification %s: no answer within %s (is the notifier running?)", id, wait)
					}
					time.Sleep(200 * time.Millisecond)
				}
			})
		},
	}
	c.Flags().DurationVar(&wait, "wait", 20*time.Second, "how long to wait for the outcome")
	f.add(c)
	return c
}

func newNotifyFailed() *cobra.Command {
	var f clientFlags
	c := &cobra.Command{
		Use:   "failed",
		Short: "The dead letters: notifications given up after their retries (kept 7 days)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return f.withDestinations(30*time.Second, func(ctx context.Context, s *notifier.Destinations) error {
				ds, err := s.Failed(ctx)
				if err != nil {
					return err
				}
				if ds == nil {
					ds = []notifier.Delivery{}
				}
				if f.json {
					return printJSON(c.OutOrStdout(), ds)
				}
				if len(ds) == 0 {
					fmt.Fprintln(c.OutOrStdout(), "no failed notifications")
					return nil
				}
				tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "DECIDED\tTYPE\tTASK\tURL\tATTEMPTS\tLAST ERROR")
				for _, d := range ds {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", d.Created.UTC().Format(time.RFC3339), d.Type, d.TaskID, d.URL, d.Attempts, d.LastError)
				}
				return tw.Flush()
			})
		},
	}
	f.add(c)
	return c
}

// terminalNotify rings the bell and shows msg as a desktop notification
// (OSC 9: iTerm2, Windows Terminal, kitty, WezTerm, foot, …) when w is a
// terminal; other terminals ignore the sequence. Control characters in
// msg are dropped so that it cannot end the sequence early.
func terminalNotify(w *os.File, msg string) {
	if isTTY(w) {
		fmt.Fprint(w, osc9(msg))
	}
}

// osc9 is a bell, then msg as an OSC 9 notification.
func osc9(msg string) string {
	clean := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return -1
		}
		return r
	}, msg)
	return "\a\033]9;" + clean + "\a"
}
