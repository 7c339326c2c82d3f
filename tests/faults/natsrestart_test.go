//go:build faults

package faults

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestNATSRestart: the NATS server is killed (-9) and restarted on the
// same port and store while submissions and task runs are under way. The
// services reconnect and catch up: every submission acknowledged (before,
// during or after; a client retries with its idempotency key until
// acknowledged) is in the log exactly once and runs to completion, no
// GPU is dispatched twice at once, no service dies, no node that kept its
// agent running is declared lost, and the submitter's read model equals a
// clean replay of the log.
func TestNATSRestart(t *testing.T) {
	res := newCounters("nats-restart", "lost", "doubled", "twins", "stuck", "dead", "nodes_lost", "behind")
	defer res.report(t)

	c := newCluster(t)
	sub, base := c.submitter("submitter")
	sched := c.scheduler("scheduler", "--lease-ttl", "2s", "--node-timeout", "10s")
	adv := c.advisor()
	a1, a2 := c.agent("n1", 4), c.agent("n2", 4)
	services := []*proc{sub, sched, adv, a1, a2}
	c.startAll(services...)
	c.connect()

	const load = 25 * time.Second
	var (
		mu    sync.Mutex
		acked []string
		next  atomic.Int64
		wg    sync.WaitGroup
		stop  = make(chan struct{})
	)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				i := next.Add(1)
				req := request(fmt.Sprintf("load-%d", i), "sleep 0.3", 1)
				req.IdempotencyKey = fmt.Sprintf("nats-restart-%d", i)
				rep, err := c.submit(req, 2*time.Minute)
				if err != nil {
					t.Logf("submit %d: %v", i, err)
					continue
				}
				mu.Lock()
				acked = append(acked, rep.TaskID)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(8 * time.Second)
	c.nats.stop(syscall.SIGKILL, 5*time.Second)
	down := time.Now()
	time.Sleep(3 * time.Second)
	c.startNATS()
	outage := time.Since(down)
	time.Sleep(load - 11*time.Second)
	close(stop)
	wg.Wait()

	unfinished := func() int {
		q, err := queueHTTP(base, false)
		if err != nil {
			return -1
		}
		return len(q)
	}
	drained, stalled := drain(unfinished, 3*time.Minute, 45*time.Second)
	for _, p := range services {
		if !p.alive() {
			res.add("dead", 1)
			t.Logf("%s exited:\n%s", p.name, tail(p.logSince(), 10))
		}
	}

	recs := c.readLog()
	clean := fold(recs, 0)
	perKey := map[string]int{}
	inLog := map[string]bool{}
	for _, x := range recs {
		switch e := x.r.Event.(type) {
		case events.Submitted:
			inLog[e.TaskID] = true
			perKey[e.IdempotencyKey]++
		case events.Lost:
			res.add("nodes_lost", 1)
			t.Logf("seq %d: node %s declared lost: %s", x.Seq, e.Node, e.Reason)
		}
	}
	for k, n := range perKey {
		if n > 1 {
			res.add("twins", n-1)
			t.Logf("key %s: %d tasks", k, n)
		}
	}
	for _, id := range acked {
		if !inLog[id] {
			res.add("lost", 1)
		}
	}
	st := states(clean, acked)
	res.add("stuck", len(acked)-st[domain.Completed]-countAbsent(clean, acked))
	if res.vals["stuck"] > 0 {
		logUnfinished(t, recs, clean, acked)
	}
	d := checkDoubles(recs)
	res.add("doubled", d.GPU+d.Task)
	for _, s := range d.Detail {
		t.Log(s)
	}
	if all, err := queueHTTP(base, true); err != nil || viewDigest(all) != viewDigest(views(clean)) {
		res.add("behind", 1)
		t.Logf("the submitter's queue --all differs from a clean replay (%v)", err)
	}
	res.note("acked=%d outage=%.1fs events=%d drained=%v stalled=%v", len(acked), outage.Seconds(), len(recs), drained, stalled)
}
