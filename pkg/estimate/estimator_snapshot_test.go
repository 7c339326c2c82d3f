package estimate_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// randomLog draws a log of submissions, dispatches and starts as the
// policy decides them, and completions, on two nodes, over simulated
// hours: the events the advisor folds.
func randomLog(t *rapid.T) []events.Record {
	st := domain.NewState()
	pol := policy.New(policy.Options{})
	var recs []events.Record
	at := t0
	add := func(e events.Event) {
		r := events.Record{Seq: uint64(len(recs) + 1), Envelope: events.Envelope{Type: e.EventType(), Time: at}, Event: e}
		st.Apply(r)
		recs = append(recs, r)
	}
	for _, n := range []string{"n1", "n2"} {
		var gs []events.GPU
		for i := range 4 {
			gs = append(gs, events.GPU{UUID: fmt.Sprintf("%s-g%d", n, i), Index: i, Model: "A100", MemoryMiB: 40960, Healthy: true})
		}
		add(events.Available{Node: n, GPUs: gs})
	}
	steps := rapid.IntRange(1, 80).Draw(t, "steps")
	for i := range steps {
		at = at.Add(time.Duration(rapid.IntRange(0, 3600).Draw(t, "dt")) * time.Second)
		switch rapid.IntRange(0, 3).Draw(t, "op") {
		case 0, 1:
			id := fmt.Sprintf("t%03d", i)
			add(events.Submitted{TaskID: id, Name: id, Team: rapid.SampledFrom([]string{"a", "b"}).Draw(t, "team"),
				Priority: rapid.SampledFrom([]string{"low", "medium", "high", "critical"}).Draw(t, "prio"),
				GPUs:     rapid.IntRange(1, 4).Draw(t, "gpus"), Hours: float64(rapid.IntRange(1, 8).Draw(t, "hours")) / 2,
				Hypothesis: "h", Command: "true", SubmittedAt: at})
		case 2:
			for _, d := range pol.Plan(policy.Input{State: st, Now: at}).Decisions {
				if d.Kind == policy.Dispatch {
					add(events.Dispatched{TaskID: d.TaskID, Placements: d.Placements})
					add(events.Started{TaskID: d.TaskID, Node: d.Placements[0].Node})
				}
			}
		case 3:
			var running []string
			for id, tk := range st.Tasks {
				if tk.State == domain.Running {
					running = append(running, id)
				}
			}
			if len(running) > 0 {
				slices.Sort(running)
				id := rapid.SampledFrom(running).Draw(t, "done")
				add(events.Completed{TaskID: id, Node: st.Tasks[id].Placements[0].Node})
			}
		}
	}
	return recs
}

func observe(est *estimate.Estimator, st *domain.State, recs []events.Record) {
	for _, r := range recs {
		st.Apply(r)
		est.Observe(st, r)
	}
}

// TestPropEstimatorSnapshot: an estimator restored from a snapshot taken
// at any point of a log, fed the rest, is the estimator that folded the
// whole log: the same snapshot bytes, statistics, estimates at submission
// and estimates of the queue.
func TestPropEstimatorSnapshot(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		recs := randomLog(t)
		k := rapid.IntRange(0, len(recs)).Draw(t, "k")
		pol := policy.New(policy.Options{})
		full, fullSt := estimate.NewEstimator(pol), domain.NewState()
		observe(full, fullSt, recs)

		head, headSt := estimate.NewEstimator(pol), domain.NewState()
		observe(head, headSt, recs[:k])
		b, err := head.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		restored := estimate.NewEstimator(pol)
		if err := restored.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		again, _ := restored.MarshalBinary()
		if string(again) != string(b) {
			t.Fatalf("a restored estimator writes another snapshot:\n%s\n%s", b, again)
		}
		observe(restored, headSt, recs[k:])

		want, _ := full.MarshalBinary()
		got, _ := restored.MarshalBinary()
		if string(want) != string(got) {
			t.Fatalf("snapshot at %d of %d + tail differs from the full fold:\n%s", k, len(recs), cmp.Diff(string(want), string(got)))
		}
		if diff := cmp.Diff(full.Stats(), restored.Stats(), cmpopts.IgnoreUnexported(estimate.Stats{})); diff != "" {
			t.Fatalf("stats (-full +restored):\n%s", diff)
		}
		now := fullSt.LastTime
		for _, tk := range fullSt.Queued() {
			a, aok := full.AtSubmit(tk.ID)
			b, bok := restored.AtSubmit(tk.ID)
			if aok != bok || !cmp.Equal(a, b) {
				t.Fatalf("AtSubmit(%s): full %+v %v, restored %+v %v", tk.ID, a, aok, b, bok)
			}
			if diff := cmp.Diff(full.Estimate(fullSt, tk.ID, now), restored.Estimate(headSt, tk.ID, now)); diff != "" {
				t.Fatalf("Estimate(%s) (-full +restored):\n%s", tk.ID, diff)
			}
		}
	})
}

// TestEstimatorSnapshotRefused: damage, another format, another window
// are refused, and the estimator keeps what it had.
func TestEstimatorSnapshotRefused(t *testing.T) {
	l := newLog()
	l.node("n1", 8)
	for i := range 30 {
		at := t0.Add(time.Duration(i) * time.Minute)
		id := fmt.Sprintf("t%d", i)
		l.submit(at, id, "medium", 8, 1)
		l.run(at.Add(time.Duration(i)*time.Second), id)
		l.add(at.Add(30*time.Second), events.Completed{TaskID: id, Node: "n1"})
	}
	good, err := l.est.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	other := estimate.NewEstimator(policy.New(policy.Options{}))
	other.Window = 50
	small, _ := other.MarshalBinary()
	cases := map[string]struct {
		b      []byte
		window int
	}{
		"empty":              {nil, 0},
		"not JSON":           {[]byte("\x00\x01"), 0},
		"truncated":          {good[:len(good)/2], 0},
		"another format":     {[]byte(`{"format":99}`), 0},
		"another window":     {small, 0},
		"classes missing":    {[]byte(`{"format":2,"window":2000,"res":{"max":2000}}`), 0},
		"class out of range": {[]byte(`{"format":2,"window":2000,"res":{"max":2000,"vals":[0]},"res_class":[9],"by_class":[[],[],[],[]],"in_res":[0,0,0,0]}`), 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := estimate.NewEstimator(policy.New(policy.Options{}))
			if err := e.UnmarshalBinary(good); err != nil {
				t.Fatal(err)
			}
			if err := e.UnmarshalBinary(tc.b); err == nil {
				t.Fatal("accepted")
			}
			if after, _ := e.MarshalBinary(); string(after) != string(good) {
				t.Error("a refused snapshot changed the estimator")
			}
		})
	}
}
