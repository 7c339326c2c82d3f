//go:build faults

package faults

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// synth turns events into records the way the log would hold them.
func synth(t *testing.T, evs ...events.Event) []rec {
	t.Helper()
	var out []rec
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, e := range evs {
		subj, data, _, err := events.Encode(e, events.Meta{Time: at.Add(time.Duration(i) * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		m := events.Stored{Seq: uint64(i + 1), Subject: subj, Data: data, Time: at}
		r, err := events.Decode(m)
		out = append(out, rec{Stored: m, r: r, err: err})
	}
	return out
}

// TestCheckers shows that the suite's checks can fail: each broken log
// below is caught, and its correct twin is not. It needs no binaries.
func TestCheckers(t *testing.T) {
	node := events.Available{Node: "n1", GPUs: []events.GPU{{UUID: "g0", Healthy: true}, {UUID: "g1", Healthy: true}}}
	sub := func(id string) events.Submitted {
		return events.Submitted{TaskID: id, Name: id, Team: "a", Priority: "medium", GPUs: 1, Hours: 1, Command: "true"}
	}
	on := func(id, g string, based uint64) events.Dispatched {
		return events.Dispatched{TaskID: id, Placements: []events.Placement{{Node: "n1", GPUs: []string{g}}}, BasedOnSeq: based}
	}
	cases := []struct {
		name          string
		evs           []events.Event
		doubled, stal int
	}{
		{"one after the other", []events.Event{node, sub("a"), sub("b"), on("a", "g0", 3), events.Started{TaskID: "a", Node: "n1"},
			events.Completed{TaskID: "a", Node: "n1"}, on("b", "g0", 6)}, 0, 0},
		{"two tasks on one GPU", []events.Event{node, sub("a"), sub("b"), on("a", "g0", 3), on("b", "g0", 4)}, 1, 0},
		{"a task dispatched twice", []events.Event{node, sub("a"), on("a", "g0", 2), on("a", "g1", 3)}, 1, 0},
		{"freed by a completion from elsewhere", []events.Event{node, sub("a"), sub("b"), on("a", "g0", 3),
			events.Completed{TaskID: "a", Node: "elsewhere"}, on("b", "g0", 5)}, 1, 0},
		{"requeued, then dispatched again", []events.Event{node, sub("a"), on("a", "g0", 2),
			events.Requeued{TaskID: "a", Reason: "node lost"}, on("a", "g1", 4)}, 0, 0},
		{"a decision from an older state", []events.Event{node, sub("a"), sub("b"), on("a", "g0", 3), on("b", "g1", 2)}, 0, 1},
	}
	for _, tc := range cases {
		recs := synth(t, tc.evs...)
		d := checkDoubles(recs)
		if got := d.GPU + d.Task; got != tc.doubled {
			t.Errorf("%s: doubled %d, want %d (%v)", tc.name, got, tc.doubled, d.Detail)
		}
		if got := len(checkStale(recs)); got != tc.stal {
			t.Errorf("%s: stale %d, want %d", tc.name, got, tc.stal)
		}
	}

	// The digest: equal for two folds of one log, different when one fact
	// differs.
	recs := synth(t, node, sub("a"), sub("b"), on("a", "g0", 3))
	a, b := fold(recs, 0), fold(recs, 0)
	if digest(a) != digest(b) {
		t.Errorf("two folds of one log have different digests")
	}
	b.Tasks["a"].State = domain.Queued
	if digest(a) == digest(b) {
		t.Errorf("the digest does not see a task's state")
	}
	if digest(fold(recs, 3)) == digest(a) {
		t.Errorf("the digest does not see the sequence")
	}
	snap, err := domain.DecodeSnapshot(domain.EncodeSnapshot(a))
	if err != nil {
		t.Fatal(err)
	}
	if digest(snap) != digest(a) {
		t.Errorf("a snapshot round trip changes the digest: %v", diffStates(a, snap))
	}
}
