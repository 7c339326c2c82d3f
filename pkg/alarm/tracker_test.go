package alarm_test

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

var t0 = dt.Epoch

// world folds records into a state and a tracker, and observes the queue
// at chosen times as the advisor does.
type world struct {
	st  *domain.State
	log *dt.Log
	n   int
	k   *alarm.Tracker
	pol *policy.Policy
}

func newWorld() *world {
	return &world{st: domain.NewState(), log: dt.NewLog().Step(0), k: alarm.NewTracker(), pol: policy.New(policy.Options{})}
}

func (w *world) at(at time.Time, es ...events.Event) *world {
	w.log.At(at).Append(es...)
	for _, r := range w.log.Records()[w.n:] {
		w.st.Apply(r)
		w.k.Saw(r)
	}
	w.n = len(w.log.Records())
	return w
}

func (w *world) observe(at time.Time) *world {
	w.k.Observe(w.st, w.pol.With(true).Plan(policy.Input{State: w.st, Now: at}), at)
	return w
}

// verdict is q's at, with a P50 of est at submission (threshold 2×).
func (w *world) verdict(t *testing.T, at time.Time, est time.Duration) alarm.Verdict {
	t.Helper()
	w.observe(at)
	b, ok := w.k.Breakdown("q", at.Sub(t0), est, max(2*est, 30*time.Second))
	if !ok {
		t.Fatal("q not tracked")
	}
	return alarm.Classify(b)
}

