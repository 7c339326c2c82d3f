package audit_test

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/audit"
	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

var t0 = dt.Epoch

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// timed builds a log whose records have explicit times (seconds after t0).
type timed struct{ l *dt.Log }

func newTimed() *timed { return &timed{l: dt.NewLog()} }

func (b *timed) at(s float64, es ...events.Event) *timed {
	b.l.At(at(s)).Step(0)
	b.l.Append(es...)
	return b
}

func (b *timed) recs() []events.Record { return b.l.Records() }

func task(id string) *dt.TaskBuilder { return dt.Task().ID(id).Name(id) }

func started(id, node string) events.Started { return events.Started{TaskID: id, Node: node} }

func completed(id, node string) events.Completed { return events.Completed{TaskID: id, Node: node} }

// One hand-made log per cause, with the answer known: the parts (cause,
// seconds, blockers) and that they add up.
func TestExplain(t *testing.T) {
	cases := map[string]struct {
		log  *timed
		task string
		want []audit.Part
	}{
		"capacity: the holder until it ends, then the scheduler's moment and the start": {
			log: newTimed().
				at(0, dt.Node("n1").GPUs(4).Available(), task("hog").GPUs(4).Submitted(), dt.Dispatch("hog", dt.On("n1", 0, 1, 2, 3)), started("hog", "n1")).
				at(4, task("q").GPUs(4).Submitted()).
				at(104, completed("hog", "n1")).
				at(105, dt.Dispatch("q", dt.On("n1", 0, 1, 2, 3))).
				at(106, started("q", "n1")),
			task: "q",
			want: []audit.Part{{Cause: audit.CauseCapacity, S: 100, Blocking: []string{"hog"}},
				{Cause: audit.CauseNoScheduler, S: 1, Blocking: []string{}}, {Cause: audit.CauseStarting, S: 1, Blocking: []string{}}},
		},
		"ahead: a higher class blocked first": {
			log: newTimed().
				at(0, dt.Node("n1").GPUs(4).Available(), task("hog").GPUs(4).Preemptible(false).Submitted(), dt.Dispatch("hog", dt.On("n1", 0, 1, 2, 3)), started("hog", "n1")).
				at(10, task("h").GPUs(4).Priority(domain.High).Submitted(), task("q").GPUs(2).Priority(domain.Low).Submitted()).
				at(70, events.Cancelled{TaskID: "q"}),
			task: "q",
			want: []audit.Part{{Cause: audit.CauseAhead, S: 60, Blocking: []string{"h"}}},
		},
		"reservation: free GPUs held for the head task": {
			log: newTimed().
				at(0, dt.Node("n1").GPUs(8).Available(), task("r").GPUs(6).Hours(1).Preemptible(false).Submitted(),
					dt.Dispatch("r", dt.On("n1", 0, 1, 2, 3, 4, 5)), started("r", "n1")).
				at(1, task("head").GPUs(8).Hours(1).Submitted(), task("long").GPUs(2).Hours(2).Priority(domain.Low).Submitted()).
				at(31, events.Cancelled{TaskID: "long"}),
			task: "long",
			want: []audit.Part{{Cause: audit.CauseReservation, S: 30, Blocking: []string{"head"}}},
		},
		"fragmentation: enough free GPUs, none on one node": {
			log: newTimed().
				at(0, dt.Node("n1").GPUs(4).Available(), dt.Node("n2").GPUs(4).Available(),
					task("a").GPUs(2).Preemptible(false).Submitted(), dt.Dispatch("a", dt.On("n1", 0, 1)), started("a", "n1"),
					task("b").GPUs(2).Preemptible(false).Submitted(), dt.Dispatch("b", dt.On("n2", 0, 1)), started("b", "n2")).
				at(5, task("q").GPUs(4).Submitted()).
				at(50, completed("a", "n1")).
				at(50, dt.Dispatch("q", dt.On("n1", 0, 1, 2, 3)), started("q", "n1")),
			task: "q",
			want: []audit.Part{{Cause: audit.CauseFragmentation, S: 45, Blocking: []string{"a", "b"}}},
		},
		"constraint: a model the cluster does not have": {
			log: newTimed().
				at(0, dt.Node("n1").GPUs(8).Model("NVIDIA A100").Available()).
				at(2, task("q").GPUModel("H100").Submitted()).
				at(52, events.Cancelled{TaskID: "q"}),
			task: "q",
			want: []audit.Part{{Cause: audit.CauseConstraint, S: 50, Blocking: []string{}}},
		},
		"node: an unhealthy GPU": {
			log: newTimed().
				at(0, dt.Node("n1").GPUs(8).Unhealthy(3).Available()).
				at(2, task("q").GPUs(8).Submitted()).
				at(22, events.Cancelled{TaskID: "q"}),
			task: "q",
			want: []audit.Part{{Cause: audit.CauseNode, S: 20, Blocking: []string{}}},
		},
		"preempted: from the preemption to the next start": {
			log: newTimed().
				at(0, dt.Node("n1").GPUs(4).Available(), task("v").GPUs(4).Priority(domain.Low).Submitted(),
					dt.Dispatch("v", dt.On("n1", 0, 1, 2, 3)), started("v", "n1")).
				at(10, task("c").GPUs(4).Priority(domain.Critical).Submitted(),
					events.PreemptRequested{TaskID: "v", For: "c", Policy: policy.CriticalOnly, Reason: "for critical"}).
				at(20, events.Preempted{TaskID: "v", Node: "n1"}, events.Requeued{TaskID: "v", Reason: "preempted for c"},
					dt.Dispatch("c", dt.On("n1", 0, 1, 2, 3)), started("c", "n1")).
				at(80, completed("c", "n1"), dt.Dispatch("v", dt.On("n1", 0, 1, 2, 3))).
				at(81, started("v", "n1")),
			task: "v",
			want: []audit.Part{{Cause: audit.CausePreempted, S: 61, Blocking: []string{"c"}}},
		},
		"no-scheduler: startable, nobody dispatched it": {
			log: newTimed().
				at(0, dt.Node("n1").GPUs(4).Available()).
				at(1, task("q").GPUs(2).Submitted()).
				at(61, dt.Dispatch("q", dt.On("n1", 0, 1))).
				at(63, started("q", "n1")),
			task: "q",
			want: []audit.Part{{Cause: audit.CauseNoScheduler, S: 60, Blocking: []string{}}, {Cause: audit.CauseStarting, S: 2, Blocking: []string{}}},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ex, err := audit.Explain(c.log.recs(), policy.New(policy.Options{}), c.task)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(c.want, ex.Parts); d != "" {
				t.Errorf("parts (-want +got):\n%s\nspans: %+v", d, ex.Spans)
			}
			checkAddsUp(t, ex)
		})
	}
}

