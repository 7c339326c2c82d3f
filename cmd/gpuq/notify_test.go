package main

import (
	"strings"
	"testing"
)

func TestOSC9(t *testing.T) {
	cases := map[string]struct{ msg, want string }{
		"plain":                   {"gpuq: train started on node-1", "\a\033]9;gpuq: train started on node-1\a"},
		"an escape cannot end it": {"x\033]9;evil\a\u009c", "\a\033]9;x]9;evil\a"},
		"newlines dropped":        {"a\nb", "\a\033]9;ab\a"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := osc9(tc.msg); got != tc.want {
				t.Errorf("osc9(%q) = %q, want %q", tc.msg, got, tc.want)
			}
		})
	}
}

// gpuq notify add refuses a bad value before it connects: exit 2, naming
// the flag.
func TestNotifyAddRefuses(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"no team":               {[]string{"--url", "https://hooks.example.com/x"}, "team"},
		"not http":              {[]string{"--team", "vision", "--url", "ftp://hooks.example.com/x"}, "url"},
		"no url":                {[]string{"--team", "vision"}, "url"},
		"an unknown type":       {[]string{"--team", "vision", "--url", "https://hooks.example.com/x", "--events", "started,exploded"}, "events"},
		"a missing secret file": {[]string{"--team", "vision", "--url", "https://hooks.example.com/x", "--secret-file", "/nonexistent/s"}, "secret-file"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			args := append([]string{"notify", "add", "--nats", "nats://127.0.0.1:1"}, tc.args...)
			if code := run(args, &stdout, &stderr); code != exitInvalid || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want %d naming %s", code, stderr.String(), exitInvalid, tc.want)
			}
		})
	}
}
