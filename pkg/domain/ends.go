package domain

import (
	"fmt"
	"time"
)

// EstimatedRun is the user's estimate of the task's whole run,
// Hours as a duration: what a policy predicts when it has nothing better.
func (t *Task) EstimatedRun() time.Duration { return time.Duration(t.Hours * float64(time.Hour)) }

// EstimatedEnd is when a started task is expected to end by the user's
// estimate: StartedAt + EstimatedRun, on the wall clock (no monotonic
// reading). Zero for a task not started.
func (t *Task) EstimatedEnd() time.Time {
	if t.StartedAt.IsZero() {
		return time.Time{}
	}
	return t.StartedAt.Add(t.EstimatedRun()).Round(0)
}

// endIndex keeps the tasks holding GPUs by estimated end, so that a
// reader wanting the few earliest ends (the policy's backfill
// reservation) need not look at every holder. Every holder is in exactly
// one of three sets (Task.endIn, at Task.endAt):
//
//   - ahead: started, estimated end after clock; a min-heap by end;
//   - due: started, estimated end at or before clock; a min-heap by
//     SubmitSeq (past its end a task's end is "soon", the same for all);
//   - unstarted: dispatched, not started (StartedAt zero); no order.
//
// clock is the latest event time applied (the wall clock, no monotonic
// reading): every StartedAt is at or before it, since it is an event's.
type endIndex struct {
	clock     time.Time
	ahead     []endEntry
	due       []*Task
	unstarted []*Task
}

type endEntry struct {
	end time.Time
	t   *Task
}

// The sets of the end index (Task.endIn).
const (
	endNone uint8 = iota
	endAhead
	endDue
	endUnstarted
)

// trackEnd puts a task in its set of the end index (or none).
func (s *State) trackEnd(t *Task) {
	x := &s.ends
	in, end := endNone, time.Time{}
	switch {
	case !t.HoldsGPUs():
	case t.StartedAt.IsZero():
		in = endUnstarted
	default:
		end = t.EstimatedEnd()
		in = endAhead
		if !end.After(x.clock) {
			in = endDue
		}
	}
	if in == t.endIn && (in != endAhead || x.ahead[t.endAt].end.Equal(end)) {
		return
	}
	if in == endAhead && t.endIn == endAhead {
		// The end moved: fix its place in the heap.
		x.ahead[t.endAt].end = end
		x.aheadFix(int(t.endAt))
		return
	}
	x.remove(t)
	switch in {
	case endAhead:
		t.endIn, t.endAt = endAhead, int32(len(x.ahead))
		x.ahead = append(x.ahead, endEntry{end, t})
		x.aheadUp(int(t.endAt))
	case endDue:
		x.duePush(t)
	case endUnstarted:
		t.endIn, t.endAt = endUnstarted, int32(len(x.unstarted))
		x.unstarted = append(x.unstarted, t)
	}
}

// advance moves the clock to at (when later) and the tasks whose
// estimated end it reached from ahead to due.
func (x *endIndex) advance(at time.Time) {
	at = at.Round(0)
	if !at.After(x.clock) {
		return
	}
	x.clock = at
	for len(x.ahead) > 0 && !x.ahead[0].end.After(at) {
		t := x.ahead[0].t
		x.remove(t)
		x.duePush(t)
	}
}

// remove takes t out of its set.
func (x *endIndex) remove(t *Task) {
	i := int(t.endAt)
	switch t.endIn {
	case endAhead:
		last := len(x.ahead) - 1
		if i != last {
			x.ahead[i] = x.ahead[last]
			x.ahead[i].t.endAt = int32(i)
		}
		x.ahead[last] = endEntry{}
		x.ahead = x.ahead[:last]
		if i != last {
			x.aheadFix(i)
		}
	case endDue:
		last := len(x.due) - 1
		if i != last {
			x.due[i] = x.due[last]
			x.due[i].endAt = int32(i)
		}
		x.due[last] = nil
		x.due = x.due[:last]
		if i != last {
			x.dueFix(i)
		}
	case endUnstarted:
		last := len(x.unstarted) - 1
		x.unstarted[i] = x.unstarted[last]
		x.unstarted[i].endAt = int32(i)
		x.unstarted[last] = nil
		x.unstarted = x.unstarted[:last]
	}
	t.endIn, t.endAt = endNone, 0
}

