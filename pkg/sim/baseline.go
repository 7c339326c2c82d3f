package sim

import (
	"container/heap"
	"sort"
	"time"
)

// The baselines follow the HeliosArtifact simulator ("QSSF Service":
// policies/fifo.py, policies/sjf.py, policies/placer/consolidate.py), the
// convention the published Philly numbers use:
//
//  1. At each instant, the jobs ending then release their GPUs, then the
//     jobs submitted then join the queue.
//  2. The queue is sorted — fifo-strict: by submit time; sjf-oracle: by
//     real duration (the oracle), ties in submit order — and jobs are
//     placed from its head; the first job that does not fit stops the pass
//     (strict head-of-line blocking, no backfill, no preemption).
//  3. Placement is "consolidate": the cluster's free GPUs must cover the
//     job; a job of at most one node's GPUs goes on the node with the
//     fewest free GPUs that fits it (ties: lowest node number); a larger
//     one, in the order of most free GPUs (ties: lowest node number), takes
//     whole free nodes and, when its size is not a multiple of a node, the
//     remainder on the next node in that order if it has room; any other
//     node met on the way makes the placement fail.
//
// Helios loops second by second; these simulators jump from one instant
// where something happens to the next, which gives the same schedule
// because nothing changes in between. Helios supports 8-GPU nodes only;
// here a node's size takes the place of 8.

// baselineRun simulates fifo-strict (oracle false) or sjf-oracle.
func baselineRun(tasks []Task, nodes, perNode int, oracle bool) *outcome {
	out := newOutcome(len(tasks))
	c := &consolidate{free: make([]int, nodes), perNode: perNode, total: nodes * perNode}
	for i := range c.free {
		c.free[i] = perNode
	}
	held := make([][]alloc, len(tasks))
	var ends taskEnds
	var queue []int // task indices in queue order
	less := func(a, b int) bool {
		if oracle && tasks[a].Duration != tasks[b].Duration {
			return tasks[a].Duration < tasks[b].Duration
		}
		return a < b // tasks are in submit order
	}
	next := 0
	for next < len(tasks) || ends.Len() > 0 {
		// The next instant: a submission or an end, whichever is first.
		var now time.Duration
		switch {
		case ends.Len() == 0:
			now = tasks[next].Submit
		case next == len(tasks):
			now = ends[0].at
		default:
			now = min(tasks[next].Submit, ends[0].at)
		}
		// 1. Release the jobs ending now, then queue the jobs submitted now.
		for ends.Len() > 0 && ends[0].at == now {
			e := heap.Pop(&ends).(taskEnd)
			c.release(held[e.task])
			held[e.task] = nil
			out.end[e.task] = now
		}
		for next < len(tasks) && tasks[next].Submit == now {
			i := sort.Search(len(queue), func(k int) bool { return less(next, queue[k]) })
			queue = append(queue, 0)
			copy(queue[i+1:], queue[i:])
			queue[i] = next
			next++
		}
		// 2. Place from the head until the first job that does not fit.
		placed := 0
		for _, i := range queue {
			a, ok := c.place(tasks[i].GPUs)
			if !ok {
				break
			}
			held[i] = a
			out.start[i] = now
			out.busyGPUSeconds += float64(tasks[i].GPUs) * tasks[i].Duration.Seconds()
			heap.Push(&ends, taskEnd{at: now + tasks[i].Duration, task: i})
			placed++
		}
		queue = queue[placed:]
		out.queueLen.add(now, len(queue))
	}
	return out
}

// alloc is part of a job on one node.
type alloc struct{ node, gpus int }

// consolidate is the Helios "consolidate" placer over per-node free counts.
type consolidate struct {
	free    []int
	perNode int
	total   int // free GPUs in all
}

func (c *consolidate) release(as []alloc) {
	for _, a := range as {
		c.free[a.node] += a.gpus
		c.total += a.gpus
	}
}

func (c *consolidate) take(as []alloc) []alloc {
	for _, a := range as {
		c.free[a.node] -= a.gpus
		c.total -= a.gpus
	}
	return as
}

// place finds GPUs for a job of need GPUs and takes them (see the
// convention above); false leaves everything as it was.
func (c *consolidate) place(need int) ([]alloc, bool) {
	if need <= 0 || c.total < need {
		return nil, false
	}
	if need <= c.perNode {
		best := -1
		for i, f := range c.free {
			if f > 0 && f >= need && (best < 0 || f < c.free[best]) {
				best = i
			}
		}
		if best < 0 {
			return nil, false
		}
		return c.take([]alloc{{best, need}}), true
	}
	var order []int // nodes with free GPUs, most free first, ties by number
	for i, f := range c.free {
		if f > 0 {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return c.free[order[a]] > c.free[order[b]] })
	var as []alloc
	if need%c.perNode == 0 {
		k := need / c.perNode
		for _, n := range order {
			if c.free[n] < c.perNode {
				return nil, false
			}
			as = append(as, alloc{n, c.perNode})
			if k--; k == 0 {
				return c.take(as), true
			}
		}
		return nil, false
	}
	k, rem := need/c.perNode+1, need%c.perNode
	for _, n := range order {
		if c.free[n] == c.perNode && k > 1 {
			as = append(as, alloc{n, c.perNode})
			k--
			continue
		}
		if c.free[n] >= rem && k == 1 {
			return c.take(append(as, alloc{n, rem})), true
		}
		return nil, false
	}
	return nil, false
}

// taskEnd is a running task's end; taskEnds orders them by time, then task.
type taskEnd struct {
	at   time.Duration
	task int
	gen  uint32 // the run it ends (gpuq: a preempted run's end is stale)
	// yield (gpuq, checkpoint model): the end of a preempted task's grace,
	// when it exits, rather than its completion.
	yield bool
}

type taskEnds []taskEnd

func (h taskEnds) Len() int { return len(h) }
func (h taskEnds) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].task < h[j].task
}
func (h taskEnds) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *taskEnds) Push(x any)   { *h = append(*h, x.(taskEnd)) }
func (h *taskEnds) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
