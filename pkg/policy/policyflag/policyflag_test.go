package policyflag_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/pflag"

	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/policy/policyflag"
)

func parse(t *testing.T, args []string, opts ...policyflag.BindOption) (*pflag.FlagSet, *policyflag.Values) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	v := policyflag.Bind(policyflag.Pflag(fs), opts...)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return fs, v
}

// TestDefaults: no flag given is policy.DefaultOptions, the one default.
func TestDefaults(t *testing.T) {
	_, v := parse(t, nil)
	got, err := v.Options()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(policy.DefaultOptions(), got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("defaults differ from policy.DefaultOptions (-want +got):\n%s", diff)
	}
	if got.StarvationWait != policy.DefaultStarvationWait {
		t.Errorf("starvation bound %v, want %v", got.StarvationWait, policy.DefaultStarvationWait)
	}
}

// TestEveryOptionHasAFlag: each option a command can choose is bound, so
// a new option cannot be forgotten by one command.
func TestEveryOptionHasAFlag(t *testing.T) {
	fs, _ := parse(t, nil)
	for _, name := range []string{"policy", "within-class", "backfill", "teams", "max-wait", "aging-tau",
		"class-aging", "starvation-wait", "preempt-patience", "victims"} {
		if fs.Lookup(name) == nil {
			t.Errorf("--%s not bound", name)
		}
	}
	fs, _ = parse(t, nil, policyflag.WithoutTeams())
	if fs.Lookup("teams") != nil {
		t.Error("WithoutTeams bound --teams")
	}
}

func TestOptions(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "teams.yaml")
	if err := os.WriteFile(good, []byte("teams:\n  vision: {gpus: 4}\n  nlp: {gpus: 4}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("teams:\n  vision: {gpus: -1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		args  []string
		check func(policy.Options) bool
		field string // the flag the error names; "" when valid
	}{
		"ladder":            {args: []string{"--policy", "ladder"}, check: func(o policy.Options) bool { return o.Preemption == policy.Ladder }},
		"shortest":          {args: []string{"--within-class", "shortest-predicted"}, check: func(o policy.Options) bool { return o.WithinClass == policy.ShortestPredicted }},
		"starvation off":    {args: []string{"--starvation-wait", "0"}, check: func(o policy.Options) bool { return o.StarvationWait == 0 }},
		"patience":          {args: []string{"--preempt-patience", "30m"}, check: func(o policy.Options) bool { return o.PreemptPatience == 30*time.Minute }},
		"teams loaded":      {args: []string{"--teams", good}, check: func(o policy.Options) bool { return o.Teams["vision"].GPUs == 4 }},
		"bad policy":        {args: []string{"--policy", "random"}, field: "policy"},
		"bad within":        {args: []string{"--within-class", "lifo"}, field: "within-class"},
		"bad backfill":      {args: []string{"--backfill", "any"}, field: "backfill"},
		"bad victims":       {args: []string{"--victims", "oldest"}, field: "victims"},
		"negative aging":    {args: []string{"--class-aging", "-1h"}, field: "class-aging"},
		"negative bound":    {args: []string{"--starvation-wait", "-1h"}, field: "starvation-wait"},
		"negative patience": {args: []string{"--preempt-patience", "-1s"}, field: "preempt-patience"},
		"negative max-wait": {args: []string{"--max-wait", "-1s"}, field: "max-wait"},
		"negative tau":      {args: []string{"--aging-tau", "-1s"}, field: "aging-tau"},
		"missing teams":     {args: []string{"--teams", filepath.Join(dir, "none.yaml")}, field: "teams"},
		"invalid teams":     {args: []string{"--teams", bad}, field: "teams"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, v := parse(t, tc.args)
			o, err := v.Options()
			if tc.field != "" {
				if err == nil {
					t.Fatalf("%v: no error, want one naming %s", tc.args, tc.field)
				}
				if f := policyflag.Field(err); f != tc.field {
					t.Errorf("%v: error %q names %q, want %q", tc.args, err, f, tc.field)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: %v", tc.args, err)
			}
			if !tc.check(o) {
				t.Errorf("%v: options %+v", tc.args, o)
			}
		})
	}
}
