package audit_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/audit"
	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// randomLog draws a log of plausible and implausible facts: nodes, tasks,
// dispatches onto random GPUs (some held, some unknown), starts,
// preemptions, requeues, completions, failures and cancellations, at
// random increasing times.
func randomLog(t *rapid.T) []events.Record {
	l := dt.NewLog()
	now := t0
	nodes := rapid.IntRange(1, 3).Draw(t, "nodes")
	n := rapid.IntRange(1, 60).Draw(t, "records")
	tasks := 0
	id := func(t *rapid.T) string {
		if tasks == 0 {
			return "t0"
		}
		return fmt.Sprintf("t%d", rapid.IntRange(0, tasks-1).Draw(t, "task"))
	}
	node := func(t *rapid.T) string { return fmt.Sprintf("n%d", rapid.IntRange(1, nodes).Draw(t, "node")) }
	for i := 0; i < n; i++ {
		now = now.Add(time.Duration(rapid.IntRange(0, 600).Draw(t, "dt")) * time.Second)
		l.At(now)
		var e events.Event
		switch rapid.IntRange(0, 10).Draw(t, "kind") {
		case 0:
			e = dt.Node(node(t)).GPUs(4).Unhealthy(rapid.SliceOfN(rapid.IntRange(0, 5), 0, 1).Draw(t, "bad")...).Available()
		case 1, 2:
			p := domain.Priority(rapid.IntRange(int(domain.Low), int(domain.Critical)).Draw(t, "class"))
			e = dt.Task().ID(fmt.Sprintf("t%d", tasks)).Team(rapid.SampledFrom([]string{"vision", "nlp"}).Draw(t, "team")).
				Priority(p).GPUs(rapid.IntRange(1, 5).Draw(t, "gpus")).Hours(rapid.Float64Range(0.01, 2).Draw(t, "hours")).
				Preemptible(rapid.Bool().Draw(t, "preemptible")).Submitted()
			tasks++
		case 3, 4:
			nd := node(t)
			idx := rapid.SliceOfNDistinct(rapid.IntRange(0, 4), 1, 4, func(i int) int { return i }).Draw(t, "gpus")
			e = dt.Dispatch(id(t), dt.On(nd, idx...))
		case 5:
			e = started(id(t), node(t))
		case 6:
			e = events.PreemptRequested{TaskID: id(t), For: id(t), Policy: policy.CriticalOnly}
		case 7:
			e = events.Preempted{TaskID: id(t), Node: node(t)}
		case 8:
			e = events.Requeued{TaskID: id(t)}
		case 9:
			e = completed(id(t), node(t))
		default:
			if rapid.Bool().Draw(t, "cancel") {
				e = events.Cancelled{TaskID: id(t)}
			} else {
				e = events.Failed{TaskID: id(t), Node: node(t), ExitCode: 1}
			}
		}
		l.Append(e)
	}
	return l.Records()
}

// Replay to sequence k equals the state the live fold had at k: a fold
// that applied the records one by one, as a service does, has at every k
// the digest of a fresh replay of the first k records, and Replay's view
// there says the same.
func TestReplayEqualsLiveFold(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		recs := randomLog(t)
		live := domain.NewState()
		pol := policy.New(policy.Options{})
		for _, r := range recs {
			live.Apply(r)
			k := r.Seq
			if got, want := audit.Digest(audit.Fold(recs, k)), audit.Digest(live); got != want {
				t.Fatalf("replay to %d: digest %s, the live fold's %s", k, got, want)
			}
			v := audit.Replay(recs, pol, k, true)
			if v.Seq != k || v.Digest != audit.Digest(live) {
				t.Fatalf("Replay(%d): seq %d, digest %s; live %s", k, v.Seq, v.Digest, audit.Digest(live))
			}
			if len(v.Tasks) != len(live.Tasks) {
				t.Fatalf("Replay(%d, all) lists %d tasks, the live fold has %d", k, len(v.Tasks), len(live.Tasks))
			}
			for _, tv := range v.Tasks {
				if lt := live.Tasks[tv.TaskID]; lt == nil || string(lt.State) != tv.State {
					t.Fatalf("Replay(%d): task %s %s, live %+v", k, tv.TaskID, tv.State, lt)
				}
			}
		}
	})
}

// For random logs, the verifier never panics, and explain's parts add up
// for every task.
func TestExplainAddsUpProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		recs := randomLog(t)
		audit.Verify(recs, audit.Options{Teams: policy.Teams{"vision": {GPUs: 2}}})
		st := audit.Fold(recs, 0)
		for id := range st.Tasks {
			ex, err := audit.Explain(recs, policy.New(policy.Options{}), id)
			if err != nil {
				t.Fatal(err)
			}
			sum := 0.0
			for _, p := range ex.Parts {
				sum += p.S
			}
			if d := sum - ex.WaitedS; d > 1e-6 || d < -1e-6 || ex.WaitedS < 0 {
				t.Fatalf("task %s: parts add up to %v, waited_s %v: %+v", id, sum, ex.WaitedS, ex.Spans)
			}
		}
	})
}

// stored encodes records as a log stores them, at their times.
func stored(t interface{ Fatalf(string, ...any) }, recs []events.Record) []events.Stored {
	out := make([]events.Stored, len(recs))
	for i, r := range recs {
		subj, data, _, err := events.Encode(r.Event, events.Meta{Time: r.Envelope.Time})
		if err != nil {
			t.Fatalf("encode %d: %v", r.Seq, err)
		}
		out[i] = events.Stored{Seq: r.Seq, Subject: subj, Data: data, Time: r.Envelope.Time}
	}
	return out
}

// Export → import → verify gives the same digest: the archive verified
// offline, and the log an import appends (stored a day later, with each
// envelope's origin), fold to the original's state; a second export and
// import keep it.
func TestExportImportSameDigest(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		orig := stored(t, randomLog(t))
		decode := func(ms []events.Stored) []events.Record {
			out := make([]events.Record, len(ms))
			for i, m := range ms {
				out[i] = events.DecodeRecord(m)
			}
			return out
		}
		want := audit.Verify(decode(orig), audit.Options{})
		imported := orig
		for round := range 2 {
			var buf bytes.Buffer
			for _, m := range imported {
				b, err := jsonLine(audit.LineOf(m))
				if err != nil {
					t.Fatal(err)
				}
				buf.Write(b)
			}
			ls, err := audit.ReadLines(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if got := audit.Verify(audit.Records(ls), audit.Options{}); got.Digest != want.Digest || len(got.Violations) != len(want.Violations) {
				t.Fatalf("round %d: the archive's digest %s, the log's %s", round, got.Digest, want.Digest)
			}
			next := make([]events.Stored, len(ls))
			for i, l := range ls {
				next[i] = events.Stored{Seq: l.Seq, Subject: l.Subject, Data: audit.ImportData(l), Time: time.Now().Add(24 * time.Hour)}
			}
			if got := audit.Verify(decode(next), audit.Options{}); got.Digest != want.Digest {
				t.Fatalf("round %d: the import's digest %s, the log's %s", round, got.Digest, want.Digest)
			}
			imported = next
		}
	})
}