func TestTracker(t *testing.T) {
	holder := func(w *world) *world {
		r := dt.Task().ID("r").GPUs(8).Hours(1).Preemptible(false).SubmittedAt(t0).Submitted()
		return w.at(t0, dt.Node("n1").GPUs(8).Available(), r, dt.Dispatch("r", dt.On("n1", 0, 1, 2, 3, 4, 5, 6, 7)), events.Started{TaskID: "r", Node: "n1"})
	}
	q := dt.Task().ID("q").GPUs(4).Hours(1).SubmittedAt(t0).Submitted()
	type want struct {
		alarm  bool
		cause  alarm.Cause
		reason string
	}
	cases := map[string]struct {
		run  func(t *testing.T) alarm.Verdict
		want want
	}{
		"healthy: the holder overran": {func(t *testing.T) alarm.Verdict {
			w := holder(newWorld()).at(t0, q).observe(t0).observe(t0.Add(time.Hour))
			return w.verdict(t, t0.Add(2*time.Hour+time.Minute), time.Hour)
		}, want{reason: alarm.HoldersOverran}},
		"no scheduler deciding: free GPUs, no decision": {func(t *testing.T) alarm.Verdict {
			w := newWorld().at(t0, dt.Node("n1").GPUs(8).Available(), q).observe(t0).observe(t0.Add(3 * time.Minute))
			return w.verdict(t, t0.Add(10*time.Minute), 0)
		}, want{alarm: true, cause: alarm.SchedulerStalled}},
		"idle capacity: the scheduler decides, not for q": {func(t *testing.T) alarm.Verdict {
			w := newWorld().at(t0, dt.Node("n1").GPUs(8).Available(), dt.Node("n2").GPUs(8).Available(), q).observe(t0)
			o := dt.Task().ID("o").GPUs(8).SubmittedAt(t0.Add(time.Minute)).Submitted()
			w.at(t0.Add(time.Minute), o, dt.Dispatch("o", dt.On("n2", 0, 1, 2, 3, 4, 5, 6, 7))).observe(t0.Add(time.Minute))
			return w.verdict(t, t0.Add(10*time.Minute), 0)
		}, want{alarm: true, cause: alarm.IdleCapacity}},
		"nodes lost: the cluster lost half its GPUs while q waited": {func(t *testing.T) alarm.Verdict {
			w := holder(newWorld()).at(t0, dt.Node("n2").GPUs(8).Available())
			x := dt.Task().ID("x").GPUs(8).Hours(3).Preemptible(false).SubmittedAt(t0).Submitted()
			w.at(t0, x, dt.Dispatch("x", dt.On("n2", 0, 1, 2, 3, 4, 5, 6, 7)), events.Started{TaskID: "x", Node: "n2"}, q).observe(t0)
			w.at(t0.Add(10*time.Minute), events.Lost{Node: "n2", Reason: "no heartbeat"}).observe(t0.Add(10 * time.Minute))
			return w.verdict(t, t0.Add(2*time.Hour+time.Minute), time.Hour)
		}, want{alarm: true, cause: alarm.NodesLost}},
		"unhealthy GPUs": {func(t *testing.T) alarm.Verdict {
			w := holder(newWorld()).at(t0, q).observe(t0)
			w.at(t0.Add(time.Minute), events.Unhealthy{Node: "n1", GPUs: []string{dt.GPU("n1", 7)}, Reason: "xid 79"}).observe(t0.Add(time.Minute))
			return w.verdict(t, t0.Add(2*time.Hour+time.Minute), time.Hour)
		}, want{alarm: true, cause: alarm.GPUsUnhealthy}},
		"a stall long ago, its backlog long gone: legitimate": {func(t *testing.T) alarm.Verdict {
			// q waits behind a holder; the scheduler was stalled for 10
			// minutes (o startable, undecided), then decided again. The
			// stall and its backlog (as long again at most) cover less than
			// the excess of 30 minutes.
			w := holder(newWorld()).at(t0, dt.Node("n2").GPUs(1).Available(), q).observe(t0)
			o := dt.Task().ID("o").GPUs(1).SubmittedAt(t0).Submitted()
			w.at(t0, o).observe(t0.Add(time.Second)).observe(t0.Add(5 * time.Minute)).observe(t0.Add(10 * time.Minute))
			w.at(t0.Add(10*time.Minute), dt.Dispatch("o", dt.On("n2", 0))).observe(t0.Add(11 * time.Minute))
			return w.verdict(t, t0.Add(2*time.Hour+30*time.Minute), time.Hour)
		}, want{reason: alarm.HoldersOverran}},
		"the backlog of a stall it waited through: alarm": {func(t *testing.T) alarm.Verdict {
			// q waits behind a holder through a stall of about 35 minutes
			// (o startable, undecided); after o is dispatched the stall's
			// backlog is charged to q for as long again, and without it the
			// excess (100 minutes against a threshold of 60) would be legit.
			w := stalled(holder(newWorld()), q)
			return w.verdict(t, t0.Add(100*time.Minute), 30*time.Minute)
		}, want{alarm: true, cause: alarm.SchedulerStalled}},
		"submitted after a stall ended, in its backlog: legitimate": {func(t *testing.T) alarm.Verdict {
			// Its estimate at submission saw the backlog, which q, waiting
			// through the stall, keeps; the stall is no reason for p's late
			// start (charging it raised false alarms).
			w := stalled(holder(newWorld()), q)
			p := dt.Task().ID("p").GPUs(4).Hours(1).SubmittedAt(t0.Add(41 * time.Minute)).Submitted()
			w.at(t0.Add(41*time.Minute), p).observe(t0.Add(41 * time.Minute))
			at := t0.Add(86 * time.Minute)
			w.observe(at)
			b, ok := w.k.Breakdown("p", 45*time.Minute, 20*time.Minute, 40*time.Minute)
			if !ok {
				t.Fatal("p not tracked")
			}
			return alarm.Classify(b)
		}, want{reason: alarm.HoldersOverran}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := tc.run(t)
			if got := (want{alarm: v.Alarm, cause: v.Cause, reason: v.Reason}); got != tc.want {
				t.Errorf("verdict %+v, want %+v", v, tc.want)
			}
		})
	}
}

// stalled is a stall of the scheduler from t0 to 40 minutes: o, startable
// on n2 from t0, is dispatched only then (q, when given, waits from t0).
func stalled(w *world, q events.Event) *world {
	w.at(t0, dt.Node("n2").GPUs(1).Available())
	if q != nil {
		w.at(t0, q)
	}
	o := dt.Task().ID("o").GPUs(1).SubmittedAt(t0).Submitted()
	w.at(t0, o).observe(t0.Add(time.Second)).observe(t0.Add(5 * time.Minute)).observe(t0.Add(40 * time.Minute))
	return w.at(t0.Add(40*time.Minute), dt.Dispatch("o", dt.On("n2", 0))).observe(t0.Add(40*time.Minute + time.Second))
}
