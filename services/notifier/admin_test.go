package notifier

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
)

func TestAdminDestinations(t *testing.T) {
	const a, b = "https://ops.example/alarm", "https://pager.example/hook"
	cases := map[string]struct {
		urls, webhooks []string
		want           int
		err            string
	}{
		"none":                  {want: 0},
		"two":                   {urls: []string{a, b}, webhooks: []string{"https://all.example/"}, want: 2},
		"not a URL":             {urls: []string{"ops.example/alarm"}, err: "absolute http"},
		"with a password":       {urls: []string{"https://u:p@ops.example/"}, err: "password"},
		"twice":                 {urls: []string{a, a}, err: "given twice"},
		"also an every-webhook": {urls: []string{a}, webhooks: []string{a}, err: "also a --webhook"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ds, err := AdminDestinations(tc.urls, tc.webhooks, []byte(secret))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want an error with %q", ds, err, tc.err)
				}
				return
			}
			if err != nil || len(ds) != tc.want {
				t.Fatalf("got %d destinations, %v; want %d", len(ds), err, tc.want)
			}
			for _, d := range ds {
				if d.ID == NewDestination("", d.URL, nil, nil).ID || !strings.HasPrefix(d.ID, adminDestPrefix) {
					t.Errorf("id %q: want its own, not a --webhook destination's", d.ID)
				}
				for _, typ := range Types {
					if got := d.Wants(Notice{Type: typ, Team: "vision"}); got != (typ == Alert) {
						t.Errorf("%s wants %s: %v; want only alerts", d.URL, typ, got)
					}
				}
			}
		})
	}
}

// TestAdminAlert: the operators' alarm channel (--admin-webhook) gets the
// alert of a wait past 2× its estimate with scheduling broken — signed,
// retried after a failed attempt with the same id, naming the cause —
// once per task and attempt, though the advice comes again and the
// notifier restarts; never a wait late for a legitimate reason, never
// another type of notice. The task's own destination gets the alert too.
func TestAdminAlert(t *testing.T) {
	cases := map[string]struct {
		late      *alarm.Verdict
		alerts    int // distinct alerts at the admin's destination
		cause     alarm.Cause
		tell      string
		retriedOK bool
	}{
		"broken: the scheduler stalled": {late: &alarm.Verdict{Alarm: true, Cause: alarm.SchedulerStalled, Tell: alarm.Operators},
			alerts: 1, cause: alarm.SchedulerStalled, tell: alarm.Operators, retriedOK: true},
		"broken: nodes lost":          {late: &alarm.Verdict{Alarm: true, Cause: alarm.NodesLost, Tell: alarm.Operators}, alerts: 1, cause: alarm.NodesLost, tell: alarm.Operators, retriedOK: true},
		"no verdict: the rule alone":  {late: nil, alerts: 1, retriedOK: true},
		"legitimate: holders overran": {late: &alarm.Verdict{Reason: alarm.HoldersOverran}, alerts: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			store, js := stores(t)["kv"]()
			admin := newReceiver(t, func(n int) int {
				if n == 1 {
					return 503 // the first attempt fails: retried like any delivery
				}
				return 200
			})
			mine := newReceiver(t, nil)
			w := newWorld(t, store, AdminDestination(admin.srv.URL+"/alarm", []byte(secret)))
			w.js = js
			w.cfg.Allow = Allow{Local: true}
			w.start()
			w.append(dt.Task().ID(taskA).Name("train").Team("vision").GPUs(1).Notify(mine.srv.URL).Submitted())
			publish := func() {
				t.Helper()
				now := time.Now()
				b, _ := json.Marshal(estimate.Advice{TaskID: taskA, State: string(domain.Queued), P50Start: now.Add(time.Hour), P90Start: now.Add(2 * time.Hour),
					BasedOnSeq: 2, At: now, Reason: "waiting for 1 GPU", Alert: "waited 2 h, more than 2× the 30 min estimated at submission", Late: tc.late})
				if _, err := js.Publish(w.ctx, events.AdviceSubject(taskA), b); err != nil {
					t.Fatal(err)
				}
			}
			publish()
			publish() // the same advice again: no second alert
			if tc.alerts > 0 {
				mine.waitFor(t, "the alert at the task's own destination", func(hs []hit) bool { return count(hs, Alert) == 1 })
				admin.waitFor(t, "the alert at the admin's, after one failed attempt", func(hs []hit) bool { return len(hs) >= 2 })
			}
			// A restart: the advice is read again from the stream, the
			// alert decided again, and found recorded.
			w.stop()
			w.start()
			publish()
			w.append(dt.Dispatch(taskA, dt.On("n1", 0)))
			w.append(events.Started{TaskID: taskA, Node: "n1", PID: 1})
			mine.waitFor(t, "started at the task's own destination", func(hs []hit) bool { return count(hs, Started) == 1 })
			time.Sleep(300 * time.Millisecond)

			hs := admin.all()
			ids := map[string]bool{}
			for _, h := range hs {
				ids[h.id] = true
				if h.n.Type != Alert {
					t.Errorf("the admin's destination got %s; want alerts only", h.n.Type)
				}
				if !h.sigOK {
					t.Errorf("alert %s not signed with the operator's secret (%q)", h.id, h.sig)
				}
				if h.n.TaskID != taskA || h.n.Team != "vision" || h.n.Cause != string(tc.cause) || h.n.Tell != tc.tell || !strings.Contains(h.n.Text, "more than twice its estimate") {
					t.Errorf("alert %+v; want task A of vision, cause %q, tell %q", h.n, tc.cause, tc.tell)
				}
			}
			if len(ids) != tc.alerts {
				t.Errorf("the admin's destination got %d distinct alerts (%s), want %d", len(ids), types(hs), tc.alerts)
			}
			if tc.retriedOK && len(hs) != 2 {
				t.Errorf("the admin's destination got %s; want the alert refused once, then delivered once", types(hs))
			}
			if got := count(mine.all(), Alert); got != tc.alerts {
				t.Errorf("the task's own destination got %d alerts, want %d", got, tc.alerts)
			}
			if dead, _ := store.DeadLetters(w.ctx); len(dead) != 0 {
				t.Errorf("dead letters %+v", dead)
			}
		})
	}
}
