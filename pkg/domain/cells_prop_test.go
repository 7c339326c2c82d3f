package domain_test

import (
	"fmt"
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
)

// Owner cells (cells.go) against Owner: random logs whose nodes report
// GPUs from one small pool of UUIDs (so one UUID may sit on two nodes, or
// twice on one, and a node may re-report others while its old ones are
// held), with placements drawn free or blind. After every record each
// node's slots equal Owner and freeOf equals the map-based reference;
// before every dispatch canPlace equals its reference. (IndexMismatch is
// not checked here: with one UUID on two nodes, the free index of the
// other node is not refreshed when it is placed, before the cells as now.)

func genCellLog(t *rapid.T) []events.Record {
	log := dt.NewLog()
	live := domain.NewState()
	add := func(e events.Event) {
		log.Append(e)
		rs := log.Records()
		live.Apply(rs[len(rs)-1])
	}
	pool := make([]string, rapid.IntRange(1, 10).Draw(t, "pool"))
	for i := range pool {
		pool[i] = fmt.Sprintf("GPU-%08d-aaaa-bbbb-cccc-%012d", i*7919, i)
	}
	nodes := []string{"n0", "n1", "n2"}[:rapid.IntRange(1, 3).Draw(t, "nodes")]
	available := func(node string) events.Available {
		a := events.Available{Node: node}
		for i := range rapid.IntRange(0, 6).Draw(t, "node gpus") {
			a.GPUs = append(a.GPUs, events.GPU{UUID: rapid.SampledFrom(pool).Draw(t, "uuid"),
				Index: rapid.IntRange(0, 7).Draw(t, "index") + i%2, Healthy: rapid.IntRange(0, 4).Draw(t, "healthy") > 0})
		}
		return a
	}
	for _, n := range nodes {
		add(available(n))
	}
	ids := []string{"t0", "t1", "t2", "t3", "t4", "t5"}
	acts := []string{"submit", "submit", "dispatch", "dispatch", "dispatch", "start", "complete", "fail", "cancel",
		"preempt_request", "preempted", "requeue", "available", "unhealthy", "drain", "undrain", "lose"}
	for range rapid.IntRange(0, 100).Draw(t, "steps") {
		id := rapid.SampledFrom(ids).Draw(t, "task")
		node := rapid.SampledFrom(nodes).Draw(t, "node")
		var e events.Event
		switch rapid.SampledFrom(acts).Draw(t, "action") {
		case "submit":
			e = dt.Task().ID(id).GPUs(rapid.IntRange(1, 4).Draw(t, "want")).Submitted()
		case "dispatch":
			var ps []events.Placement
			for range rapid.IntRange(0, 2).Draw(t, "placements") {
				p := events.Placement{Node: rapid.SampledFrom(append([]string{"ghost"}, nodes...)).Draw(t, "placement node")}
				if n := live.Nodes[p.Node]; n != nil && rapid.Bool().Draw(t, "free") {
					for _, g := range live.FreeGPUs(n) {
						if rapid.Bool().Draw(t, "take") {
							p.GPUs = append(p.GPUs, g.UUID)
						}
					}
				} else {
					for range rapid.IntRange(0, 3).Draw(t, "blind gpus") {
						p.GPUs = append(p.GPUs, rapid.SampledFrom(pool).Draw(t, "blind gpu"))
					}
				}
				ps = append(ps, p)
			}
			e = dt.Dispatch(id, ps...)
		case "start":
			e = events.Started{TaskID: id, Node: node, PID: 7}
		case "complete":
			e = events.Completed{TaskID: id, Node: node}
		case "fail":
			e = events.Failed{TaskID: id, Node: node, ExitCode: 1, Error: "boom"}
		case "cancel":
			e = events.Cancelled{TaskID: id, By: "alice", Reason: "r"}
		case "preempt_request":
			e = events.PreemptRequested{TaskID: id, For: "t0", Policy: "p", Reason: "r"}
		case "preempted":
			e = events.Preempted{TaskID: id, Node: node}
		case "requeue":
			e = events.Requeued{TaskID: id, Reason: "r"}
		case "available":
			e = available(node)
		case "unhealthy":
			e = events.Unhealthy{Node: node, GPUs: []string{rapid.SampledFrom(pool).Draw(t, "sick")}, Reason: "Xid"}
		case "drain":
			e = events.Drained{Node: node, Reason: "ops"}
		case "undrain":
			e = events.Undrained{Node: node}
		case "lose":
			e = events.Lost{Node: node, Reason: "heartbeat"}
		}
		add(e)
	}
	return log.Records()
}

