package estimate_test

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
)

// quick is a completed run of team vision declared hours that ran secs.
func quick(name string, hours, secs float64) *domain.Task {
	return &domain.Task{Name: name, Team: "vision", Hours: hours, RunSeconds: secs, State: domain.Completed}
}

// Issue 25's cold start: three runs declared 2 h that ended within
// seconds, then a task declared 3 min. Its prediction leans on the user's
// estimate (the prior), not on the three runs; running past its
// prediction, it is expected to run on for a while, never to end now.
func TestColdStartPrior(t *testing.T) {
	holder := &domain.Task{Name: "holder", Team: "vision", Hours: 0.05, State: domain.Running, StartedAt: t0}
	cases := map[string]struct {
		prior   float64
		elapsed time.Duration
		min     time.Duration // of the remaining P50
		max     time.Duration
	}{
		"just started: the user's 3 min, nudged":   {estimate.DefaultPriorRuns, 0, 90 * time.Second, 3 * time.Minute},
		"85 s in: about a minute and a half left":  {estimate.DefaultPriorRuns, 85 * time.Second, 40 * time.Second, 3 * time.Minute},
		"past the 3 min declared: not now":         {estimate.DefaultPriorRuns, 4 * time.Minute, 30 * time.Second, 10 * time.Minute},
		"without the prior, 85 s in: seconds left": {0, 85 * time.Second, 0, 10 * time.Second},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := estimate.NewPredictor(0)
			p.PriorRuns = tc.prior
			for i := range 3 {
				p.Observe(quick("warmup"+string(rune('a'+i)), 2, 2))
			}
			got := p.PolicyRun(holder, t0.Add(tc.elapsed)) - tc.elapsed
			if got < tc.min || got > tc.max {
				t.Errorf("remaining P50 after %s: %s, want in [%s, %s]", tc.elapsed, got, tc.min, tc.max)
			}
		})
	}
}

// The basis of a prediction, as the advice and `gpuq estimate` say it.
func TestPredictorBasis(t *testing.T) {
	task := &domain.Task{Name: "resnet-7", Team: "vision", Hours: 1}
	cases := map[string]struct {
		exact bool
		prior float64 // 0: the default
		runs  []*domain.Task
		want  string
	}{
		"nothing learned":           {false, 0, nil, "your estimate"},
		"exact":                     {true, 50, repeat(quick("resnet-1", 1, 1800), 100), "your estimate"},
		"a few runs":                {false, 0, repeat(quick("resnet-1", 1, 1800), 3), "your estimate (3 runs learned so far)"},
		"fewer runs than the prior": {false, 50, repeat(quick("resnet-1", 1, 1800), 49), "your estimate (49 runs learned so far)"},
		"the team's runs":           {false, 50, repeat(quick("resnet-1", 1, 1800), 60), "learned from 60 runs of team vision"},
		"the family's runs":         {false, 50, append(repeat(&domain.Task{Name: "resnet-2", Team: "nlp", Hours: 1, RunSeconds: 900}, 40), repeat(quick("bert", 1, 900), 20)...), "learned from 40 runs named resnet…"},
		"the cluster's, no group":   {false, 50, repeat(&domain.Task{Name: "bert", Team: "nlp", Hours: 1, RunSeconds: 900}, 60), "learned from 60 runs on this cluster"},
		"a thin team, a thin name":  {false, 50, append(repeat(quick("bert", 1, 900), 10), repeat(&domain.Task{Name: "gpt", Team: "nlp", Hours: 1, RunSeconds: 900}, 50)...), "learned from 60 runs on this cluster"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := estimate.NewPredictor(0)
			p.Exact = tc.exact
			if tc.prior != 0 {
				p.PriorRuns = tc.prior
			}
			for _, r := range tc.runs {
				p.Observe(r)
			}
			if got := p.Basis(task); got != tc.want {
				t.Errorf("Basis = %q, want %q", got, tc.want)
			}
		})
	}
}

func repeat(t *domain.Task, n int) []*domain.Task {
	out := make([]*domain.Task, n)
	for i := range out {
		c := *t
		out[i] = &c
	}
	return out
}
