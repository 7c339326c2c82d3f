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
// takes over and dispatches, then SIGCONTed — GPUQ_FAULTS_PAUSES rounds
// (3), pausing whichever instance leads. No GPU or task is dispatched
// twice at once — on the event sequence and by the task processes' own
// start/end marks — and no resumed old leader gets a decision into the
// log: whatever it decides from its stale state (dispatches, preemptions,
// requeues, nodes it thinks silent) must be refused. Both agents beat all
// along, so a node declared lost is a stale decision too, and every task
// must complete.
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
			case <-time.After(400 * time.Millisecond):
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

	// Each round pauses whichever instance leads, waits for the other to
	// take over and decide for a while, and resumes the paused one: a
	// resumed leader races its lease renewal against its next pass, so
	// several rounds give a stale pass several chances.
	rounds := envInt("GPUQ_FAULTS_PAUSES", 3)
	stale := map[uint64]string{}
	leader, standby := s1, s2
	var took, pause time.Duration
	var boundary uint64
	time.Sleep(4 * time.Second)
	for r := 0; r < rounds; r++ {
		from := len(standby.logSince())
		leader.signal(syscall.SIGSTOP)
		paused := time.Now()
		time.Sleep(200 * time.Millisecond) // what it had in flight lands
		var err error
		if boundary, err = c.log.LastSeq(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !waitFor(30*time.Second, func() bool { return strings.Contains(standby.logSince()[from:], "ready: leading") }) {
			t.Fatalf("round %d: %s did not take over while %s was stopped", r, standby.name, leader.name)
		}
		took = time.Since(paused)
		time.Sleep(5 * time.Second) // the new leader decides; the old one's view of heartbeats ages
		resumeAt := len(leader.logSince())
		leader.signal(syscall.SIGCONT)
		pause = time.Since(paused)
		time.Sleep(6 * time.Second)

		// Decisions the old leader logged after it resumed, until it led
		// again (legitimate); the log itself is read below.
		after := leader.logSince()[resumeAt:]
		if i := strings.Index(after, "scheduler: leading"); i >= 0 {
			after = after[:i]
		}
		for _, line := range strings.Split(after, "\n") {
			var l struct {
				Message string `json:"message"`
				Seq     uint64 `json:"seq"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Message == "scheduler: decided" && l.Seq > boundary {
				stale[l.Seq] = fmt.Sprintf("round %d: the resumed old leader %s appended: %s", r, leader.name, line)
			}
		}
		leader, standby = standby, leader
	}
	close(stop)
	wg.Wait()

	for id, s := range c.waitAll(tasks, "completed", 60*time.Second) {
		res.add("lost", 1)
		t.Logf("task %s is %s, not completed", id, s)
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
	res.note("tasks=%d rounds=%d takeover=%.1fs pause=%.1fs events=%d", len(tasks), rounds, took.Seconds(), pause.Seconds(), len(recs))
}
