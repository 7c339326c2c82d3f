package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestUsageErrors: every usage error is exit 2, one line on stderr naming
// what was wrong, and a hint to the command's help; never the whole usage.
func TestUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown subcommand", []string{"frobnicate"}, `gpuq: unknown command "frobnicate" for "gpuq"; see 'gpuq --help'`},
		{"misspelt subcommand", []string{"queu"}, `gpuq: unknown command "queu" for "gpuq" (did you mean "queue"?); see 'gpuq --help'`},
		{"extra argument", []string{"queue", "extra"}, `gpuq: unexpected argument "extra": "gpuq queue" takes no arguments; see 'gpuq queue --help'`},
		{"extra task id", []string{"show", "a", "b"}, `gpuq: task_id: exactly one task id is required; see 'gpuq show --help'`},
		{"bad int flag", []string{"submit", "--gpus", "abc"}, `gpuq: --gpus: must be a whole number (got "abc"); see 'gpuq submit --help'`},
		{"int flag out of range", []string{"submit", "--gpus=99999999999999999999"}, `gpuq: --gpus: must be a whole number small enough to store (got "99999999999999999999"); see 'gpuq submit --help'`},
		{"bad float flag", []string{"amend", "x", "--hours", "two"}, `gpuq: --hours: must be a number (got "two"); see 'gpuq amend --help'`},
		{"bad duration flag", []string{"dev", "--heartbeat", "5"}, `gpuq: --heartbeat: must be a duration such as 90s, 30m or 2h (got "5"); see 'gpuq dev --help'`},
		{"unknown flag", []string{"queue", "--bogus"}, `gpuq: unknown flag: --bogus; see 'gpuq queue --help'`},
		{"unknown help topic", []string{"help", "frobnicate"}, `gpuq: unknown help topic "frobnicate"; see 'gpuq --help'`},
		{"flag without value", []string{"submit", "--gpus"}, `gpuq: flag needs an argument: --gpus; see 'gpuq submit --help'`},
		{"bench group unknown", []string{"bench", "--only", "advisor,nope"}, `gpuq: --only: "nope" is not a group of measurements (one of publish, log, lifecycle, placement, r3, advisor, stream)`},
		{"bench advisor scale negative", []string{"bench", "--only", "advisor", "--advisor-queued", "-1"}, `gpuq: --advisor-queued: must be ≥ 1 (or 0 for the run's own size)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tc.args, &out, &errb)
			if code != exitInvalid {
				t.Errorf("exit %d, want %d", code, exitInvalid)
			}
			if got := strings.TrimSuffix(errb.String(), "\n"); got != tc.want {
				t.Errorf("stderr\n got %q\nwant %q", got, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("stdout %q, want nothing (no usage)", out.String())
			}
		})
	}
}
