package policy_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuq/gpuq/pkg/policy"
)

// FuzzLoadTeams: a teams file (YAML, or JSON with json set) never panics
// the loader, and what it accepts validates: named teams, gpus ≥ 0, shares
// in [0, 1] adding up to at most 1, and each guarantee resolves within
// the cluster for shares.
func FuzzLoadTeams(f *testing.F) {
	f.Add([]byte("teams:\n  vision: {gpus: 8}\n  nlp: {share: 0.25}\n"), false)
	f.Add([]byte(`{"teams":{"vision":{"gpus":8},"nlp":{"share":0.5}}}`), true)
	f.Add([]byte("teams:\n  a: {share: 0.6}\n  b: {share: 0.6}\n"), false)
	f.Add([]byte("teams: &x\n  a: *x\n"), false)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, isJSON bool) {
		name := "teams.yaml"
		if isJSON {
			name = "teams.json"
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		ts, err := policy.LoadTeams(p)
		if err != nil {
			return
		}
		if err := ts.Validate(); err != nil {
			t.Fatalf("LoadTeams accepted what Validate refuses: %v", err)
		}
		sum := 0.0
		for n, g := range ts {
			if n == "" || g.GPUs < 0 || g.Share < 0 || g.Share > 1 || math.IsNaN(g.Share) {
				t.Fatalf("accepted %q: %+v", n, g)
			}
			if g.GPUs == 0 {
				sum += g.Share
				if got := g.Of(100); got < 0 || got > 100 {
					t.Fatalf("%q: share %g of 100 GPUs is %d", n, g.Share, got)
				}
			}
		}
		if sum > 1+1e-9 {
			t.Fatalf("accepted shares adding up to %g", sum)
		}
	})
}