func aheadBefore(a, b endEntry) bool {
	if !a.end.Equal(b.end) {
		return a.end.Before(b.end)
	}
	return a.t.SubmitSeq < b.t.SubmitSeq
}

func (x *endIndex) aheadSwap(i, j int) {
	h := x.ahead
	h[i], h[j] = h[j], h[i]
	h[i].t.endAt, h[j].t.endAt = int32(i), int32(j)
}

func (x *endIndex) aheadUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !aheadBefore(x.ahead[i], x.ahead[p]) {
			return
		}
		x.aheadSwap(i, p)
		i = p
	}
}

func (x *endIndex) aheadFix(i int) {
	x.aheadUp(i)
	for n := len(x.ahead); ; {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && aheadBefore(x.ahead[r], x.ahead[l]) {
			j = r
		}
		if !aheadBefore(x.ahead[j], x.ahead[i]) {
			return
		}
		x.aheadSwap(i, j)
		i = j
	}
}

func (x *endIndex) duePush(t *Task) {
	t.endIn, t.endAt = endDue, int32(len(x.due))
	x.due = append(x.due, t)
	x.dueFix(int(t.endAt))
}

func (x *endIndex) dueSwap(i, j int) {
	h := x.due
	h[i], h[j] = h[j], h[i]
	h[i].endAt, h[j].endAt = int32(i), int32(j)
}

func (x *endIndex) dueFix(i int) {
	h := x.due
	for i > 0 {
		p := (i - 1) / 2
		if h[p].SubmitSeq <= h[i].SubmitSeq {
			break
		}
		x.dueSwap(i, p)
		i = p
	}
	for n := len(h); ; {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && h[r].SubmitSeq < h[l].SubmitSeq {
			j = r
		}
		if h[j].SubmitSeq >= h[i].SubmitSeq {
			return
		}
		x.dueSwap(i, j)
		i = j
	}
}

// clone copies the index onto the clone's tasks (same positions).
func (x *endIndex) clone(c *State) endIndex {
	out := endIndex{clock: x.clock, ahead: make([]endEntry, len(x.ahead)),
		due: make([]*Task, len(x.due)), unstarted: make([]*Task, len(x.unstarted))}
	for i, e := range x.ahead {
		out.ahead[i] = endEntry{e.end, c.Tasks[e.t.ID]}
	}
	for i, t := range x.due {
		out.due[i] = c.Tasks[t.ID]
	}
	for i, t := range x.unstarted {
		out.unstarted[i] = c.Tasks[t.ID]
	}
	return out
}

// mismatch checks the end index against the holders and the clock.
func (x *endIndex) mismatch(s *State) string {
	if n := len(x.ahead) + len(x.due) + len(x.unstarted); n != len(s.hold) {
		return sprint("end index: holders", len(s.hold), n)
	}
	if lt := s.LastTime.Round(0); !lt.Equal(x.clock) {
		return sprint("end index: clock", lt, x.clock)
	}
	for _, t := range s.hold {
		want := endUnstarted
		if !t.StartedAt.IsZero() {
			want = endAhead
			if !t.EstimatedEnd().After(x.clock) {
				want = endDue
			}
		}
		if t.endIn != want {
			return fmt.Sprintf("end index: %s in set %d, want %d", t.ID, t.endIn, want)
		}
		if t.StartedAt.After(x.clock) {
			return fmt.Sprintf("end index: %s started at %v, after the clock %v", t.ID, t.StartedAt, x.clock)
		}
		i := int(t.endAt)
		switch want {
		case endAhead:
			if i >= len(x.ahead) || x.ahead[i].t != t || !x.ahead[i].end.Equal(t.EstimatedEnd()) {
				return fmt.Sprintf("end index: %s not at %d of ahead with its end", t.ID, i)
			}
			if i > 0 && aheadBefore(x.ahead[i], x.ahead[(i-1)/2]) {
				return fmt.Sprintf("end index: ahead is not a heap at %d", i)
			}
		case endDue:
			if i >= len(x.due) || x.due[i] != t {
				return fmt.Sprintf("end index: %s not at %d of due", t.ID, i)
			}
			if i > 0 && x.due[i].SubmitSeq < x.due[(i-1)/2].SubmitSeq {
				return fmt.Sprintf("end index: due is not a heap at %d", i)
			}
		case endUnstarted:
			if i >= len(x.unstarted) || x.unstarted[i] != t {
				return fmt.Sprintf("end index: %s not at %d of unstarted", t.ID, i)
			}
		}
	}
	return ""
}

