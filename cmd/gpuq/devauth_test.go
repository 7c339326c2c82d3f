package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/auth"
)

// TestCheckDevAuth: gpuq dev --auth refuses, before anything starts and
// naming what to do, a directory without the configuration, one of the
// older nkey format, and one without a node's credentials or job key.
func TestCheckDevAuth(t *testing.T) {
	good := filepath.Join(t.TempDir(), "good")
	if _, err := auth.Init(good, []string{"vision"}, []string{"node-1"}); err != nil {
		t.Fatal(err)
	}
	old := t.TempDir() // what an older gpuq auth init wrote
	if err := os.MkdirAll(filepath.Join(old, auth.CredsDir), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{auth.ConfigFile, "creds/admin.nk"} {
		if err := os.WriteFile(filepath.Join(old, f), []byte("# old\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	noSigner := filepath.Join(t.TempDir(), "nosigner")
	if _, err := auth.Init(noSigner, nil, []string{"node-1"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(auth.JobSignerPath(noSigner, "node-1")); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		dir   string
		nodes int
		want  string // "" = accepted
	}{
		"a directory of auth init":   {good, 1, ""},
		"no auth at all":             {"", 1, ""},
		"no configuration":           {t.TempDir(), 1, "gpuq auth init"},
		"the older nkey format":      {old, 1, "older gpuq auth init"},
		"a node without credentials": {good, 2, "--nodes node-1,…,node-2"},
		"a node without its job key": {noSigner, 1, "agent-node-1.jobs.nk"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := checkDevAuth(devFlags{auth: c.dir, nodes: c.nodes})
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || code(err) != exitInvalid || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v (exit %d), want exit 2 with %q", err, code(err), c.want)
			}
		})
	}
}
