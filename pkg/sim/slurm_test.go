package sim

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestSlurmStart checks the slurm-backfill baseline against hand-computed
// plans on one node of 8 GPUs (or two), at now = epoch + 1 h.
func TestSlurmStart(t *testing.T) {
	now := epoch.Add(time.Hour)
	type running struct {
		id      string
		gpus    int
		hours   float64
		started time.Duration // before now
	}
	type queued struct {
		id    string
		gpus  int
		hours float64
		prio  domain.Priority
	}
	tests := map[string]struct {
		nodes   int
		running []running
		queued  []queued // in submit order
		target  string   // default: the last queued
		want    time.Duration
	}{
		"empty cluster: now": {
			nodes:  1,
			queued: []queued{{"t", 8, 1, domain.Medium}},
			want:   0,
		},
		"behind one running task: its remaining estimate": {
			nodes:   1,
			running: []running{{"r", 8, 3, time.Hour}},
			queued:  []queued{{"t", 4, 1, domain.Medium}},
			want:    2 * time.Hour,
		},
		"a running task past its estimate ends in 5 s": {
			nodes:   1,
			running: []running{{"r", 8, 0.5, time.Hour}},
			queued:  []queued{{"t", 1, 1, domain.Medium}},
			want:    5 * time.Second,
		},
		"backfill: a short task fits before the head's reservation": {
			nodes:   1,
			running: []running{{"r", 6, 2, 0}}, // ends in 2 h; 2 GPUs free
			queued:  []queued{{"head", 8, 1, domain.Medium}, {"t", 2, 1, domain.Medium}},
			want:    0,
		},
		"no backfill past the reservation: a long task waits for the head to end": {
			nodes:   1,
			running: []running{{"r", 6, 2, 0}},
			queued:  []queued{{"head", 8, 1, domain.Medium}, {"t", 2, 3, domain.Medium}},
			want:    3 * time.Hour, // head runs 2 h–3 h
		},
		"higher class planned first, whatever the submit order": {
			nodes:   1,
			running: []running{{"r", 8, 1, 0}},
			queued:  []queued{{"t", 8, 1, domain.Low}, {"hi", 8, 2, domain.High}},
			target:  "t",
			want:    3 * time.Hour,
		},
		"a task larger than a node fits the pooled profile": {
			nodes:   2,
			running: []running{{"r", 4, 1, 0}},
			queued:  []queued{{"t", 16, 1, domain.Medium}},
			want:    time.Hour,
		},
		"larger than the cluster: never": {
			nodes:  1,
			queued: []queued{{"t", 9, 1, domain.Medium}},
			want:   -1,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			st := domain.NewState()
			seq := uint64(0)
			apply := func(at time.Time, e events.Event) {
				seq++
				st.Apply(events.Record{Seq: seq, Envelope: events.Envelope{Type: e.EventType(), Time: at}, Event: e})
			}
			for n := range tt.nodes {
				apply(epoch, domaintest.Node([]string{"n1", "n2"}[n]).GPUs(8).Available())
			}
			used := map[string]int{}
			for _, r := range tt.running {
				node := "n1"
				if used[node]+r.gpus > 8 {
					node = "n2"
				}
				idx := make([]int, r.gpus)
				for i := range idx {
					idx[i] = used[node] + i
				}
				used[node] += r.gpus
				at := now.Add(-r.started)
				apply(epoch, domaintest.Task().ID(r.id).GPUs(r.gpus).Hours(r.hours).SubmittedAt(epoch).Submitted())
				apply(at, domaintest.Dispatch(r.id, domaintest.On(node, idx...)))
				apply(at, events.Started{TaskID: r.id, Node: node})
			}
			for i, q := range tt.queued {
				apply(now, domaintest.Task().ID(q.id).GPUs(q.gpus).Hours(q.hours).Priority(q.prio).SubmittedAt(now.Add(time.Duration(i)*time.Second)).Submitted())
			}
			id := tt.target
			if id == "" {
				id = tt.queued[len(tt.queued)-1].id
			}
			target := st.Tasks[id]
			if got := slurmStart(st, target, now); got != tt.want {
				t.Errorf("slurmStart = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPropReleasesProfile: the holders' profile built from their sorted
// ends is the profile of reserving each holder's GPUs over [0, its end)
// in turn, as slurmStart did (the reference), step for step.
func TestPropReleasesProfile(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		total := rapid.IntRange(1, 64).Draw(rt, "total")
		n := rapid.IntRange(0, 30).Draw(rt, "holders")
		rs := make([]release, n)
		for i := range rs {
			// Few distinct ends, so that ties are common.
			rs[i] = release{at: time.Duration(rapid.IntRange(1, 8).Draw(rt, "at")) * time.Second, gpus: rapid.IntRange(0, 8).Draw(rt, "gpus")}
		}
		want := profile{{at: 0, free: total}}
		for _, r := range rs {
			want = want.reserve(0, r.at, r.gpus)
		}
		got := releasesProfile(total, slices.Clone(rs))
		if !slices.Equal(got, want) {
			rt.Fatalf("releasesProfile(%d, %v) = %v, want %v", total, rs, got, want)
		}
	})
}
