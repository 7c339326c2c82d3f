//go:build faults

package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestNotifierKill: the notifier is killed (-9) while it delivers to a
// slow webhook receiver — GPUQ_FAULTS_NOTIFIER_KILLS rounds (3) — and
// started again a moment later. Nothing is lost: every task's started
// and completed arrive; a notification sent again after a kill carries
// the same X-Gpuq-Event-Id (counted as resent, which receivers
// de-duplicate), and no (task, type) arrives under two ids.
func TestNotifierKill(t *testing.T) {
	res := newCounters("notifier-kill", "lost", "two_ids")
	defer res.report(t)

	var (
		mu    sync.Mutex
		byID  = map[string]int{}             // POSTs per id
		idsOf = map[string]map[string]bool{} // task|type -> ids
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var n struct {
			Type   string `json:"type"`
			TaskID string `json:"task_id"`
		}
		_ = json.Unmarshal(body, &n)
		time.Sleep(150 * time.Millisecond) // slow: kills land between sends and records
		id := r.Header.Get("X-Gpuq-Event-Id")
		k := n.TaskID + "|" + n.Type
		mu.Lock()
		byID[id]++
		if idsOf[k] == nil {
			idsOf[k] = map[string]bool{}
		}
		idsOf[k][id] = true
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer recv.Close()

	c := newCluster(t)
	sub, _ := c.submitter("submitter")
	sched := c.scheduler("scheduler")
	a1 := c.agent("n1", 8)
	adv := c.advisor()
	notif := c.add("notifier", "gpuq-notifier", nil, append(c.common(), "--webhook", recv.URL+"/hook")...)
	c.startAll(sub, sched, a1, adv, notif)
	c.connect()

	var tasks []string
	rounds := envInt("GPUQ_FAULTS_NOTIFIER_KILLS", 3)
	for r := 0; r < rounds; r++ {
		for i := 0; i < 6; i++ {
			rep, err := c.submit(request(fmt.Sprintf("notify-%d", len(tasks)), "true", 1), 30*time.Second)
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			tasks = append(tasks, rep.TaskID)
		}
		time.Sleep(700 * time.Millisecond) // deliveries under way
		notif.stop(syscall.SIGKILL, 5*time.Second)
		time.Sleep(500 * time.Millisecond)
		notif.start(t)
		c.waitReady(notif)
	}
	for id, s := range c.waitAll(tasks, "completed", 2*time.Minute) {
		t.Fatalf("task %s is %s, not completed", id, s)
	}
	// Every started and completed, within a minute of the last task's end.
	missing := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, id := range tasks {
			for _, typ := range []string{"started", "completed"} {
				if len(idsOf[id+"|"+typ]) == 0 {
					out = append(out, id+" "+typ)
				}
			}
		}
		return out
	}
	deadline := time.Now().Add(time.Minute)
	for len(missing()) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	for _, m := range missing() {
		res.add("lost", 1)
		t.Logf("never delivered: %s", m)
	}
	mu.Lock()
	defer mu.Unlock()
	resent, posts := 0, 0
	for _, n := range byID {
		posts += n
		resent += n - 1
	}
	for k, ids := range idsOf {
		if len(ids) > 1 {
			res.add("two_ids", 1)
			t.Logf("%s arrived under %d ids", k, len(ids))
		}
	}
	res.note("tasks=%d kills=%d posts=%d resent_same_id=%d", len(tasks), rounds, posts, resent)
}