// EndsAsOf is the clock of the end index: the latest event time applied,
// on the wall clock. Every holder's StartedAt is at or before it.
func (s *State) EndsAsOf() time.Time { return s.ends.clock }

// Unstarted returns the tasks holding GPUs that have not started
// (StartedAt zero), in no order. The slice is shared: do not modify it.
func (s *State) Unstarted() []*Task { return s.ends.unstarted }

// EndCursor yields tasks of one set of the end index in order without
// changing the index: a frontier of heap positions, so the k first cost
// O(k log k). It is valid until the next Apply.
type EndCursor struct {
	s     *State
	due   bool
	front []int32 // min-heap of positions in the set's heap
}

// ByEstimatedEnd yields the started holders whose estimated end is after
// EndsAsOf, by estimated end (then SubmitSeq).
func (s *State) ByEstimatedEnd(buf []int32) EndCursor {
	c := EndCursor{s: s, front: buf[:0]}
	if len(s.ends.ahead) > 0 {
		c.front = append(c.front, 0)
	}
	return c
}

// DueBySeq yields the started holders whose estimated end is at or
// before EndsAsOf, by SubmitSeq.
func (s *State) DueBySeq(buf []int32) EndCursor {
	c := EndCursor{s: s, due: true, front: buf[:0]}
	if len(s.ends.due) > 0 {
		c.front = append(c.front, 0)
	}
	return c
}

// Buf returns the cursor's buffer, for reuse.
func (c *EndCursor) Buf() []int32 { return c.front }

func (c *EndCursor) less(i, j int32) bool {
	x := &c.s.ends
	if c.due {
		return x.due[i].SubmitSeq < x.due[j].SubmitSeq
	}
	return aheadBefore(x.ahead[i], x.ahead[j])
}

// More reports whether the cursor has a task left.
func (c *EndCursor) More() bool { return len(c.front) > 0 }

// Peek returns the next task and, for ByEstimatedEnd, its estimated end.
// Call it only when More.
func (c *EndCursor) Peek() (time.Time, *Task) {
	i := c.front[0]
	if c.due {
		return time.Time{}, c.s.ends.due[i]
	}
	e := c.s.ends.ahead[i]
	return e.end, e.t
}

// Next moves past the task Peek returns.
func (c *EndCursor) Next() {
	i := c.front[0]
	n := int32(len(c.s.ends.ahead))
	if c.due {
		n = int32(len(c.s.ends.due))
	}
	// Pop i from the frontier, push its children.
	h := c.front
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	c.front = h
	c.down(0)
	for _, k := range [2]int32{2*i + 1, 2*i + 2} {
		if k < n {
			c.front = append(c.front, k)
			c.up(len(c.front) - 1)
		}
	}
}

func (c *EndCursor) up(i int) {
	h := c.front
	for i > 0 {
		p := (i - 1) / 2
		if !c.less(h[i], h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (c *EndCursor) down(i int) {
	h := c.front
	for n := len(h); ; {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && c.less(h[r], h[l]) {
			j = r
		}
		if !c.less(h[j], h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}
