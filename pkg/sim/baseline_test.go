package sim

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestConsolidatePlace(t *testing.T) {
	tests := map[string]struct {
		free   []int
		need   int
		want   []alloc
		wantOK bool
	}{
		"fewest free that fits":       {free: []int{2, 4, 8}, need: 3, want: []alloc{{1, 3}}, wantOK: true},
		"ties go to the lowest node":  {free: []int{8, 8, 8}, need: 6, want: []alloc{{0, 6}}, wantOK: true},
		"exact fit preferred":         {free: []int{8, 2, 4}, need: 2, want: []alloc{{1, 2}}, wantOK: true},
		"enough in all, no node fits": {free: []int{3, 3}, need: 4},
		"not enough in all":           {free: []int{8, 1}, need: 10},
		"multiple of a node: whole nodes, most free first": {free: []int{8, 7, 8}, need: 16,
			want: []alloc{{0, 8}, {2, 8}}, wantOK: true},
		"multiple of a node: a partial node met first fails": {free: []int{8, 7, 7, 2}, need: 16},
		"remainder on the next node in most-free order, not the best fit": {free: []int{8, 8, 3}, need: 12,
			want: []alloc{{0, 8}, {1, 4}}, wantOK: true},
		"remainder on a partial node": {free: []int{8, 8, 3}, need: 19,
			want: []alloc{{0, 8}, {1, 8}, {2, 3}}, wantOK: true},
		"remainder does not fit the next node": {free: []int{8, 8, 3, 1}, need: 20},
		"no whole node for the first part":     {free: []int{7, 7}, need: 10},
		"nodes with nothing free are skipped": {free: []int{0, 8, 0, 8}, need: 12,
			want: []alloc{{1, 8}, {3, 4}}, wantOK: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := &consolidate{free: append([]int(nil), tt.free...), perNode: 8}
			for _, f := range tt.free {
				c.total += f
			}
			got, ok := c.place(tt.need)
			if ok != tt.wantOK {
				t.Fatalf("place(%d) on %v: ok %v, want %v", tt.need, tt.free, ok, tt.wantOK)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(alloc{})); diff != "" {
				t.Errorf("allocation (-want +got):\n%s", diff)
			}
			if !ok {
				if diff := cmp.Diff(tt.free, c.free); diff != "" {
					t.Errorf("a failed placement changed the free counts (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestBaselines checks fifo-strict and sjf-oracle against schedules
// computed by hand.
func TestBaselines(t *testing.T) {
	s := time.Second
	type times struct{ Start, End []time.Duration }
	tests := map[string]struct {
		nodes         int
		tasks         []Task
		fifo, sjf     times
		fifoM, sjfM   Metrics
		skipMetrics   bool
		wantFIFOQueue []Point
	}{
		// 2 nodes × 8 GPUs. j1 takes a node; j2 (12 GPUs) cannot fit until
		// j1 ends at 100 and blocks the head of the line, so under FIFO j3
		// (1 GPU) waits behind it although 8 GPUs are free; SJF puts j3
		// first and it runs at once on the free node. At 100 j2 takes
		// node 0 whole and 4 GPUs of node 1 (most free first), and FIFO's
		// j3 then fits on node 1.
		"head-of-line blocking and a job over 8 GPUs": {
			nodes: 2,
			tasks: []Task{
				{ID: "j1", Submit: 0, Duration: 100 * s, GPUs: 8},
				{ID: "j2", Submit: 1 * s, Duration: 50 * s, GPUs: 12},
				{ID: "j3", Submit: 2 * s, Duration: 10 * s, GPUs: 1},
			},
			fifo: times{Start: []time.Duration{0, 100 * s, 100 * s}, End: []time.Duration{100 * s, 150 * s, 110 * s}},
			sjf:  times{Start: []time.Duration{0, 100 * s, 2 * s}, End: []time.Duration{100 * s, 150 * s, 12 * s}},
			// JCT 100, 149, 108 | 100, 149, 10; queue 0, 99, 98 | 0, 99, 0.
			fifoM: Metrics{AvgJCT: 119, MedianJCT: 108, P95JCT: 149, AvgQueue: 65.67, MedianQueue: 98, P95Queue: 99, P99Queue: 99,
				MaxQueue: 99, MakespanS: 150, MaxQueued: 2,
				Utilization: round((8*100+12*50+1*10)/(16*150.0), 4)},
			sjfM: Metrics{AvgJCT: 86.33, MedianJCT: 100, P95JCT: 149, AvgQueue: 33, MedianQueue: 0, P95Queue: 99, P99Queue: 99,
				MaxQueue: 99, MakespanS: 150, MaxQueued: 1,
				Utilization: round((8*100+12*50+1*10)/(16*150.0), 4)},
			wantFIFOQueue: []Point{{0, 0}, {1 * s, 1}, {2 * s, 2}, {100 * s, 0}},
		},
		// 1 node × 8 GPUs, everything submitted at 0.
		"sjf orders by real duration, ties in submit order": {
			nodes: 1,
			tasks: []Task{
				{ID: "a", Submit: 0, Duration: 30 * s, GPUs: 4},
				{ID: "b", Submit: 0, Duration: 20 * s, GPUs: 4},
				{ID: "c", Submit: 0, Duration: 10 * s, GPUs: 8},
				{ID: "d", Submit: 0, Duration: 5 * s, GPUs: 1},
				{ID: "e", Submit: 0, Duration: 5 * s, GPUs: 1},
			},
			// FIFO: a, b at 0 (8 used); c waits until 30; d, e wait behind c
			// until c ends at 40.
			fifo: times{Start: []time.Duration{0, 0, 30 * s, 40 * s, 40 * s}, End: []time.Duration{30 * s, 20 * s, 40 * s, 45 * s, 45 * s}},
			// SJF order d, e (5 s, submit order), c (10), b (20), a (30): d, e
			// run at 0 (2 used); c (8) does not fit and blocks. At 5 both end;
			// c runs 5–15; then b and a together 15–35 and 15–45.
			sjf:         times{Start: []time.Duration{15 * s, 15 * s, 5 * s, 0, 0}, End: []time.Duration{45 * s, 35 * s, 15 * s, 5 * s, 5 * s}},
			skipMetrics: true,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			for _, oracle := range []bool{false, true} {
				want := tt.fifo
				if oracle {
					want = tt.sjf
				}
				o := baselineRun(tt.tasks, tt.nodes, 8, oracle)
				if diff := cmp.Diff(want, times{o.start, o.end}); diff != "" {
					t.Errorf("oracle=%v: schedule (-want +got):\n%s", oracle, diff)
				}
				if tt.skipMetrics {
					continue
				}
				wantM := tt.fifoM
				if oracle {
					wantM = tt.sjfM
				}
				if diff := cmp.Diff(wantM, metrics(tt.tasks, o, tt.nodes*8)); diff != "" {
					t.Errorf("oracle=%v: metrics (-want +got):\n%s", oracle, diff)
				}
				if !oracle && tt.wantFIFOQueue != nil {
					if diff := cmp.Diff(tt.wantFIFOQueue, []Point(o.queueLen)); diff != "" {
						t.Errorf("queue length (-want +got):\n%s", diff)
					}
				}
			}
		})
	}
}
