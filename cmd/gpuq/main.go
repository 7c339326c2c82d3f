// Command gpuq is the one CLI of gpuq, for people and CI: `gpuq dev` runs
// the whole system in one process; the other commands are clients that
// find NATS through --nats / GPUQ_NATS_URL.
//
// Exit codes: 0 success, 1 error (NATS unreachable, a timeout, a server's
// own failure), 2 a refused request — invalid input (the message names the
// field and the rule), a usage error (one line and a hint to --help), a
// state that does not allow it, credentials that may not ask it — 3 task
// not found, 4 `wait` ended without the task starting, 5 `wait` timed out.
// code decides, in one place.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
)

// Exit codes.
const (
	exitErr      = 1
	exitInvalid  = 2
	exitNotFound = 3
	exitNotRun   = 4
	exitTimeout  = 5
)

// exitError carries an exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func invalid(field, rule string) error {
	return &exitError{exitInvalid, &domain.FieldError{Field: field, Rule: rule}}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the CLI on args and returns the exit code; errors go to
// stderr as one line starting with "gpuq: ".
func run(args []string, stdout, stderr io.Writer) int {
	if args == nil {
		args = []string{} // cobra reads os.Args on nil
	}
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	err = usageOf(root, cmd, err)
	fmt.Fprintln(stderr, "gpuq:", err)
	return code(err)
}

// usageError is exit 2 with a hint to the command's help.
func usageError(c *cobra.Command, err error) error {
	return &exitError{exitInvalid, fmt.Errorf("%w; see '%s --help'", err, c.CommandPath())}
}

// usageOf turns cobra's unknown-command error (the only usage error cobra
// returns without passing through our hooks) into one line and exit 2.
func usageOf(root, cmd *cobra.Command, err error) error {
	var ee *exitError
	msg := err.Error()
	if errors.As(err, &ee) || !strings.HasPrefix(msg, "unknown command ") {
		return err
	}
	line, _, _ := strings.Cut(msg, "\n")
	rest := strings.TrimPrefix(line, "unknown command ")
	if q, err := strconv.QuotedPrefix(rest); err == nil {
		if name, err := strconv.Unquote(q); err == nil {
			if sug := root.SuggestionsFor(name); len(sug) > 0 {
				line += fmt.Sprintf(" (did you mean %q?)", sug[0])
			}
		}
	}
	if cmd == nil {
		cmd = root
	}
	return usageError(cmd, errors.New(line))
}

// flagError names the flag and the rule instead of a parser's error.
func flagError(err error) error {
	var iv *pflag.InvalidValueError
	if !errors.As(err, &iv) {
		return err
	}
	f := iv.GetFlag()
	rule := "invalid value"
	switch f.Value.Type() {
	case "int", "int32", "int64", "uint", "uint32", "uint64":
		rule = "must be a whole number"
		if errors.Is(err, strconv.ErrRange) {
			rule = "must be a whole number small enough to store"
		}
	case "float32", "float64":
		rule = "must be a number"
	case "duration":
		rule = "must be a duration such as 90s, 30m or 2h"
	case "bool":
		rule = "must be true or false"
	}
	return fmt.Errorf("--%s: %s (got %q)", f.Name, rule, iv.GetValue())
}

// guardArgs makes every positional-argument error a usage error: exit 2,
// one line, a hint.
func guardArgs(c *cobra.Command) {
	for _, s := range c.Commands() {
		guardArgs(s)
	}
	v := c.Args
	if v == nil {
		return
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		err := v(cmd, args)
		if err == nil {
			return nil
		}
		var ee *exitError
		if !errors.As(err, &ee) && len(args) > 0 {
			// cobra.NoArgs says "unknown command"; it is an extra argument.
			err = fmt.Errorf("unexpected argument %q: %q takes no arguments", args[0], cmd.CommandPath())
		}
		return usageError(cmd, err)
	}
}

// code is the one mapping of an error to the exit code. A request the
// server or the CLI refuses — invalid input, a state that does not allow
// it, credentials that may not ask it (403), a conflict — is exit 2, a
// task not found exit 3, the codes the CLI sets itself (exitError) stay;
// everything else (NATS unreachable, a timeout, a server's own failure)
// is exit 1.
func code(err error) int {
	var ee *exitError
	var fe *domain.FieldError
	var ae *api.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &fe):
		return exitInvalid
	case errors.As(err, &ae) && ae.NotFound && ae.Field == "":
		return exitNotFound // a task (the only not-found without a field)
	case api.IsRefused(err):
		return exitInvalid
	}
	return exitErr
}

// refused is a request the CLI refuses itself, as the server would
// (credentials that may not do it): exit 2.
func refused(format string, a ...any) error {
	return &exitError{exitInvalid, fmt.Errorf(format, a...)}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "gpuq",
		Short:         "gpuq — a GPU job queue that tells you when, why and what to do meanwhile",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(),
	}
	root.SetVersionTemplate("gpuq {{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError(c, flagError(err))
	})
	root.AddCommand(newDev(), newAudit(), newReplay(), newExplain(), newSubmit(), newShow(), newQueue(), newHistory(), newCancel(), newAmend(),
		newChecklist(), newCheckpoint(), newWatch(), newLogs(), newEstimate(), newWait(), newStats(), newBench(), newSim(), newVersion(), newNode(), newAuth(), newHealth(), newNotify())
	guardArgs(root)
	// cobra's own help command answers an unknown topic with the whole
	// usage and exit 0; this one is a usage error like the others.
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, _, err := root.Find(args)
			if err != nil || cmd == nil {
				return usageError(root, fmt.Errorf("unknown help topic %q", strings.Join(args, " ")))
			}
			cmd.InitDefaultHelpFlag()
			cmd.InitDefaultVersionFlag()
			return cmd.Help()
		},
	})
	return root
}
