//go:build faults

package faults

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

// TestPoison: bad records published on the live subjects by a foreign
// writer — malformed JSON, an unknown type, an unknown version, a valid
// envelope with invalid data, a 1 MB payload and an impossible transition
// (a completion from a node the running task is not on) — then every
// service restarted. Scheduling goes on live and after the restart, the
// impossible completion changes nothing (the task keeps its GPUs until it
// really ends), and `gpuq audit skipped --json` lists each bad record once,
// at its sequence.
func TestPoison(t *testing.T) {
	res := newCounters("poison", "lost", "doubled", "dead", "changed", "unlisted")
	defer res.report(t)

	c := newCluster(t)
	sub, _ := c.submitter("submitter")
	sched := c.scheduler("scheduler", "--lease-ttl", "1s")
	adv := c.advisor()
	agent := c.agent("n1", 8)
	services := []*proc{sub, sched, adv, agent}
	c.startAll(services...)
	c.connect()

	var tasks []string
	victim, err := c.submit(request("victim", c.markCmd(8), 8), 30*time.Second)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	tasks = append(tasks, victim.TaskID)
	if s, ok := c.waitState(victim.TaskID, "running", 30*time.Second); !ok {
		t.Fatalf("victim is %s, not running", s)
	}

	now := time.Now()
	big := strings.Repeat("x", 1_000_000)
	bad := []struct {
		subject, what string
		data          []byte
	}{
		{"gpuq.task.p1.checkpointed", "malformed JSON", []byte("{not json")},
		{"gpuq.task.p2.exploded", "unknown type", envelope("exploded", 1, now, map[string]any{"task_id": "p2"})},
		{"gpuq.task.p3.submitted", "unknown version", envelope(events.TypeSubmitted, 99, now, map[string]any{"task_id": "p3"})},
		{"gpuq.task.p4.submitted", "invalid data", envelope(events.TypeSubmitted, 1, now, map[string]any{
			"task_id": "p4", "name": "x", "team": "alpha", "priority": "medium", "gpus": -5, "hours": 1,
			"hypothesis": "x", "command": "true"})},
		{"gpuq.task.p5.submitted", "1 MB payload", envelope(events.TypeSubmitted, 1, now, map[string]any{
			"task_id": "p5", "name": big, "team": "alpha", "priority": "medium", "gpus": 1, "hours": 1,
			"hypothesis": "x", "command": "true", "submitted_at": now})},
		{"gpuq.task." + victim.TaskID + ".completed", "impossible transition",
			envelope(events.TypeCompleted, 1, now, events.Completed{TaskID: victim.TaskID, Node: "node-that-does-not-exist"})},
	}
	seqs := map[string]uint64{}
	for _, b := range bad {
		seq, err := c.publishRaw(b.subject, b.data)
		if err != nil {
			t.Fatalf("publish %s (%s): %v", b.subject, b.what, err)
		}
		seqs[b.subject] = seq
	}
	// A task that can only run on the victim's GPUs: if the impossible
	// completion freed them, it is dispatched onto them while the victim's
	// process still runs.
	probe, err := c.submit(request("probe", c.markCmd(0.2), 1), 30*time.Second)
	if err != nil {
		t.Fatalf("submit probe: %v", err)
	}
	tasks = append(tasks, probe.TaskID)
	time.Sleep(2 * time.Second)
	for _, p := range services {
		if !p.alive() {
			res.add("dead", 1)
			t.Logf("%s exited after the bad records:\n%s", p.name, tail(p.logSince(), 10))
		}
	}
	if v, err := c.show(victim.TaskID); err != nil || v.State != "running" {
		res.add("changed", 1)
		t.Logf("the victim is %q after a completion from a node it is not on (%v)", v.State, err)
	}
	for id, s := range c.waitAll(tasks, "completed", 60*time.Second) {
		res.add("lost", 1)
		t.Logf("task %s is %s, not completed (live, after the bad records)", id, s)
	}

	// Every service restarted: each folds the log with the bad records in it.
	for _, p := range services {
		p.stop(syscall.SIGTERM, 10*time.Second)
	}
	for _, p := range services {
		p.start(t)
	}
	for _, p := range services {
		if !p.ready(60 * time.Second) {
			res.add("dead", 1)
			t.Logf("%s not ready after the restart:\n%s", p.name, tail(p.logSince(), 10))
		}
	}
	after, err := c.submit(request("after-restart", c.markCmd(0.2), 1), 30*time.Second)
	if err != nil {
		res.add("lost", 1)
		t.Logf("submit after the restart: %v", err)
	} else if s, ok := c.waitState(after.TaskID, "completed", 60*time.Second); !ok {
		res.add("lost", 1)
		t.Logf("task %s is %s after the restart, not completed", after.TaskID, s)
	}

	// Each bad record is listed once, at its sequence, with a reason.
	out, err := c.gpuq("audit", "skipped", "--json")
	var listed []struct {
		Seq     uint64 `json:"seq"`
		Subject string `json:"subject"`
		Reason  string `json:"reason"`
	}
	if err == nil {
		err = json.Unmarshal(out, &listed)
	}
	if err != nil {
		t.Logf("gpuq audit skipped --json: %v", err)
	}
	for _, b := range bad {
		n := 0
		for _, l := range listed {
			if l.Subject == b.subject && l.Seq == seqs[b.subject] && l.Reason != "" {
				n++
			}
		}
		if n != 1 {
			res.add("unlisted", 1)
			t.Logf("%s (%s, seq %d) listed %d times by gpuq audit skipped", b.subject, b.what, seqs[b.subject], n)
		}
	}

	recs := c.readLog()
	d := checkDoubles(recs)
	phys, detail := c.physicalOverlaps()
	res.add("doubled", d.GPU+d.Task+phys)
	for _, s := range append(d.Detail, detail...) {
		t.Log(s)
	}
	res.note("bad_records=%d listed=%d events=%d", len(bad), len(listed), len(recs))
}
