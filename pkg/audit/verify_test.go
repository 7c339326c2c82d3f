package audit_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/audit"
	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

type found struct {
	Seq  uint64
	Kind string
	Task string
}

// The verifier catches violations planted in hand-made logs, each at its
// sequence, and passes a clean log.
func TestVerify(t *testing.T) {
	running := func(b *timed, id string, p domain.Priority, preemptible bool, node string, idx ...int) *timed {
		return b.at(0, task(id).Priority(p).GPUs(len(idx)).Preemptible(preemptible).Submitted(), dt.Dispatch(id, dt.On(node, idx...)), started(id, node))
	}
	cases := map[string]struct {
		log   *timed
		teams policy.Teams
		want  []found
	}{
		"clean: a preemption for a CRITICAL task, requeued and resumed": {
			log: running(newTimed().at(0, dt.Node("n1").GPUs(4).Available()), "v", domain.Low, true, "n1", 0, 1, 2, 3).
				at(10, task("c").GPUs(4).Priority(domain.Critical).Submitted(),
					events.PreemptRequested{TaskID: "v", For: "c", Policy: policy.CriticalOnly, Reason: "for critical"}).
				at(20, events.Preempted{TaskID: "v", Node: "n1"}, events.Requeued{TaskID: "v"},
					dt.Dispatch("c", dt.On("n1", 0, 1, 2, 3)), started("c", "n1")).
				at(80, completed("c", "n1"), dt.Dispatch("v", dt.On("n1", 0, 1, 2, 3)), started("v", "n1"), completed("v", "n1")),
			want: nil,
		},
		"a GPU held twice: a dispatch onto a held GPU": {
			log: running(newTimed().at(0, dt.Node("n1").GPUs(4).Available()), "a", domain.Medium, true, "n1", 0, 1).
				at(5, task("b").GPUs(2).Submitted(), dt.Dispatch("b", dt.On("n1", 1, 2))), // seq 6
			want: []found{{6, audit.GPUHeldTwice, "b"}},
		},
		"a preempted CRITICAL task": {
			log: running(newTimed().at(0, dt.Node("n1").GPUs(4).Available()), "c1", domain.Critical, true, "n1", 0, 1, 2, 3).
				at(5, task("c2").GPUs(4).Priority(domain.Critical).Submitted(),
					events.PreemptRequested{TaskID: "c1", For: "c2", Policy: policy.CriticalOnly, Reason: "for critical"}), // seq 6
			want: []found{{6, audit.PreemptedProtected, "c1"}},
		},
		"a preempted non-preemptible task": {
			log: running(newTimed().at(0, dt.Node("n1").GPUs(4).Available()), "v", domain.Low, false, "n1", 0, 1, 2, 3).
				at(5, task("c").GPUs(4).Priority(domain.Critical).Submitted(),
					events.PreemptRequested{TaskID: "v", For: "c", Policy: policy.CriticalOnly, Reason: "for critical"}),
			want: []found{{6, audit.PreemptedProtected, "v"}},
		},
		"a preemption critical-only does not allow": {
			log: running(newTimed().at(0, dt.Node("n1").GPUs(4).Available()), "v", domain.Low, true, "n1", 0, 1, 2, 3).
				at(5, task("h").GPUs(4).Priority(domain.High).Submitted(),
					events.PreemptRequested{TaskID: "v", For: "h", Policy: policy.CriticalOnly, Reason: "for high"}),
			want: []found{{6, audit.PreemptionNotAllowed, "v"}},
		},
		"clean: a drain with --preempt preempts the node's preemptible task": {
			log: running(newTimed().at(0, dt.Node("n1").GPUs(4).Available()), "v", domain.Low, true, "n1", 0, 1, 2, 3).
				at(5, events.Drained{Node: "n1", Reason: "maintenance", Preempt: true},
					events.PreemptRequested{TaskID: "v", Policy: policy.Drain, Reason: "node n1 drained"}).
				at(10, events.Preempted{TaskID: "v", Node: "n1"}, events.Requeued{TaskID: "v"}),
			want: nil,
		},
		"a drain preemption on a node not drained with --preempt": {
			log: running(newTimed().at(0, dt.Node("n1").GPUs(4).Available()), "v", domain.Low, true, "n1", 0, 1, 2, 3).
				at(5, events.Drained{Node: "n1", Reason: "maintenance"},
					events.PreemptRequested{TaskID: "v", Policy: policy.Drain, Reason: "node n1 drained"}), // seq 6
			want: []found{{6, audit.PreemptionNotAllowed, "v"}},
		},
		"clean: a CRITICAL task on a GPU that died is preempted to resume elsewhere": {
			log: running(newTimed().at(0, dt.Node("n1").GPUs(4).Available()), "c", domain.Critical, false, "n1", 0, 1).
				at(5, events.Unhealthy{Node: "n1", GPUs: []string{dt.GPU("n1", 1)}, Reason: "Xid 79"},
					events.PreemptRequested{TaskID: "c", Policy: policy.GPUUnhealthy, Reason: "gpu-unhealthy"}).
				at(10, events.Preempted{TaskID: "c", Node: "n1"}, events.Requeued{TaskID: "c"}),
			want: nil,
		},
		"a gpu-unhealthy preemption of a task on healthy GPUs": {
			log: running(newTimed().at(0, dt.Node("n1").GPUs(4).Available()), "v", domain.Low, true, "n1", 0, 1).
				at(5, events.Unhealthy{Node: "n1", GPUs: []string{dt.GPU("n1", 3)}, Reason: "Xid 79"},
					events.PreemptRequested{TaskID: "v", Policy: policy.GPUUnhealthy, Reason: "gpu-unhealthy"}), // seq 6
			want: []found{{6, audit.PreemptionNotAllowed, "v"}},
		},
		"a preempted task never requeued": {
			log: running(newTimed().at(0, dt.Node("n1").GPUs(4).Available()), "v", domain.Low, true, "n1", 0, 1, 2, 3).
				at(5, task("c").GPUs(4).Priority(domain.Critical).Submitted(),
											events.PreemptRequested{TaskID: "v", For: "c", Policy: policy.CriticalOnly, Reason: "for critical"}).
				at(10, events.Preempted{TaskID: "v", Node: "n1"}). // seq 7
				at(300, dt.Node("n1").GPUs(4).Available()),
			want: []found{{7, audit.PreemptedNotRequeued, "v"}},
		},
		"a dispatch onto an unhealthy GPU": {
			log:  newTimed().at(0, dt.Node("n1").GPUs(4).Unhealthy(2).Available(), task("q").GPUs(2).Submitted(), dt.Dispatch("q", dt.On("n1", 1, 2))),
			want: []found{{3, audit.DispatchWithoutCapacity, "q"}},
		},
		"a dispatch of fewer GPUs than asked": {
			log:  newTimed().at(0, dt.Node("n1").GPUs(4).Available(), task("q").GPUs(2).Submitted(), dt.Dispatch("q", dt.On("n1", 1))),
			want: []found{{3, audit.DispatchWithoutCapacity, "q"}},
		},
		"a guarantee left unserved while a borrower runs": {
			log: newTimed().at(0, dt.Node("n1").GPUs(4).Available(),
				task("borrow").Team("nlp").Priority(domain.Low).GPUs(4).Submitted(), dt.Dispatch("borrow", dt.On("n1", 0, 1, 2, 3)), started("borrow", "n1")).
				at(10, task("mine").Team("vision").GPUs(4).Submitted()). // seq 5
				at(1000, completed("borrow", "n1")),
			teams: policy.Teams{"vision": {GPUs: 4}},
			want:  []found{{5, audit.GuaranteeUnserved, ""}},
		},
		"a guarantee served within the grace": {
			log: newTimed().at(0, dt.Node("n1").GPUs(4).Available(),
				task("borrow").Team("nlp").Priority(domain.Low).GPUs(4).Submitted(), dt.Dispatch("borrow", dt.On("n1", 0, 1, 2, 3)), started("borrow", "n1")).
				at(10, task("mine").Team("vision").GPUs(4).Submitted(),
					events.PreemptRequested{TaskID: "borrow", For: "mine", Policy: policy.CriticalOnly, Reason: "preempted under policy team guarantee: vision reclaims GPUs borrowed by nlp"}).
				at(40, events.Preempted{TaskID: "borrow", Node: "n1"}, events.Requeued{TaskID: "borrow"}, dt.Dispatch("mine", dt.On("n1", 0, 1, 2, 3)), started("mine", "n1")),
			teams: policy.Teams{"vision": {GPUs: 4}},
			want:  nil,
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			rep := audit.Verify(c.log.recs(), audit.Options{Teams: c.teams})
			var got []found
			for _, v := range rep.Violations {
				got = append(got, found{v.Seq, v.Kind, v.TaskID})
			}
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("violations (-want +got):\n%s\n%+v", d, rep.Violations)
			}
			if rep.OK != (len(c.want) == 0) {
				t.Errorf("ok = %v with %d violations", rep.OK, len(rep.Violations))
			}
			if rep.Events != len(c.log.recs()) || rep.Digest == "" {
				t.Errorf("events %d (want %d), digest %q", rep.Events, len(c.log.recs()), rep.Digest)
			}
		})
	}
}

