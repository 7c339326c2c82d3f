package main

import (
	"strings"
	"testing"
)

// TestOneStatedLimit: a GPU count or an estimate out of range gets the
// server's limit in its message, whatever side of the range it is on.
func TestOneStatedLimit(t *testing.T) {
	s := newStack(t)
	s.submitter() // MaxGPUs 16, MaxHours 48
	url := s.srv.URL()
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no GPUs":        {[]string{"--gpus", "0"}, "gpus: must be between 1 and 16 (got 0)"},
		"negative GPUs":  {[]string{"--gpus", "-1"}, "gpus: must be between 1 and 16 (got -1)"},
		"too many GPUs":  {[]string{"--gpus", "100"}, "gpus: must be between 1 and 16 (got 100)"},
		"too many hours": {[]string{"--hours", "100"}, "hours: must be"},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"submit", "--name", "n", "--team", "t", "--hypothesis", "h", "--command", "true", "--nats", url}, tc.args...)
			var out, errb strings.Builder
			if c := run(args, &out, &errb); c != exitInvalid || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 with %q", c, errb.String(), tc.want)
			}
		})
	}
}

// TestHoursFlag: an estimate JSON cannot carry, or under a second, is
// refused before anything is sent: exit 2 naming --hours (not exit 1
// "json: unsupported value").
func TestHoursFlag(t *testing.T) {
	const nowhere = "nats://127.0.0.1:1" // never reached
	submit := []string{"submit", "--name", "n", "--team", "t", "--hypothesis", "h", "--command", "true", "--nats", nowhere}
	amend := []string{"amend", "0190a5b2-3c4d-7e8f-9a0b-1c2d3e4f5a6b", "--nats", nowhere}
	for name, args := range map[string][]string{
		"submit NaN":      append(submit, "--hours", "NaN"),
		"submit Inf":      append(submit, "--hours", "Inf"),
		"submit -Inf":     append(submit, "--hours=-Inf"),
		"submit 1e-300":   append(submit, "--hours", "1e-300"),
		"submit half a s": append(submit, "--hours", "0.0001"),
		"submit negative": append(submit, "--hours=-1"),
		"amend NaN":       append(amend, "--hours", "NaN"),
		"amend +Inf":      append(amend, "--hours", "+Inf"),
		"amend 1e-300":    append(amend, "--hours", "1e-300"),
	} {
		t.Run(name, func(t *testing.T) {
			var out, errb strings.Builder
			if c := run(args, &out, &errb); c != exitInvalid || !strings.Contains(errb.String(), "--hours: must be a finite number of hours, at least 1 s") {
				t.Errorf("exit %d, stderr %q; want 2 naming --hours", c, errb.String())
			}
		})
	}
}
