package main

import (
	"strings"
	"testing"
)

// TestSubmitIdempotencyKeyReuse: the same key with another payload is a
// refused request, exit 2; before, the CLI printed the first task's id as
// if it were the one asked for.
func TestSubmitIdempotencyKeyReuse(t *testing.T) {
	s := newStack(t)
	s.submitter()
	url := s.srv.URL()
	submit := func(command string) (int, string) {
		return runCLI(t, "submit", "--nats", url, "--name", "ci", "--team", "vision", "--priority", "low", "--gpus", "1",
			"--hours", "0.5", "--hypothesis", "h", "--command", command, "--export", "NONE", "--idempotency-key", "run-42")
	}
	code, first := submit("python train.py")
	if code != 0 || strings.TrimSpace(first) == "" {
		t.Fatalf("first submission: exit %d, printed %q", code, first)
	}
	cases := []struct {
		name     string
		command  string
		wantCode int
		wantOut  string
	}{
		{"the same request: the original task", "python train.py", 0, first},
		{"another command: refused", "python other.py", exitInvalid, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out := submit(tc.command)
			if code != tc.wantCode || out != tc.wantOut {
				t.Errorf("exit %d, printed %q; want exit %d, %q", code, out, tc.wantCode, tc.wantOut)
			}
		})
	}
}
