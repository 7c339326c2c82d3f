package policy_test

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/policy"
	"pgregory.net/rapid"
)

// TestPreemptPatience: a task below CRITICAL preempts only once its
// victims would lose at most its wait × its GPUs since their last
// checkpoints, or once it has waited PreemptPatience; CRITICAL at once.
func TestPreemptPatience(t *testing.T) {
	patient := policy.Options{Teams: policy.Teams{"vision": {GPUs: 4}}, PreemptPatience: time.Hour}
	// Two borrowers of nlp (no guarantee) fill the node; vision (4 GPUs
	// guaranteed) reclaims.
	borrowers := func(c *harness) *harness {
		return c.nodes(1, 8).
			running(task{id: "nlp-1", team: "nlp", class: domain.Low}, on("n1", 0, 1, 2, 3)).
			running(task{id: "nlp-2", team: "nlp", class: domain.Low}, on("n1", 4, 5, 6, 7))
	}
	cases := map[string]scenario{
		"waits while the victim would lose more than it has waited": {
			// nlp-2 would lose 10 min × 4 GPUs; vision-low has just come.
			setup: func(c *harness) {
				borrowers(c).advance(10 * time.Minute).
					submit(task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4})
			},
			opts: patient,
			want: []string{},
		},
		"preempts once it has waited as long as the victim would lose": {
			// Both checkpoint at 10 min; 10 min later nlp-2 would lose
			// 10 min × 4 GPUs, what vision-low has waited × its 4.
			setup: func(c *harness) {
				borrowers(c).advance(10 * time.Minute).checkpoint("nlp-1").checkpoint("nlp-2").
					submit(task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4}).
					advance(10 * time.Minute)
			},
			opts: patient,
			want: []string{"preempt nlp-2 for vision-low"},
		},
		"a victim just checkpointed: at once": {
			setup: func(c *harness) {
				borrowers(c).advance(time.Hour).checkpoint("nlp-1").
					submit(task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4})
			},
			opts: patient,
			want: []string{"preempt nlp-1 for vision-low"},
		},
		"after PreemptPatience, whatever the victim loses": {
			setup: func(c *harness) {
				borrowers(c).advance(time.Minute).
					submit(task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4}).
					advance(time.Hour)
			},
			opts: patient,
			want: []string{"preempt nlp-2 for vision-low"},
		},
		"CRITICAL preempts at once": {
			setup: func(c *harness) {
				borrowers(c).advance(10 * time.Minute).
					submit(task{id: "crit", team: "vision", class: domain.Critical, gpus: 4})
			},
			opts: patient,
			want: []string{"preempt nlp-2 for crit"},
		},
		"off: at once": {
			setup: func(c *harness) {
				borrowers(c).advance(10 * time.Minute).
					submit(task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4})
			},
			opts: policy.Options{Teams: policy.Teams{"vision": {GPUs: 4}}},
			want: []string{"preempt nlp-2 for vision-low"},
		},
		"free GPUs held for it: no victim to wait for": {
			// A LOW task of nlp would fit, but vision-low is ahead (under
			// its guarantee) and takes the free GPUs.
			setup: func(c *harness) {
				c.nodes(1, 8).running(task{id: "nlp-1", team: "nlp", class: domain.Low}, on("n1", 0, 1, 2, 3)).
					advance(10 * time.Minute).
					submit(task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4})
			},
			opts: patient,
			want: []string{"dispatch vision-low n1[4-7]"},
		},
	}
	runScenarios(t, cases)
}

// TestPatientUntil: a pass that leaves a task waiting for a cheaper
// preemption says when its patience runs out (its submission +
// PreemptPatience), so a caller planning only at events (the estimator's
// forward simulation) can plan again then; zero when nobody waits so.
func TestPatientUntil(t *testing.T) {
	cases := map[string]struct {
		patience time.Duration
		crit     bool
		want     time.Duration // after vision-low's submission; -1: zero
	}{
		"waits: its submission + the patience": {patience: time.Hour, want: time.Hour},
		"off: nobody waits":                    {patience: 0, want: -1},
		"CRITICAL: nobody waits":               {patience: time.Hour, crit: true, want: -1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := cluster(t).nodes(1, 8).
				running(task{id: "nlp-1", team: "nlp", class: domain.Low}, on("n1", 0, 1, 2, 3, 4, 5, 6, 7)).
				advance(10 * time.Minute)
			class := domain.Low
			if tc.crit {
				class = domain.Critical
			}
			c.submit(task{id: "vision-low", team: "vision", class: class, gpus: 4})
			sub := c.now
			c.advance(5 * time.Minute)
			r := c.plan(policy.Options{Teams: policy.Teams{"vision": {GPUs: 4}}, PreemptPatience: tc.patience})
			switch {
			case tc.want < 0 && !r.PatientUntil.IsZero():
				t.Errorf("PatientUntil %s, want zero", r.PatientUntil)
			case tc.want >= 0 && !r.PatientUntil.Equal(sub.Add(tc.want)):
				t.Errorf("PatientUntil %s after the submission, want %s", r.PatientUntil.Sub(sub), tc.want)
			}
		})
	}
}

// TestPropPreemptPatience: on random worlds, a task below CRITICAL that
// preempts in a pass has waited PreemptPatience, or its victims (chosen
// in that pass) lose at most its wait × its GPUs since their last
// checkpoints (or starts).
func TestPropPreemptPatience(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genWorld(t)
		o := genOptions(t)
		o.PreemptPatience = time.Duration(rapid.IntRange(1, 72).Draw(t, "patience-h")) * time.Hour
		r := policy.New(o).Plan(c.input())
		lost := map[string]float64{}
		for _, d := range r.Decisions {
			if d.Kind != policy.Preempt {
				continue
			}
			v := c.st.Tasks[d.TaskID]
			from := v.StartedAt
			if v.CheckpointAt.After(from) {
				from = v.CheckpointAt
			}
			if !from.IsZero() && c.now.After(from) {
				lost[d.For] += c.now.Sub(from).Seconds() * float64(len(v.GPUUUIDs()))
			}
		}
		for id, l := range lost {
			p := c.st.Tasks[id]
			if p.Priority == domain.Critical {
				continue
			}
			w := c.now.Sub(p.SubmittedAt)
			if w < o.PreemptPatience && l > w.Seconds()*float64(p.GPUs) {
				t.Fatalf("%s (waited %s, %d GPUs) preempts victims losing %.0f GPU-s under patience %s\nworld:\n%s", id, w, p.GPUs, l, o.PreemptPatience, dump(c.st, o, c.now))
			}
		}
	})
}
