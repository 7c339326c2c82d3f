package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFormatVersion(t *testing.T) {
	rev := "6560526abcdef0123456789abcdef0123456789a"
	cases := []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"workspace build", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
		{"empty version", debug.BuildInfo{}, "(devel)"},
		{"tagged module", debug.BuildInfo{Main: debug.Module{Version: "v0.4.1"}}, "v0.4.1"},
		{"with revision and time", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-12-01T22:00:00Z"}, {Key: "vcs.modified", Value: "false"}}},
			"(devel) 6560526abcde 2026-12-01T22:00:00Z"},
		{"modified tree", debug.BuildInfo{Main: debug.Module{Version: "v0.4.1"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}},
			"v0.4.1 6560526abcde+dirty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := formatVersion(&tc.bi); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestVersionCommand: --version and `version` print one line, exit 0.
func TestVersionCommand(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"flag", []string{"--version"}},
		{"subcommand", []string{"version"}},
	}
	want := "gpuq " + version() + "\n"
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tc.args, &out, &errb); code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errb.String())
			}
			if out.String() != want || strings.Count(out.String(), "\n") != 1 {
				t.Errorf("stdout %q, want %q", out.String(), want)
			}
		})
	}
}
