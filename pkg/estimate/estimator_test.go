package estimate_test

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

type logb struct {
	quiet bool
	st    *domain.State
	est   *estimate.Estimator
	seq   uint64
}

func newLog() *logb {
	return &logb{st: domain.NewState(), est: estimate.NewEstimator(policy.New(policy.Options{}))}
}

func (l *logb) add(at time.Time, e events.Event) {
	l.seq++
	r := events.Record{Seq: l.seq, Envelope: events.Envelope{Type: e.EventType(), Time: at}, Event: e}
	l.st.Apply(r)
	if !l.quiet {
		l.est.Observe(l.st, r)
	}
}

func (l *logb) node(name string, gpus int) {
	var gs []events.GPU
	for i := 0; i < gpus; i++ {
		gs = append(gs, events.GPU{UUID: name + "-g" + string(rune('0'+i)), Index: i, Model: "A100", MemoryMiB: 40960, Healthy: true})
	}
	l.add(t0, events.Available{Node: name, GPUs: gs})
}

func (l *logb) submit(at time.Time, id, prio string, gpus int, hours float64) {
	l.add(at, events.Submitted{TaskID: id, Name: id, Team: "a", Priority: prio, GPUs: gpus, Hours: hours, Hypothesis: "h", Command: "true", Preemptible: true, SubmittedAt: at})
}

func (l *logb) run(at time.Time, id string) {
	res := policy.New(policy.Options{}).Plan(policy.Input{State: l.st, Now: at})
	for _, d := range res.Decisions {
		if d.TaskID == id && d.Kind == policy.Dispatch {
			l.add(at, events.Dispatched{TaskID: id, Placements: d.Placements})
			l.add(at, events.Started{TaskID: id, Node: d.Placements[0].Node})
			return
		}
	}
	panic("not dispatched: " + id)
}

// A task behind one running task of known length waits that length.
func TestBehindOneRunningTask(t *testing.T) {
	l := newLog()
	l.node("n1", 8)
	l.submit(t0, "running", "medium", 8, 1)
	l.run(t0, "running")
	l.submit(t0, "waiting", "medium", 8, 2)
	e := l.est.Estimate(l.st, "waiting", t0)
	if e.Raw != time.Hour || e.P50Wait != time.Hour || !e.P50Start.Equal(t0.Add(time.Hour)) {
		t.Errorf("estimate %+v, want a P50 of exactly 1h", e)
	}
	if e.P90Wait <= e.P50Wait {
		t.Errorf("P90 %s not above P50 %s", e.P90Wait, e.P50Wait)
	}
	// Half-way through: at least the other half is left, and less than
	// the whole (conditioned on having run 30 minutes, the median end moves
	// later than the unconditional one — estimates are spread).
	e = l.est.Estimate(l.st, "waiting", t0.Add(30*time.Minute))
	if e.Raw < 30*time.Minute || e.Raw >= time.Hour {
		t.Errorf("half-way raw estimate %s, want within [30m, 1h)", e.Raw)
	}
}

func TestEstimateLeavesStateUntouched(t *testing.T) {
	l := newLog()
	l.node("n1", 8)
	l.submit(t0, "a", "low", 8, 1)
	l.run(t0, "a")
	l.submit(t0, "b", "medium", 4, 1)
	l.submit(t0, "c", "high", 8, 1)
	before := l.st.Clone()
	_ = l.est.Estimate(l.st, "b", t0.Add(time.Minute))
	if diff := cmp.Diff(before, l.st, cmpopts.IgnoreUnexported(domain.State{}, domain.Task{}, domain.Node{})); diff != "" {
		t.Errorf("Estimate changed the state (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(ids(before.Queued()), ids(l.st.Queued())); diff != "" {
		t.Errorf("queue changed:\n%s", diff)
	}
}

func ids(ts []*domain.Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

func TestNeverFits(t *testing.T) {
	l := newLog()
	l.node("n1", 8)
	l.submit(t0, "huge", "medium", 16, 1)
	if e := l.est.Estimate(l.st, "huge", t0); !e.Never {
		t.Errorf("a 16-GPU task on 8 GPUs: %+v, want Never", e)
	}
}

// Tasks of team a run half their 2 h estimate: the predictor learns the
// ratio, weighed against the user's estimate by PriorRuns.
func TestPredictorLearnsRatio(t *testing.T) {
	cases := map[string]struct {
		prior float64
		want  time.Duration // P50 of a new 2 h task of team a
	}{
		"no prior: the learned ratio":    {0, time.Hour},
		"a light prior: 50 against 50":   {50, time.Duration(2 * math.Exp(-math.Ln2*50/100) * float64(time.Hour))},
		"the default":                    {estimate.DefaultPriorRuns, time.Duration(2 * math.Exp(-math.Ln2*50/(50+estimate.DefaultPriorRuns)) * float64(time.Hour))},
		"a heavy prior: the user mostly": {950, time.Duration(2 * math.Exp(-math.Ln2*50/1000) * float64(time.Hour))},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l := newLog()
			l.est.Pred.PriorRuns = tc.prior
			l.node("n1", 8)
			at := t0
			for i := 0; i < 50; i++ {
				id := "t" + string(rune('A'+i%26)) + string(rune('a'+i/26))
				l.submit(at, id, "medium", 8, 2)
				l.run(at, id)
				at = at.Add(time.Hour)
				l.add(at, events.Completed{TaskID: id, Node: l.st.Tasks[id].Node})
			}
			task := &domain.Task{Name: "tnew", Team: "a", Hours: 2}
			if got := l.est.Pred.Total(task, 0.5); got < tc.want-time.Minute || got > tc.want+time.Minute {
				t.Errorf("learned P50 run time %s, want about %s", got, tc.want.Round(time.Second))
			}
		})
	}
}

// A task that starts by preempting waits for its victims' grace: the
// forward simulation holds their GPUs that long, as the agents do.
func TestPreemptorWaitsTheGrace(t *testing.T) {
	cases := map[string]struct {
		grace float64
		want  time.Duration
	}{
		"no grace: at once": {grace: 0, want: 0},
		"120 s grace":       {grace: 120, want: 2 * time.Minute},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l := newLog()
			l.node("n1", 8)
			l.add(t0, events.Submitted{TaskID: "victim", Name: "victim", Team: "a", Priority: "low", GPUs: 8, Hours: 10, Hypothesis: "h",
				Command: "true", Preemptible: true, GraceS: tc.grace, SubmittedAt: t0})
			l.run(t0, "victim")
			l.submit(t0, "crit", "critical", 8, 1)
			e := l.est.Estimate(l.st, "crit", t0)
			if e.Never || e.Raw != tc.want {
				t.Errorf("raw estimate %s (never %v), want %s", e.Raw, e.Never, tc.want)
			}
		})
	}
}
