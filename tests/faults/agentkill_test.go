//go:build faults

package faults

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

// TestAgentKill: an agent is killed (-9) while its tasks run and started
// again on the same data directory a few seconds later —
// GPUQ_FAULTS_AGENT_KILLS rounds (3). Its tasks keep running under their
// supervisors and are adopted: every task completes, none is reported
// failed, no command runs twice, no GPU is held by two processes at once
// (on the log and by the processes' own marks), and no node is declared
// lost (each comes back within the node timeout).
func TestAgentKill(t *testing.T) {
	res := newCounters("agent-kill", "lost", "failed", "twice", "doubled", "nodes_lost")
	defer res.report(t)

	c := newCluster(t)
	sub, _ := c.submitter("submitter")
	sched := c.scheduler("scheduler", "--node-timeout", "15s")
	a1, a2 := c.agent("n1", 4), c.agent("n2", 4)
	c.startAll(sub, sched, a1, a2)
	c.connect()

	var tasks []string
	submit := func(n int) {
		for i := 0; i < n; i++ {
			rep, err := c.submit(request(fmt.Sprintf("load-%d", len(tasks)), c.markCmd(2+2*rand.Float64()), 1+rand.IntN(2)), 30*time.Second)
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			tasks = append(tasks, rep.TaskID)
		}
	}
	rounds := envInt("GPUQ_FAULTS_AGENT_KILLS", 3)
	var down time.Duration
	for r := 0; r < rounds; r++ {
		submit(8)
		time.Sleep(1500 * time.Millisecond) // n1 runs some of them
		a1.stop(syscall.SIGKILL, 5*time.Second)
		at := time.Now()
		time.Sleep(2 * time.Second) // some end while no agent watches
		a1.start(t)
		c.waitReady(a1)
		down = time.Since(at)
	}
	for id, s := range c.waitAll(tasks, "completed", 2*time.Minute) {
		res.add("lost", 1)
		t.Logf("task %s is %s, not completed", id, s)
	}

	recs := c.readLog()
	starts := map[string]int{}
	for _, x := range recs {
		switch e := x.r.Event.(type) {
		case events.Failed:
			res.add("failed", 1)
			t.Logf("seq %d: task %s failed: %s", x.Seq, e.TaskID, e.Error)
		case events.Lost:
			res.add("nodes_lost", 1)
			t.Logf("seq %d: node %s declared lost: %s", x.Seq, e.Node, e.Reason)
		case events.Started:
			starts[e.TaskID]++
		case events.Preempted:
			if e.NotStarted {
				// The agent was killed between started and the process's
				// start: that start never ran, and the task went back to
				// the queue (it completes on a later start).
				starts[e.TaskID]--
				t.Logf("seq %d: task %s given back, never started on %s", x.Seq, e.TaskID, e.Node)
			}
		}
	}
	// Each run of a command leaves one start mark; a task runs once per
	// start the log records that was not given back as never started (no
	// other requeue happens here).
	for _, id := range tasks {
		b, _ := os.ReadFile(filepath.Join(c.marks, id))
		if n := strings.Count(string(b), "s "+id+" "); n != starts[id] {
			res.add("twice", 1)
			t.Logf("task %s: its command ran %d times, the log has %d starts", id, n, starts[id])
		}
	}
	d := checkDoubles(recs)
	phys, detail := c.physicalOverlaps()
	res.add("doubled", d.GPU+d.Task+phys)
	for _, s := range append(d.Detail, detail...) {
		t.Log(s)
	}
	res.note("tasks=%d rounds=%d down=%.1fs events=%d", len(tasks), rounds, down.Seconds(), len(recs))
}
