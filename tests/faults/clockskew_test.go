//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/events"
)

// skew is a writer's clock error: one writer an hour fast, one an hour slow.
var skews = map[string]time.Duration{"skew-fast": time.Hour, "skew-slow": -time.Hour}

// TestClockSkew: writers whose clocks are an hour fast and an hour slow —
// a submitter of each kind (the test writes their submitted events, with
// envelope time and submitted_at from their clock, as such a submitter
// would) and an agent of each kind (fake nodes whose available, started
// and completed events carry their clock, and whose heartbeats stop at a
// known moment). The queue order and the dispatch order stay the order of
// submission (the log's), the ages people see (submitted_at, started_at,
// ended_at) stay within seconds of the stream's own timestamps, and a
// node is declared lost one node timeout after its last heartbeat — the
// slow one not an hour early, the fast one not at all while it beats.
func TestClockSkew(t *testing.T) {
	const nodeTimeout = 4 * time.Second
	res := newCounters("clock-skew", "lost", "misordered", "age_skewed", "lost_wrong")
	defer res.report(t)

	c := newCluster(t)
	sub, base := c.submitter("submitter")
	sched := c.scheduler("scheduler", "--lease-ttl", "1s", "--node-timeout", nodeTimeout.String())
	agent := c.agent("n1", 1)
	c.startAll(sub, sched, agent)
	c.connect()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The skewed agents: one GPU each, of a model of their own, so only
	// tasks asking for it go there.
	j, err := js.New(c.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := j.KeyValue(ctx, events.HeartbeatBucket)
	if err != nil {
		t.Fatal(err)
	}
	var (
		beatMu   sync.Mutex
		lastBeat = map[string]time.Time{}
		silent   = map[string]bool{}
	)
	for node, skew := range skews {
		av := events.Available{Node: node, BootID: newID(), FreeGPUs: 1, GPUs: []events.GPU{
			{UUID: "GPU-" + node, Index: 0, Model: "FAKE " + node, MemoryMiB: 81920, Healthy: true}}}
		if _, err := c.publishRaw(events.Subject(av), envelope(events.TypeAvailable, 1, time.Now().Add(skew), av)); err != nil {
			t.Fatal(err)
		}
		go func(node string, skew time.Duration) {
			for ctx.Err() == nil {
				beatMu.Lock()
				quiet := silent[node]
				beatMu.Unlock()
				if !quiet {
					v, _ := json.Marshal(map[string]any{"node": node, "time": time.Now().Add(skew).UTC(), "running": 0})
					if _, err := kv.Put(ctx, node, v); err == nil {
						beatMu.Lock()
						lastBeat[node] = time.Now()
						beatMu.Unlock()
					}
				}
				time.Sleep(300 * time.Millisecond)
			}
		}(node, skew)
	}
	// The skewed agents run what is dispatched to them: started, 2 s,
	// completed, each stamped by their clock.
	f, err := c.log.Follow(ctx, 1, events.TaskPrefix+"*."+string(events.TypeDispatched))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			m, err := f.Next(ctx)
			if err != nil {
				return
			}
			r, err := events.Decode(m)
			d, ok := r.Event.(events.Dispatched)
			if err != nil || !ok || len(d.Placements) == 0 {
				continue
			}
			skew, fake := skews[d.Placements[0].Node]
			if !fake {
				continue
			}
			node := d.Placements[0].Node
			go func() {
				st := events.Started{TaskID: d.TaskID, Node: node, PID: 1}
				_, _ = c.publishRaw(events.Subject(st), envelope(events.TypeStarted, 1, time.Now().Add(skew), st))
				time.Sleep(2 * time.Second)
				done := events.Completed{TaskID: d.TaskID, Node: node}
				_, _ = c.publishRaw(events.Subject(done), envelope(events.TypeCompleted, 1, time.Now().Add(skew), done))
			}()
		}
	}()
	defer f.Close()

	// A blocker holds the real GPU while six tasks queue behind it, written
	// in turn by the real, the fast and the slow submitter.
	blockReq := request("blocker", c.markCmd(5), 1)
	blockReq.GPUModel = "a100"
	blocker, err := c.submit(blockReq, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := c.waitState(blocker.TaskID, "running", 30*time.Second); !ok {
		t.Fatalf("blocker is %s", s)
	}
	var order []string // submission order = log order
	writers := []string{"real", "skew-fast", "skew-slow"}
	for i := 0; i < 6; i++ {
		w := writers[i%3]
		name := fmt.Sprintf("order-%d-%s", i, w)
		if w == "real" {
			req := request(name, "true", 1)
			req.GPUModel = "a100"
			rep, err := c.submit(req, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			order = append(order, rep.TaskID)
		} else {
			at := time.Now().Add(skews[w])
			s := events.Submitted{TaskID: newID(), Name: name, Team: "alpha", Priority: "medium", GPUs: 1, Hours: 0.01,
				Hypothesis: "faults: clock skew", Command: "true", Preemptible: true, GPUModel: "a100", SubmittedAt: at.UTC()}
			if _, err := c.publishRaw(events.Subject(s), envelope(events.TypeSubmitted, 1, at, s)); err != nil {
				t.Fatal(err)
			}
			order = append(order, s.TaskID)
		}
		time.Sleep(150 * time.Millisecond)
	}
	// One task for each skewed agent.
	var onSkewed []string
	for node := range skews {
		req := request("on-"+node, "true", 1)
		req.GPUModel = node
		rep, err := c.submit(req, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		onSkewed = append(onSkewed, rep.TaskID)
	}

	// The queue as people see it, while the blocker runs.
	time.Sleep(time.Second)
	if q, err := queueHTTP(base, false); err != nil {
		t.Fatalf("queue: %v", err)
	} else {
		pos := map[string]int{}
		for i, v := range q {
			pos[v.TaskID] = i
		}
		var listed []string
		for _, id := range order {
			if _, ok := pos[id]; ok {
				listed = append(listed, id)
			}
		}
		sortByPos(listed, pos)
		if n := inversions(order, listed); n > 0 {
			res.add("misordered", n)
			t.Logf("queue order %v, submission order %v", names(c, listed), names(c, order))
		}
	}

	all := append(append([]string{blocker.TaskID}, order...), onSkewed...)
	for id, s := range c.waitAll(all, "completed", 60*time.Second) {
		res.add("lost", 1)
		t.Logf("task %s is %s, not completed", id, s)
	}

	// The slow agent goes quiet; the fast one keeps beating.
	beatMu.Lock()
	silent["skew-slow"] = true
	beatMu.Unlock()
	time.Sleep(400 * time.Millisecond)
	beatMu.Lock()
	quietFrom := lastBeat["skew-slow"]
	beatMu.Unlock()
	var lostAt time.Time
	waitFor(nodeTimeout+15*time.Second, func() bool {
		for _, x := range c.readLog() {
			if l, ok := x.r.Event.(events.Lost); ok && l.Node == "skew-slow" {
				lostAt = x.Time
				return true
			}
		}
		return false
	})
	time.Sleep(time.Second)

	recs := c.readLog()
	stored := map[string]time.Time{} // task/type -> the stream's timestamp
	var dispatched []string
	for _, x := range recs {
		if x.err != nil {
			continue
		}
		switch e := x.r.Event.(type) {
		case events.Submitted, events.Started, events.Completed:
			stored[e.Key()+"/"+string(e.EventType())] = x.Time
		case events.Dispatched:
			dispatched = append(dispatched, e.TaskID)
		case events.Lost:
			if e.Node != "skew-slow" {
				res.add("lost_wrong", 1)
				t.Logf("seq %d: node %s declared lost while it beats: %s", x.Seq, e.Node, e.Reason)
			}
		}
	}
	switch {
	case lostAt.IsZero():
		res.add("lost_wrong", 1)
		t.Logf("skew-slow was never declared lost (quiet since %s)", quietFrom.Format(time.RFC3339Nano))
	case lostAt.Sub(quietFrom) < nodeTimeout-time.Second || lostAt.Sub(quietFrom) > nodeTimeout+6*time.Second:
		res.add("lost_wrong", 1)
		t.Logf("skew-slow declared lost %s after its last heartbeat (node timeout %s)", lostAt.Sub(quietFrom), nodeTimeout)
	}
	pos := map[string]int{}
	for i, id := range dispatched {
		if _, ok := pos[id]; !ok {
			pos[id] = i
		}
	}
	var ran []string
	for _, id := range order {
		if _, ok := pos[id]; ok {
			ran = append(ran, id)
		}
	}
	sortByPos(ran, pos)
	if n := inversions(order, ran); n > 0 {
		res.add("misordered", n)
		t.Logf("dispatch order %v, submission order %v", names(c, ran), names(c, order))
	}

	// Ages: what the views say against when the stream stored the facts.
	for _, id := range all {
		v, err := c.show(id)
		if err != nil {
			continue
		}
		check := func(what string, shown *time.Time, key string) {
			want, ok := stored[id+"/"+key]
			if shown == nil || !ok {
				return
			}
			if d := shown.Sub(want); d > 10*time.Second || d < -10*time.Second {
				res.add("age_skewed", 1)
				t.Logf("%s: %s %s, the stream stored it at %s (%s off)", v.Name, what, shown.Format(time.RFC3339), want.Format(time.RFC3339), d.Round(time.Second))
			}
		}
		sa := v.SubmittedAt
		check("submitted_at", &sa, string(events.TypeSubmitted))
		check("started_at", v.StartedAt, string(events.TypeStarted))
		check("ended_at", v.EndedAt, string(events.TypeCompleted))
	}
	res.note("tasks=%d lost_after=%s", len(all), lostAt.Sub(quietFrom).Round(100*time.Millisecond))
}

func sortByPos(ids []string, pos map[string]int) {
	for i := 1; i < len(ids); i++ {
		for k := i; k > 0 && pos[ids[k]] < pos[ids[k-1]]; k-- {
			ids[k], ids[k-1] = ids[k-1], ids[k]
		}
	}
}

// inversions counts the pairs of got in the opposite order to want.
func inversions(want, got []string) int {
	rank := map[string]int{}
	for i, id := range want {
		rank[id] = i
	}
	n := 0
	for i := range got {
		for k := i + 1; k < len(got); k++ {
			if rank[got[i]] > rank[got[k]] {
				n++
			}
		}
	}
	return n
}

func names(c *cluster, ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if v, err := c.show(id); err == nil {
			out = append(out, v.Name)
		} else {
			out = append(out, id)
		}
	}
	return out
}