func applyChecked(t *rapid.T, st *domain.State, rs []events.Record, what string) {
	for i, r := range rs {
		if d, ok := r.Event.(events.Dispatched); ok {
			if m := st.CanPlaceMismatch(d.Placements); m != "" {
				t.Fatalf("%s: before record %d: %s", what, i, m)
			}
		}
		st.Apply(r)
		if m := st.OwnerSlotsMismatch(); m != "" {
			t.Fatalf("%s: after record %d (%s %+v): %s", what, i, r.Event.EventType(), r.Event, m)
		}
	}
}

func TestPropOwnerCells(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs := genCellLog(t)
		applyChecked(t, domain.NewState(), rs, "fold")

		// Through a copy at record k: the copy's cells stay right, and
		// what it applies leaves the original's slots and Owner as they
		// were (and the other way round).
		k := rapid.IntRange(0, len(rs)).Draw(t, "k")
		clone := rapid.SampledFrom([]string{"Clone", "CloneLive", "snapshot"}).Draw(t, "copy")
		orig := dt.Fold(rs[:k])
		slots, own := orig.OwnerSlots()
		owner := maps.Clone(orig.Owner)
		var c *domain.State
		switch clone {
		case "Clone":
			c = orig.Clone()
		case "CloneLive":
			c = orig.CloneLive()
		case "snapshot":
			var err error
			if c, err = domain.DecodeSnapshot(domain.EncodeSnapshot(orig)); err != nil {
				t.Fatal(err)
			}
		}
		if m := c.OwnerSlotsMismatch(); m != "" {
			t.Fatalf("%s at record %d: %s", clone, k, m)
		}
		applyChecked(t, c, rs[k:], clone)
		gotSlots, gotOwn := orig.OwnerSlots()
		if diff := cmp.Diff(slots, gotSlots); diff != "" {
			t.Fatalf("applying to the %s changed the original's slots (-before +after):\n%s", clone, diff)
		}
		if diff := cmp.Diff(own, gotOwn); diff != "" {
			t.Fatalf("applying to the %s changed the original's cells (-before +after):\n%s", clone, diff)
		}
		if diff := cmp.Diff(owner, orig.Owner); diff != "" {
			t.Fatalf("applying to the %s changed the original's Owner (-before +after):\n%s", clone, diff)
		}
		if m := orig.OwnerSlotsMismatch(); m != "" {
			t.Fatalf("original after the %s applied: %s", clone, m)
		}
		// And the original goes on: the copy keeps what it had.
		cs, cown := c.OwnerSlots()
		cowner := maps.Clone(c.Owner)
		applyChecked(t, orig, rs[k:], "original")
		gs, gown := c.OwnerSlots()
		if !cmp.Equal(cs, gs) || !cmp.Equal(cown, gown) || !cmp.Equal(cowner, c.Owner) {
			t.Fatalf("applying to the original changed the %s's slots, cells or Owner", clone)
		}
	})
}

// FreeOn (a search of the free index) equals the free GPUs computed from
// Owner, and the schedulable names and totals (kept from per-node sums)
// equal the map-based computation, after every record of the usual random
// logs, and through a Clone.
func TestPropNodeIndexReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs := genLog(t)
		st := domain.NewState()
		k := rapid.IntRange(0, len(rs)).Draw(t, "k")
		for i, r := range rs {
			if i == k {
				st = st.Clone()
			}
			st.Apply(r)
			if m := st.FreeOnMismatch(); m != "" {
				t.Fatalf("after record %d (%s %+v): %s", i, r.Event.EventType(), r.Event, m)
			}
			if m := st.NodeTotalsMismatch(); m != "" {
				t.Fatalf("after record %d (%s %+v): %s", i, r.Event.EventType(), r.Event, m)
			}
		}
	})
}