// Skipped records are listed with the fold's reason, and the stream's
// settings make a report not ok.
func TestVerifySkippedAndStream(t *testing.T) {
	log := newTimed().at(0, dt.Node("n1").GPUs(4).Available(), completed("ghost", "n1"))
	rep := audit.Verify(log.recs(), audit.Options{})
	if len(rep.Skipped) != 1 || rep.Skipped[0].Seq != 2 {
		t.Fatalf("skipped = %+v, want the ghost's completion at 2", rep.Skipped)
	}
	if !rep.OK {
		t.Fatalf("a skipped record is listed, not a violation: %+v", rep)
	}
	no, yes := false, true
	rep.DenyDelete, rep.DenyPurge = &yes, &no
	if rep.Finish(); rep.OK {
		t.Error("ok with a stream that allows purge")
	}
}

// A record of a task whose id is not one (a forged "x/y/z") is skipped
// by the fold and listed with the reason, like every other bad record;
// the task never exists.
func TestVerifySkipsForgedTaskID(t *testing.T) {
	var recs []events.Record
	for i, e := range []events.Event{dt.Node("n1").GPUs(4).Available(), task("x/y/z").Submitted(), task("t1").Submitted()} {
		subj, data, _, err := events.Encode(e, events.Meta{Time: at(float64(i))})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, events.DecodeRecord(events.Stored{Seq: uint64(i + 1), Subject: subj, Data: data, Time: at(float64(i))}))
	}
	rep := audit.Verify(recs, audit.Options{})
	if len(rep.Skipped) != 1 || rep.Skipped[0].Seq != 2 || !strings.Contains(rep.Skipped[0].Reason, `task id "x/y/z" is not a task id`) {
		t.Fatalf("skipped = %+v, want the forged task's submission at 2", rep.Skipped)
	}
	if st := dt.Fold(recs); st.Tasks["x/y/z"] != nil || st.Tasks["t1"] == nil || st.Skipped != 1 {
		t.Fatalf("fold: forged task %v, t1 %v, skipped %d", st.Tasks["x/y/z"], st.Tasks["t1"], st.Skipped)
	}
}
