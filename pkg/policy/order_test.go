package policy_test

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/policy"
)

// Order is visible as the order of dispatches on a node big enough for
// every task: a pass appends decisions as it considers tasks.
func TestOrder(t *testing.T) {
	minute := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	// The cases below pin the aging pace and the guard (2 h, 48 h) so that
	// their arithmetic stays readable; the defaults have their own cases.
	spf := policy.Options{WithinClass: policy.ShortestPredicted, AgingTau: 2 * time.Hour, MaxWait: 48 * time.Hour}
	spfDefault := policy.Options{WithinClass: policy.ShortestPredicted}
	cases := map[string]scenario{
		"class by rank, not by name or submit time": {
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(
					task{id: "low", class: domain.Low, at: minute(0)},
					task{id: "medium", class: domain.Medium, at: minute(1)},
					task{id: "critical", class: domain.Critical, at: minute(2)},
					task{id: "high", class: domain.High, at: minute(3)},
				)
			},
			want: []string{"dispatch critical n1[0]", "dispatch high n1[1]", "dispatch medium n1[2]", "dispatch low n1[3]"},
		},
		"fifo within class by submit time, not log order": {
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(
					task{id: "third", class: domain.High, at: minute(2)},
					task{id: "second", class: domain.High, at: minute(1)},
					task{id: "first", class: domain.High, at: minute(0)},
				)
			},
			want: []string{"dispatch first n1[0]", "dispatch second n1[1]", "dispatch third n1[2]"},
		},
		"fifo: equal submit times in log order": {
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(
					task{id: "b", at: minute(0)}, task{id: "a", at: minute(0)}, task{id: "c", at: minute(0)},
				)
			},
			want: []string{"dispatch b n1[0]", "dispatch a n1[1]", "dispatch c n1[2]"},
		},
		"fifo ignores predictions": {
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(
					task{id: "long", pred: 10 * time.Hour, at: minute(0)},
					task{id: "short", pred: time.Minute, at: minute(1)},
				)
			},
			want: []string{"dispatch long n1[0]", "dispatch short n1[1]"},
		},
		"shortest-predicted: shortest first within class": {
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(
					task{id: "3h", pred: 3 * time.Hour},
					task{id: "1h", pred: time.Hour},
					task{id: "2h", pred: 2 * time.Hour},
				)
			},
			opts: spf,
			want: []string{"dispatch 1h n1[0]", "dispatch 2h n1[1]", "dispatch 3h n1[2]"},
		},
		"shortest-predicted: class still comes first": {
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(
					task{id: "low-short", class: domain.Low, pred: time.Minute},
					task{id: "high-long", class: domain.High, pred: 100 * time.Hour},
				)
			},
			opts: spf,
			want: []string{"dispatch high-long n1[0]", "dispatch low-short n1[1]"},
		},
		"shortest-predicted: without a prediction the estimate counts": {
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(
					task{id: "est-3h", hours: 3},
					task{id: "pred-2h", hours: 9, pred: 2 * time.Hour},
				)
			},
			opts: spf,
			want: []string{"dispatch pred-2h n1[0]", "dispatch est-3h n1[1]"},
		},
		"shortest-predicted: aging not yet enough": {
			// 10 h waited 10 h: 10/(1+5) = 1.67 h > 1 h.
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(task{id: "old-long", pred: 10 * time.Hour})
				c.advance(10 * time.Hour).submit(task{id: "new-short", pred: time.Hour})
			},
			opts: spf,
			want: []string{"dispatch new-short n1[0]", "dispatch old-long n1[1]"},
		},
		"shortest-predicted: an old long task eventually goes first": {
			// 10 h waited 20 h: 10/(1+10) = 0.91 h < 1 h.
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(task{id: "old-long", pred: 10 * time.Hour})
				c.advance(20 * time.Hour).submit(task{id: "new-short", pred: time.Hour})
			},
			opts: spf,
			want: []string{"dispatch old-long n1[0]", "dispatch new-short n1[1]"},
		},
		"shortest-predicted: AgingTau sets the pace": {
			// 10 h waited 2 h at tau 12 min: 10/(1+10) < 1 h.
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(task{id: "old-long", pred: 10 * time.Hour})
				c.advance(2 * time.Hour).submit(task{id: "new-short", pred: time.Hour})
			},
			opts: policy.Options{WithinClass: policy.ShortestPredicted, AgingTau: 12 * time.Minute},
			want: []string{"dispatch old-long n1[0]", "dispatch new-short n1[1]"},
		},
		"shortest-predicted: MaxWait puts an aged task first whatever its key": {
			// 1000 h waited 49 h: 1000/(1+24.5) = 39 h, far behind 1 min,
			// but 49 h ≥ MaxWait (48 h).
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(task{id: "aged", pred: 1000 * time.Hour})
				c.advance(49 * time.Hour).submit(task{id: "new-short", pred: time.Minute})
			},
			opts: spf,
			want: []string{"dispatch aged n1[0]", "dispatch new-short n1[1]"},
		},
		"shortest-predicted: the key is the service, GPUs × run time": {
			// 4 GPUs × 1 h = 4 GPU-h goes after 1 GPU × 2 h = 2 GPU-h.
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(task{id: "wide", gpus: 4, pred: time.Hour})
				c.submit(task{id: "narrow", gpus: 1, pred: 2 * time.Hour})
			},
			opts: spf,
			want: []string{"dispatch narrow n1[0]", "dispatch wide n1[1-4]"},
		},
		"shortest-predicted defaults: aged after DefaultMaxWait (5 days)": {
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(task{id: "aged", pred: 1000 * time.Hour})
				c.advance(policy.DefaultMaxWait).submit(task{id: "new-short", pred: time.Minute})
			},
			opts: spfDefault,
			want: []string{"dispatch aged n1[0]", "dispatch new-short n1[1]"},
		},
		"shortest-predicted defaults: just under DefaultMaxWait, aged by DefaultAgingTau only": {
			// 1000 h waited 119 h at tau 8 h: 1000/(1+14.9) = 63 h, behind 1 min.
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(task{id: "almost", pred: 1000 * time.Hour})
				c.advance(policy.DefaultMaxWait - time.Hour).submit(task{id: "new-short", pred: time.Minute})
			},
			opts: spfDefault,
			want: []string{"dispatch new-short n1[0]", "dispatch almost n1[1]"},
		},
		"shortest-predicted: just under MaxWait is not aged": {
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(task{id: "almost", pred: 1000 * time.Hour})
				c.advance(47 * time.Hour).submit(task{id: "new-short", pred: time.Minute})
			},
			opts: spf,
			want: []string{"dispatch new-short n1[0]", "dispatch almost n1[1]"},
		},
		"shortest-predicted: aged tasks among themselves in submit order": {
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(
					task{id: "aged-later-short", pred: time.Minute, at: t0.Add(time.Hour)},
					task{id: "aged-first-long", pred: 100 * time.Hour, at: t0},
				)
				c.advance(3 * time.Hour).submit(task{id: "fresh", pred: time.Second})
			},
			opts: policy.Options{WithinClass: policy.ShortestPredicted, MaxWait: time.Hour},
			want: []string{"dispatch aged-first-long n1[0]", "dispatch aged-later-short n1[1]", "dispatch fresh n1[2]"},
		},
		"shortest-predicted: MaxWait does not jump classes": {
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920).submit(task{id: "aged-low", class: domain.Low, pred: time.Hour})
				c.advance(100 * time.Hour).submit(task{id: "fresh-high", class: domain.High, pred: 100 * time.Hour})
			},
			opts: spf,
			want: []string{"dispatch fresh-high n1[0]", "dispatch aged-low n1[1]"},
		},
	}
	runScenarios(t, cases)
}

