// Command gpuq is the one CLI of gpuq, for people and CI: `gpuq dev` runs
// the whole system in one process; the other commands are clients that
// find NATS through --nats / GPUQ_NATS_URL.
//
// Exit codes: 0 success, 1 error, 2 invalid input (the message names the
// field and the rule), 3 task not found, 4 `wait` ended without the task
// starting, 5 `wait` timed out.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

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
	root := newRoot()
	err := root.Execute()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "gpuq:", err)
	os.Exit(code(err))
}

func code(err error) int {
	var ee *exitError
	var fe *domain.FieldError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &fe), api.IsInvalid(err):
		return exitInvalid
	case api.IsNotFound(err):
		return exitNotFound
	}
	return exitErr
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "gpuq",
		Short:         "gpuq — a GPU job queue that tells you when, why and what to do meanwhile",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{exitInvalid, fmt.Errorf("%w\n%s", err, c.UsageString())}
	})
	root.AddCommand(newDev(), newAudit(), newSubmit(), newShow(), newQueue(), newHistory(), newCancel(), newAmend(),
		newChecklist(), newCheckpoint(), newWatch(), newEstimate(), newWait(), newStats(), newBench(), newSim())
	return root
}
