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
