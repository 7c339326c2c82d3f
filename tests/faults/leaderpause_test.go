//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

// TestLeaderPause: two schedulers with a 2 s lease; the leader is
// SIGSTOPped past its lease (and past the node timeout) while the standby
// takes over and dispatches, then SIGCONTed. No GPU or task is dispatched
// twice at once — on the event sequence and by the task processes' own
// start/end marks — and the resumed old leader gets no decision into the
// log: whatever it decides from its stale state (dispatches, preemptions,
// requeues, nodes it thinks silent) must be refused.
func TestLeaderPause(t *testing.T) {
	res := newCounters("leader-pause", "lost", "doubled", "stale", "nodes_lost")
	defer res.report(t)

	c := newCluster(t)
	sub, _ := c.submitter("submitter")
	s1 := c.scheduler("sched-1", "--lease-ttl", "2s", "--node-timeout", "4s")
	s2 := c.scheduler("sched-2", "--lease-ttl", "2s", "--node-timeout", "4s")
	a1, a2 := c.agent("n1", 4), c.agent("n2", 4)
	c.startAll(sub, s1, a1, a2)
	s2.start(t) // the standby: it logs ready only once it leads
	c.connect()

	// A steady load of short tasks of 1–4 GPUs, so that there is always
	// something to decide.
	var (
		mu    sync.Mutex
		tasks []string
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			rep, err := c.submit(request(fmt.Sprintf("load-%d", i), c.markCmd(0.5+rand.Float64()), 1+rand.IntN(4)), 30*time.Second)
			if err != nil {
				t.Logf("submit: %v", err)
				continue
			}
			mu.Lock()
			tasks = append(tasks, rep.TaskID)
			mu.Unlock()
		}
	}()

	time.Sleep(4 * time.Second)
	s1.signal(syscall.SIGSTOP)
	paused := time.Now()
	time.Sleep(200 * time.Millisecond) // what it had in flight lands
	boundary, err := c.log.LastSeq(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s2.waitLog(t, "ready: leading", 30*time.Second)
	took := time.Since(paused)
	time.Sleep(5 * time.Second) // the new leader dispatches; the old one's view of heartbeats ages
	resumeAt := len(s1.logSince())
	s1.signal(syscall.SIGCONT)
	pause := time.Since(paused)
	time.Sleep(8 * time.Second)
	close(stop)
	wg.Wait()

	for id, s := range c.waitAll(tasks, "completed", 90*time.Second) {
		res.add("lost", 1)
		t.Logf("task %s is %s, not completed", id, s)
	}

	// Decisions the old leader got into the log after it resumed, until it
	// stood by (or led again, which would be legitimate).
	after := s1.logSince()[resumeAt:]
	if i := strings.Index(after, "scheduler: leading"); i >= 0 {
		after = after[:i]
	}
	stale := map[uint64]string{}
	for _, line := range strings.Split(after, "\n") {
		var l struct {
			Message string `json:"message"`
			Seq     uint64 `json:"seq"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == "scheduler: decided" && l.Seq > boundary {
			stale[l.Seq] = "the resumed old leader appended: " + line
		}
	}
	recs := c.readLog()
	for seq, s := range checkStale(recs) {
		stale[seq] = s
	}
	res.add("stale", len(stale))
	for _, s := range stale {
		t.Log(s)
	}
	for _, x := range recs {
		if l, ok := x.r.Event.(events.Lost); ok && x.err == nil {
			res.add("nodes_lost", 1) // both agents beat all along
			t.Logf("seq %d: node %s declared lost: %s", x.Seq, l.Node, l.Reason)
		}
	}
	d := checkDoubles(recs)
	phys, detail := c.physicalOverlaps()
	res.add("doubled", d.GPU+d.Task+phys)
	for _, s := range append(d.Detail, detail...) {
		t.Log(s)
	}
	res.note("tasks=%d takeover=%.1fs pause=%.1fs boundary_seq=%d events=%d", len(tasks), took.Seconds(), pause.Seconds(), boundary, len(recs))
}
