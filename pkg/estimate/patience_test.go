package estimate_test

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// TestForwardWakesAtPatience: a reclaimer waiting for a cheaper
// preemption (policy.Options.PreemptPatience) starts in the forward
// simulation when its patience runs out — its submission + the patience,
// the instant the policy stops waiting — although no task ends and
// nothing arrives then. Without the wake-up it started at its victim's
// end, hours later.
func TestForwardWakesAtPatience(t *testing.T) {
	cases := map[string]struct {
		patience time.Duration
		waited   time.Duration // the reclaimer's wait at the estimate
		grace    float64       // the victim's, in seconds
		want     time.Duration // predicted start − the reclaimer's submission
	}{
		"off: at once":                       {patience: 0, waited: 5 * time.Minute, want: 5 * time.Minute},
		"30 min after its submission":        {patience: 30 * time.Minute, want: 30 * time.Minute},
		"from its submission, not from now":  {patience: 30 * time.Minute, waited: 20 * time.Minute, want: 30 * time.Minute},
		"1 h":                                {patience: time.Hour, waited: 5 * time.Minute, want: time.Hour},
		"then the victim's grace":            {patience: 30 * time.Minute, grace: 120, want: 32 * time.Minute},
		"past the patience already: at once": {patience: 30 * time.Minute, waited: 40 * time.Minute, want: 40 * time.Minute},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pol := policy.New(policy.Options{Teams: policy.Teams{"vision": {GPUs: 8}}, PreemptPatience: tc.patience})
			l := newLog()
			l.node("n1", 8)
			// nlp (no guarantee) borrows the whole node for 10 h; 10 min
			// later vision, guaranteed the node, needs it.
			l.add(t0, events.Submitted{TaskID: "nlp", Name: "nlp", Team: "nlp", Priority: "low", GPUs: 8, Hours: 10, Hypothesis: "h",
				Command: "true", Preemptible: true, GraceS: tc.grace, SubmittedAt: t0})
			l.run(t0, "nlp")
			sub := t0.Add(10 * time.Minute)
			l.add(sub, events.Submitted{TaskID: "vision", Name: "vision", Team: "vision", Priority: "low", GPUs: 8, Hours: 1, Hypothesis: "h",
				Command: "true", Preemptible: true, SubmittedAt: sub})
			at, ok := estimate.Forward(l.st, pol, l.est.Pred, sub.Add(tc.waited), "vision", 0.5, nil)
			if !ok || at.Sub(sub) != tc.want {
				t.Errorf("predicted start %s after its submission (ok %v), want %s", at.Sub(sub), ok, tc.want)
			}
		})
	}
}
