package policy_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// The pass's victim pool (each preemption search takes its candidates
// from the pool, sorted once per pass, and groups them by node without a
// map) finds the same candidates and chooses the same victims, at every
// step of a pass (Policy.PlanChecked), as the search that lists and sorts
// the candidates among every holder each time, over random states played
// forward — the preemptions applied, so that later passes
// meet tasks yielding and promised GPUs. Half the worlds are genWorld's;
// the other half are busy ones (genBusyWorld), where most passes preempt.
func TestPropVictimPoolSameDecisions(t *testing.T) {
	var passes, preempting [2]int
	rapid.Check(t, func(t *rapid.T) {
		var c *harness
		busy := 0
		if rapid.Bool().Draw(t, "busy") {
			busy = 1
			c = genBusyWorld(t)
		} else {
			c = genWorld(t)
			c.submitMore(t, 30)
		}
		o := genOptions(t)
		p := policy.New(o)
		c.playChecked(t, o, p, 5, "the victim pool", func(r policy.Result) {
			passes[busy]++
			if len(preempts(r)) > 0 {
				preempting[busy]++
			}
		})
	})
	t.Logf("genWorld: %d passes, %d of them preempting; genBusyWorld: %d passes, %d preempting", passes[0], preempting[0], passes[1], preempting[1])
}

// genBusyWorld fills 2–8 nodes of 2–8 GPUs with running tasks of 1–3 GPUs (some
// spanning two nodes), most of them preemptible, and queues tasks mostly
// of the higher classes: many candidates on each node, and searches that
// succeed, fail, or choose among several nodes and sets.
func genBusyWorld(t *rapid.T) *harness {
	c := cluster(t)
	nodes := make([]string, rapid.IntRange(2, 8).Draw(t, "nodes"))
	for i := range nodes {
		nodes[i] = fmt.Sprintf("n%d", i+1)
		gpus := rapid.SampledFrom([]int{8, 8, 4, 2}).Draw(t, "gpus")
		var bad []int
		if rapid.IntRange(0, 3).Draw(t, "healthy") == 3 {
			bad = append(bad, rapid.IntRange(0, gpus-1).Draw(t, "bad"))
		}
		c.node(nodes[i], gpus, rapid.SampledFrom([]string{"A100", "H100"}).Draw(t, "model"), rapid.SampledFrom([]int{40960, 81920}).Draw(t, "mem"), bad...)
	}
	i := 0
	for _, node := range nodes {
		for {
			free := c.st.FreeGPUs(c.st.Nodes[node])
			if len(free) == 0 || rapid.IntRange(0, 9).Draw(t, "leave") == 9 {
				break
			}
			k := rapid.IntRange(1, min(3, len(free))).Draw(t, "k")
			ps := []events.Placement{{Node: node, GPUs: gpuIDs(free[:k])}}
			if other := rapid.SampledFrom(nodes).Draw(t, "gang-node"); other != node && rapid.IntRange(0, 7).Draw(t, "gang") == 0 {
				if f2 := c.st.FreeGPUs(c.st.Nodes[other]); len(f2) > 0 {
					ps = append(ps, events.Placement{Node: other, GPUs: gpuIDs(f2[:1])})
				}
			}
			c.advance(time.Duration(rapid.IntRange(0, 90).Draw(t, "gap")) * time.Minute)
			tk := task{id: fmt.Sprintf("r%d", i), class: rapid.SampledFrom([]domain.Priority{domain.Low, domain.Low, domain.Medium, domain.High, domain.Critical}).Draw(t, "class"),
				team:  rapid.SampledFrom([]string{"a", "b", "c", "x"}).Draw(t, "team"),
				hours: float64(rapid.IntRange(1, 100).Draw(t, "tenths")) / 10, noPreempt: rapid.IntRange(0, 3).Draw(t, "fixed") == 3}
			c.running(tk, ps...)
			if rapid.IntRange(0, 2).Draw(t, "ckpt") == 0 {
				c.advance(time.Duration(rapid.IntRange(0, 60).Draw(t, "to-ckpt")) * time.Minute).checkpoint(tk.id)
			}
			i++
		}
	}
	var queued []string
	for j, n := 0, rapid.IntRange(1, 20).Draw(t, "queued"); j < n; j++ {
		tk := genTask(t, c, fmt.Sprintf("q%d", j))
		tk.class = rapid.SampledFrom([]domain.Priority{domain.Critical, domain.Critical, domain.High, domain.Medium, domain.Low}).Draw(t, "qclass")
		tk.gpus = rapid.IntRange(1, rapid.SampledFrom([]int{4, 8, 8, 16}).Draw(t, "qmax")).Draw(t, "qgpus")
		if rapid.IntRange(0, 2).Draw(t, "free-of-constraints") > 0 {
			tk.model, tk.mem = "", 0
		}
		c.submit(tk)
		queued = append(queued, tk.id)
	}
	for _, tk := range c.st.Active() {
		if rapid.IntRange(0, 11).Draw(t, "yields") == 11 {
			forID := "gone"
			if rapid.Bool().Draw(t, "for-queued") {
				forID = rapid.SampledFrom(queued).Draw(t, "for")
			}
			c.preempting(tk.ID, forID)
		}
	}
	c.advance(time.Duration(rapid.IntRange(0, 600).Draw(t, "now")) * time.Minute)
	return c
}
