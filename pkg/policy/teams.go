package policy

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/gpuq/gpuq/pkg/domain"
)

// Guarantee is a team's guaranteed minimum: a GPU count, or a share of the
// cluster's healthy GPUs (0 < share ≤ 1), not both.
type Guarantee struct {
	GPUs  int     `json:"gpus,omitempty" yaml:"gpus,omitempty"`
	Share float64 `json:"share,omitempty" yaml:"share,omitempty"`
}

// Teams maps a team to its guarantee.
type Teams map[string]Guarantee

// Of resolves the guarantee on a cluster of total healthy GPUs, as the
// policy does (the audit's verifier judges guarantees with it).
func (g Guarantee) Of(total int) int { return g.of(total) }

// GPUs resolves the guarantee on a cluster of total GPUs.
func (g Guarantee) of(total int) int {
	if g.GPUs > 0 {
		return g.GPUs
	}
	return int(math.Floor(g.Share * float64(total)))
}

// Validate checks every guarantee.
func (ts Teams) Validate() error {
	names := slices.Sorted(maps.Keys(ts))
	sum := 0.0
	for _, n := range names {
		g := ts[n]
		if !domain.ValidTeam(n) {
			return fmt.Errorf("teams: team %q: the name %s", n, domain.TeamRule)
		}
		if g.GPUs > 0 && g.Share > 0 {
			return fmt.Errorf("teams: %s: give gpus or share, not both", n)
		}
		if g.GPUs < 0 || !(g.Share >= 0 && g.Share <= 1) { // NaN too (YAML .nan; found by FuzzLoadTeams)
			return fmt.Errorf("teams: %s: gpus must be ≥ 0 and share between 0 and 1", n)
		}
		if g.GPUs == 0 && g.Share == 0 {
			return fmt.Errorf("teams: %s: give gpus or share", n)
		}
		if g.GPUs == 0 {
			sum += g.Share
		}
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("teams: shares add up to %.2f, more than 1", sum)
	}
	return nil
}

// LoadTeams reads a teams file, YAML or JSON:
//
//	teams:
//	  vision: {gpus: 8}
//	  nlp: {share: 0.25}
func LoadTeams(path string) (Teams, error) {
	ts, err := readTeamsFile(path)
	if err != nil {
		return nil, err
	}
	if err := ts.Validate(); err != nil {
		return nil, fmt.Errorf("teams file %s: %w", path, err)
	}
	return ts, nil
}