func checkAddsUp(t *testing.T, ex audit.Explanation) {
	t.Helper()
	sum, spans := 0.0, 0.0
	for _, p := range ex.Parts {
		sum += p.S
	}
	for _, s := range ex.Spans {
		spans += s.S
	}
	if math.Abs(sum-ex.WaitedS) > 1e-6 || math.Abs(spans-ex.WaitedS) > 1e-6 {
		t.Errorf("parts add up to %v and spans to %v, waited_s is %v", sum, spans, ex.WaitedS)
	}
}

func TestExplainNotFound(t *testing.T) {
	_, err := audit.Explain(newTimed().at(0, dt.Node("n1").Available()).recs(), policy.New(policy.Options{}), "nope")
	if err == nil {
		t.Fatal("no error for a task never submitted")
	}
}

func TestExplainText(t *testing.T) {
	ex := audit.Explanation{WaitedS: 3*3600 + 12*60, Parts: []audit.Part{
		{Cause: audit.CauseCapacity, S: 2*3600 + 5*60, Blocking: []string{"01a2"}},
		{Cause: audit.CauseFragmentation, S: 40 * 60},
		{Cause: audit.CausePreempted, S: 27 * 60},
	}, Tasks: map[string]audit.Blocker{"01a2": {Priority: "high", Team: "nlp"}}}
	want := "waited 3h12m: 2h05m behind 01a2 (high, team nlp) for capacity, 40m00s fragmentation, 27m00s after preemption"
	if got := ex.Text(); got != want {
		t.Errorf("Text() =\n%s\nwant\n%s", got, want)
	}
}
