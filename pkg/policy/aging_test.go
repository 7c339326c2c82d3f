package policy_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/policy"
)

// ClassAging under FIFO within class: waiting ClassAging makes up for one
// class — the queue below CRITICAL is in order of submit time less
// ClassAging per class above LOW; CRITICAL keeps its place, and an aged
// task preempts no one by its aged class.
func TestClassAging(t *testing.T) {
	h := time.Hour
	cases := map[string]struct {
		aging time.Duration
		queue []task // submitted in this order, at t0 + the given wait back
		want  []string
	}{
		"off: strict class order": {
			aging: 0,
			queue: []task{{id: "low-old", class: domain.Low, at: t0.Add(-100 * h)}, {id: "med", class: domain.Medium}, {id: "high", class: domain.High}},
			want:  []string{"high", "med", "low-old"},
		},
		"nobody waited long enough: strict class order": {
			aging: 200 * h,
			queue: []task{{id: "low-old", class: domain.Low, at: t0.Add(-100 * h)}, {id: "med", class: domain.Medium}, {id: "high", class: domain.High}},
			want:  []string{"high", "med", "low-old"},
		},
		"LOW that waited 48 h more than a MEDIUM: ahead of it": {
			aging: 48 * h,
			queue: []task{{id: "low-old", class: domain.Low, at: t0.Add(-50 * h)}, {id: "med", class: domain.Medium, at: t0.Add(-h)}, {id: "high", class: domain.High}},
			want:  []string{"high", "low-old", "med"},
		},
		"LOW that waited less than 48 h more: behind the MEDIUM": {
			aging: 48 * h,
			queue: []task{{id: "med-older", class: domain.Medium, at: t0.Add(-60 * h)}, {id: "low-old", class: domain.Low, at: t0.Add(-50 * h)}, {id: "med", class: domain.Medium}},
			want:  []string{"med-older", "low-old", "med"},
		},
		"LOW that waited 2 × 24 h more than a HIGH: ahead of it": {
			aging: 24 * h,
			queue: []task{{id: "high", class: domain.High, at: t0.Add(-h)}, {id: "low-old", class: domain.Low, at: t0.Add(-50 * h)}},
			want:  []string{"low-old", "high"},
		},
		"CRITICAL stays first": {
			aging: time.Hour,
			queue: []task{{id: "low-old", class: domain.Low, at: t0.Add(-500 * h)}, {id: "crit", class: domain.Critical}},
			want:  []string{"crit", "low-old"},
		},
		"within a class: submit order": {
			aging: time.Hour,
			queue: []task{{id: "crit", class: domain.Critical}, {id: "high-old", class: domain.High, at: t0.Add(-500 * h)}, {id: "high", class: domain.High}},
			want:  []string{"crit", "high-old", "high"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := cluster(t).node("n1", 1, "A100", 40960).running(task{id: "busy", noPreempt: true}, on("n1", 0))
			c.submit(tc.queue...)
			r := c.plan(policy.Options{ClassAging: tc.aging, Explain: true})
			got := make([]string, len(tc.want))
			for id, w := range r.Waiting {
				if w.Position >= 1 && w.Position <= len(got) {
					got[w.Position-1] = id
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("queue order (-want +got):\n%s", diff)
			}
		})
	}
}

// An aged task preempts no one by its aged class: a LOW task aged to HIGH
// under the ladder does not preempt a running MEDIUM one.
func TestClassAgingKeepsPreemptionClass(t *testing.T) {
	c := cluster(t).node("n1", 1, "A100", 40960).running(task{id: "med", class: domain.Medium}, on("n1", 0))
	c.submit(task{id: "low-old", class: domain.Low, at: t0.Add(-100 * time.Hour)})
	r := c.plan(policy.Options{Preemption: policy.Ladder, ClassAging: time.Hour})
	if got := preempts(r); len(got) > 0 {
		t.Errorf("the aged LOW task preempted: %v", summary(r.Decisions))
	}
}

// Over random states played forward, the pass's order under FIFO within
// class (the merge of the class lists) is the order's definition (every
// queued task sorted by tier, submit time less ClassAging per class,
// class, queue order; under StarvationWait the starved tasks right after
// CRITICAL, by submit time); and with a ClassAging and a StarvationWait
// nobody reached the pass decides and explains as with neither.
func TestPropClassAgingOrder(t *testing.T) {
	starvedSteps := 0
	rapid.Check(t, func(t *rapid.T) {
		c := genWorld(t)
		c.submitMore(t, 30)
		o := genOptions(t)
		o.WithinClass = policy.FIFO
		o.ClassAging = time.Duration(rapid.IntRange(10, 3000).Draw(t, "aging-min")) * time.Minute
		if rapid.Bool().Draw(t, "starvation") {
			o.StarvationWait = time.Duration(rapid.IntRange(10, 3000).Draw(t, "starvation-min")) * time.Minute
		}
		p := policy.New(o)
		off := o
		off.ClassAging, off.StarvationWait = 0, 0
		never := o
		never.ClassAging = 100000 * time.Hour
		if o.StarvationWait > 0 {
			never.StarvationWait = 100000 * time.Hour
		}
		for step := 0; step < 3; step++ {
			in := c.input()
			if diff := cmp.Diff(p.RefOrder(in), p.Order(in)); diff != "" {
				t.Fatalf("step %d: the order differs from its definition (-want +got):\n%s\nworld:\n%s", step, diff, dump(c.st, o, c.now))
			}
			want := policy.New(off).Plan(in)
			if diff := cmp.Diff(want, policy.New(never).Plan(in), cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("step %d: an aging nobody reached changes the pass (-off +on):\n%s", step, diff)
			}
			if o.StarvationWait > 0 {
				for _, q := range in.State.Queued() {
					if q.Priority != domain.Critical && q.FirstStarted.IsZero() && in.Now.Sub(q.SubmittedAt) >= o.StarvationWait {
						starvedSteps++
						break
					}
				}
			}
			r := p.Plan(in)
			c.play(r)
			c.playOn(t)
		}
	})
	t.Logf("%d steps with a starved task", starvedSteps)
	if starvedSteps == 0 {
		t.Error("no step had a starved task: the property did not exercise StarvationWait")
	}
}

// The policy's victims lose no more work than Kueue's newest: over random
// busy clusters with one CRITICAL task queued that fits a node, both
// choose the fewest victims of the lowest classes, and among those
// least-lost the least work since the checkpoints.
func TestPropLeastLostNoMoreThanNewest(t *testing.T) {
	compared := 0
	rapid.Check(t, func(t *rapid.T) {
		c := cluster(t)
		nodes := rapid.IntRange(1, 4).Draw(t, "nodes")
		for n := 0; n < nodes; n++ {
			c.node(nodeName(n), 8, "A100", 81920)
		}
		i := 0
		for n := 0; n < nodes; n++ {
			for g := 0; g < 8; {
				k := min(rapid.IntRange(1, 4).Draw(t, "k"), 8-g)
				c.advance(time.Duration(rapid.IntRange(1, 90).Draw(t, "gap")) * time.Minute)
				id := "r" + itoa(i)
				c.running(task{id: id, class: rapid.SampledFrom([]domain.Priority{domain.Low, domain.Medium, domain.High}).Draw(t, "class"),
					gpus: k, noPreempt: rapid.IntRange(0, 5).Draw(t, "fixed") == 0}, on(nodeName(n), span(g, g+k)...))
				if rapid.IntRange(0, 2).Draw(t, "ckpt") == 0 {
					c.advance(time.Duration(rapid.IntRange(0, 60).Draw(t, "to-ckpt")) * time.Minute).checkpoint(id)
				}
				g += k
				i++
			}
		}
		c.advance(time.Duration(rapid.IntRange(0, 300).Draw(t, "now")) * time.Minute)
		c.submit(task{id: "crit", class: domain.Critical, gpus: rapid.IntRange(1, 8).Draw(t, "gpus")})
		lost := func(v policy.Options) (float64, int) {
			r := c.plan(v)
			sum := 0.0
			for _, d := range preempts(r) {
				tk := c.st.Tasks[d.TaskID]
				from := tk.StartedAt
				if tk.CheckpointAt.After(from) {
					from = tk.CheckpointAt
				}
				sum += c.now.Sub(from).Seconds() * float64(tk.GPUs)
			}
			return sum, len(preempts(r))
		}
		least, nl := lost(policy.Options{})
		newest, nn := lost(policy.Options{Victims: policy.Newest})
		if nl != nn {
			t.Fatalf("least-lost preempts %d tasks, newest %d", nl, nn)
		}
		if least > newest {
			t.Fatalf("least-lost loses %.0f GPU-s, newest %.0f", least, newest)
		}
		if nl > 0 {
			compared++
		}
	})
	t.Logf("%d cases preempting", compared)
}

func nodeName(n int) string { return "n" + itoa(n+1) }

// StarvationWait under FIFO within class: a task below CRITICAL that
// waited that long without a start goes right after CRITICAL, across
// tiers and classes, in submit order; until then nothing changes.
func TestStarvationWait(t *testing.T) {
	h := time.Hour
	cases := map[string]struct {
		wait  time.Duration
		aging time.Duration
		teams policy.Teams
		queue []task
		want  []string
	}{
		"off: strict class order": {
			queue: []task{{id: "low-old", class: domain.Low, at: t0.Add(-500 * h)}, {id: "med", class: domain.Medium}, {id: "high", class: domain.High}},
			want:  []string{"high", "med", "low-old"},
		},
		"nobody waited that long: strict class order": {
			wait:  600 * h,
			queue: []task{{id: "low-old", class: domain.Low, at: t0.Add(-500 * h)}, {id: "med", class: domain.Medium}, {id: "high", class: domain.High}},
			want:  []string{"high", "med", "low-old"},
		},
		"the starved LOW goes ahead of HIGH": {
			wait:  96 * h,
			queue: []task{{id: "low-old", class: domain.Low, at: t0.Add(-100 * h)}, {id: "med", class: domain.Medium}, {id: "high", class: domain.High}},
			want:  []string{"low-old", "high", "med"},
		},
		"starved tasks in submit order, whatever their class": {
			wait: 96 * h,
			queue: []task{{id: "high-old", class: domain.High, at: t0.Add(-97 * h)}, {id: "low-older", class: domain.Low, at: t0.Add(-120 * h)},
				{id: "med-old", class: domain.Medium, at: t0.Add(-100 * h)}, {id: "high", class: domain.High}},
			want: []string{"low-older", "med-old", "high-old", "high"},
		},
		"CRITICAL stays first": {
			wait:  h,
			queue: []task{{id: "low-old", class: domain.Low, at: t0.Add(-500 * h)}, {id: "crit", class: domain.Critical}},
			want:  []string{"crit", "low-old"},
		},
		"across the teams' tiers": {
			wait:  96 * h,
			teams: policy.Teams{"b": {GPUs: 1}},
			queue: []task{{id: "a-old", team: "a", class: domain.Low, at: t0.Add(-100 * h)}, {id: "b-high", team: "b", class: domain.High}},
			want:  []string{"a-old", "b-high"},
		},
		"with class ageing: the starved first, the rest aged": {
			wait:  96 * h,
			aging: 24 * h,
			queue: []task{{id: "low-old", class: domain.Low, at: t0.Add(-100 * h)}, {id: "low-50", class: domain.Low, at: t0.Add(-50 * h)},
				{id: "med", class: domain.Medium, at: t0.Add(-h)}, {id: "high", class: domain.High}},
			want: []string{"low-old", "low-50", "high", "med"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := cluster(t).node("n1", 1, "A100", 40960).running(task{id: "busy", team: "a", noPreempt: true}, on("n1", 0))
			c.submit(tc.queue...)
			r := c.plan(policy.Options{StarvationWait: tc.wait, ClassAging: tc.aging, Teams: tc.teams, Explain: true})
			got := make([]string, len(tc.want))
			for id, w := range r.Waiting {
				if w.Position >= 1 && w.Position <= len(got) {
					got[w.Position-1] = id
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("queue order (-want +got):\n%s", diff)
			}
		})
	}
}

// A task that cannot run now blocks nothing: a pass with nothing free
// goes on past it to a later task that may preempt, with and without
// Explain (TestPropPass found the pass stopping at it without Explain).
func TestUnplaceableAheadDoesNotStopPreemption(t *testing.T) {
	for name, explain := range map[string]bool{"without explain": false, "with explain": true} {
		t.Run(name, func(t *testing.T) {
			c := cluster(t).node("n1", 1, "A100", 40960).running(task{id: "r0", class: domain.Low}, on("n1", 0))
			c.submit(task{id: "low-h100", class: domain.Low, model: "H100", at: t0.Add(-100 * time.Hour)}, task{id: "med", class: domain.Medium})
			r := c.plan(policy.Options{Preemption: policy.Ladder, StarvationWait: 96 * time.Hour, Explain: explain})
			got := preempts(r)
			if len(got) != 1 || got[0].TaskID != "r0" || got[0].For != "med" {
				t.Errorf("preemptions %v, want r0 for med", summary(r.Decisions))
			}
		})
	}
}
