//go:build faults

package faults

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestRetryStorm: the same idempotency key 100 times concurrently over
// HTTP and 100 times over NATS, all released at once, against two
// submitter processes (each with its own fold, so neither can rely on
// having seen the other's append) — exactly one task in the log, and every
// answer names it. Three rounds, three keys.
func TestRetryStorm(t *testing.T) {
	const perTransport, rounds = 100, 3
	res := newCounters("retry-storm", "lost", "doubled", "differ", "unanswered")
	defer res.report(t)

	c := newCluster(t)
	s1, base1 := c.submitter("submitter-1")
	s2, base2 := c.submitter("submitter-2")
	sched := c.scheduler("scheduler", "--lease-ttl", "1s")
	agent := c.agent("n1", 8)
	c.startAll(s1, s2, sched, agent)
	c.connect()

	answers := make([]map[string]int, rounds) // round -> task id -> answers
	keys := make([]string, rounds)
	for r := 0; r < rounds; r++ {
		key := fmt.Sprintf("storm-%d-%s", r, newID())
		keys[r] = key
		req := request("storm", "true", 1)
		req.IdempotencyKey = key
		var (
			mu   sync.Mutex
			wg   sync.WaitGroup
			gate = make(chan struct{})
		)
		answers[r] = map[string]int{}
		call := func(do func() (api.SubmitReply, error)) {
			defer wg.Done()
			<-gate
			var rep api.SubmitReply
			var err error
			for attempt := 0; attempt < 3; attempt++ { // a CI client retries a failed call
				if rep, err = do(); err == nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.add("unanswered", 1)
				t.Logf("round %d: %v", r, err)
				return
			}
			answers[r][rep.TaskID]++
		}
		for i := 0; i < perTransport; i++ {
			base := base1
			if i%2 == 1 {
				base = base2
			}
			wg.Add(2)
			go call(func() (api.SubmitReply, error) { return submitHTTP(base, req) })
			go call(func() (api.SubmitReply, error) {
				var rep api.SubmitReply
				err := c.api.Call(api.OpSubmit, req, &rep)
				return rep, err
			})
		}
		close(gate)
		wg.Wait()
	}

	// The log decides: how many submitted events carry each key.
	time.Sleep(time.Second)
	recs := c.readLog()
	byKey := map[string][]string{}
	for _, x := range recs {
		if s, ok := x.r.Event.(events.Submitted); ok && x.err == nil && s.IdempotencyKey != "" {
			byKey[s.IdempotencyKey] = append(byKey[s.IdempotencyKey], s.TaskID)
		}
	}
	total := 0
	for r := 0; r < rounds; r++ {
		logged := byKey[keys[r]]
		total += len(logged)
		switch {
		case len(logged) == 0:
			res.add("lost", 1)
		case len(logged) > 1:
			res.add("doubled", len(logged)-1)
			t.Logf("round %d: %d tasks for one key: %v", r, len(logged), logged)
		}
		for id, n := range answers[r] {
			if len(logged) == 0 || id != logged[0] {
				res.add("differ", n)
				t.Logf("round %d: %d answers named %s, the log has %v", r, n, id, logged)
			}
		}
	}
	res.note("rounds=%d requests=%d tasks=%d", rounds, rounds*2*perTransport, total)
}
