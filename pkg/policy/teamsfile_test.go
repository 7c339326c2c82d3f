package policy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/policy"
)

// TestLoadTeams: a teams file is read from YAML or JSON with every error
// naming its line and column and the rule — never a Go type.
func TestLoadTeams(t *testing.T) {
	tests := map[string]struct {
		file, body string
		want       policy.Teams
		wantErr    string
	}{
		"yaml":                  {file: "t.yaml", body: "teams:\n  vision: {gpus: 8}\n  nlp: {share: 0.25}\n", want: policy.Teams{"vision": {GPUs: 8}, "nlp": {Share: 0.25}}},
		"json":                  {file: "t.json", body: `{"teams": {"vision": {"gpus": 8}}}`, want: policy.Teams{"vision": {GPUs: 8}}},
		"empty file":            {file: "t.yaml", body: "", wantErr: "the file is empty"},
		"gpus and share":        {file: "t.yaml", body: "teams:\n  vision: {gpus: 8, share: 0.5}\n", wantErr: "line 2, column 11: team vision: give gpus or share, not both"},
		"a dotted team name":    {file: "t.yaml", body: "teams:\n  vis.ion: {gpus: 8}\n", wantErr: `line 2, column 3: team "vis.ion": the name must be`},
		"unknown key":           {file: "t.yaml", body: "teams:\n  vision: {gpu: 8}\n", wantErr: `line 2, column 12: team vision: unknown key "gpu" (known: gpus, share)`},
		"unknown top-level key": {file: "t.yaml", body: "team:\n  vision: {gpus: 8}\n", wantErr: "line 1, column 1: unknown key \"team\""},
		"fractional gpus":       {file: "t.json", body: `{"teams": {"a": {"gpus": 2.5}}}`, wantErr: `line 1, column 26: team a: gpus must be a whole number ≥ 1 (got "2.5")`},
		"share over 1":          {file: "t.yaml", body: "teams:\n  a: {share: 1.5}\n", wantErr: "share must be a number in (0, 1]"},
		"shares over 1":         {file: "t.yaml", body: "teams:\n  a: {share: 0.6}\n  b: {share: 0.6}\n", wantErr: "shares add up to 1.20"},
		"bad json":              {file: "t.json", body: "{\"teams\": {\"a\": {\"gpus\": 1}}", wantErr: "line 1"},
		"repeated team":         {file: "t.yaml", body: "teams:\n  a: {gpus: 1}\n  a: {gpus: 2}\n", wantErr: "line 3"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.file)
			if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := policy.LoadTeams(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "policy.") || strings.Contains(err.Error(), "Go ") {
					t.Errorf("error %q shows a Go type", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("teams (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckCluster(t *testing.T) {
	tests := map[string]struct {
		teams   policy.Teams
		total   int
		wantErr string
	}{
		"fits":                 {teams: policy.Teams{"a": {GPUs: 4}, "b": {Share: 0.5}}, total: 8},
		"1,000 GPUs on 8":      {teams: policy.Teams{"a": {GPUs: 1000}}, total: 8, wantErr: "add up to 1000 GPUs (a 1000) on a cluster of 8"},
		"counts and shares":    {teams: policy.Teams{"a": {GPUs: 6}, "b": {Share: 0.5}}, total: 8, wantErr: "add up to 10 GPUs"},
		"no cluster known yet": {teams: policy.Teams{"a": {GPUs: 1000}}, total: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.teams.CheckCluster(tc.total)
			if (tc.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("CheckCluster = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