// The aging guard as a process: a long task keeps losing to a stream of
// fresh short ones on a one-GPU node until its wait lifts it to the front.
func TestAgingGuardEndsStarvation(t *testing.T) {
	c := cluster(t).node("n1", 1, "H100", 81920).
		submit(task{id: "long", class: domain.Low, pred: 10 * time.Hour})
	opts := policy.Options{WithinClass: policy.ShortestPredicted, AgingTau: 2 * time.Hour}
	started := time.Time{}
	for i := 0; i < 200 && started.IsZero(); i++ {
		// A fresh one-hour task arrives every hour; the node runs one at a time.
		c.submit(task{id: "short-" + itoa(i), class: domain.Low, pred: time.Hour})
		r := c.plan(opts)
		c.play(r)
		for _, id := range dispatched(r) {
			if id == "long" {
				started = c.now
			}
		}
		c.advance(time.Hour)
		for _, tk := range c.st.InState(domain.Running) {
			c.complete(tk.ID)
		}
	}
	if started.IsZero() {
		t.Fatalf("the long task never started in 200 h of fresh short tasks")
	}
	// 10/(1+w/2h) < 1 once w > 18 h.
	if w := started.Sub(t0); w < 18*time.Hour || w > 20*time.Hour {
		t.Errorf("long task started after %s, want between 18 h and 20 h", w)
	}
}
