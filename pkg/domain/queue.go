package domain

import "sort"

// queueIndex keeps the queued tasks in queue order incrementally: one list
// per class, each sorted by (SubmittedAt, SubmitSeq). Entries are removed
// lazily: an entry is live while its task is queued and the entry's
// generation is the task's current one (a requeue or a class change adds a
// fresh entry and makes the old one stale). An entry going stale is found
// (by binary search) and marked with generation 0, so that a walk skips it
// without reading its task. Lists are compacted when more than half of
// their entries are stale.
type queueIndex struct {
	lists [Critical + 1][]qentry
	stale [Critical + 1]int
}

type qentry struct {
	t   *Task
	gen uint32
}

func (e qentry) live(p Priority) bool {
	return e.gen != 0 && e.t.State == Queued && e.t.qgen == e.gen && e.t.Priority == p
}

// add enqueues t at its place: by submit time within its class.
func (q *queueIndex) add(t *Task) {
	if !t.Priority.Valid() {
		return
	}
	t.qgen++
	if t.qgen == 0 { // 0 marks a stale entry
		t.qgen++
	}
	l := q.lists[t.Priority]
	e := qentry{t, t.qgen}
	n := len(l)
	if n == 0 || inLine(l[n-1].t, t) {
		q.lists[t.Priority] = append(l, e)
		return
	}
	i := sort.Search(n, func(i int) bool { return inLine(t, l[i].t) })
	l = append(l, qentry{})
	copy(l[i+1:], l[i:])
	l[i] = e
	q.lists[t.Priority] = l
}

// left marks t's entry in class p stale: t is leaving the queue or the
// class, and is still queued in class p with its entry's generation.
func (q *queueIndex) left(t *Task, p Priority) {
	if !p.Valid() {
		return
	}
	l := q.lists[p]
	for i := sort.Search(len(l), func(i int) bool { return !inLine(l[i].t, t) }); i < len(l) && !inLine(t, l[i].t); i++ {
		if l[i].t == t && l[i].gen == t.qgen {
			l[i].gen = 0
			break
		}
	}
	q.stale[p]++
	if q.stale[p] > 64 && q.stale[p]*2 > len(q.lists[p]) {
		l := q.lists[p][:0]
		for _, e := range q.lists[p] {
			if e.live(p) {
				l = append(l, e)
			}
		}
		for i := len(l); i < len(q.lists[p]); i++ {
			q.lists[p][i] = qentry{}
		}
		q.lists[p], q.stale[p] = l, 0
	}
}

// walk calls fn for each queued task in queue order until fn returns false.
// An entry is live iff its generation is not 0 (left marks every entry
// going stale; IndexMismatch checks it), so the walk reads no task it
// skips.
func (q *queueIndex) walk(fn func(*Task) bool) {
	for p := Critical; p >= Low; p-- {
		for _, e := range q.lists[p] {
			if e.gen != 0 && !fn(e.t) {
				return
			}
		}
	}
}

// WalkQueued calls fn for each queued task in queue order (class rank, then
// submit time, then log order) until fn returns false. It costs nothing
// beyond the tasks visited: the order is kept incrementally by the fold.
func (s *State) WalkQueued(fn func(*Task) bool) { s.q.walk(fn) }

// Queued returns the queued tasks in queue order.
func (s *State) Queued() []*Task {
	var out []*Task
	s.q.walk(func(t *Task) bool { out = append(out, t); return true })
	return out
}

// inLine orders a class list: submit time, then log order. It ignores the
// class, which stale entries of a task that changed class no longer share.
func inLine(a, b *Task) bool {
	if !a.SubmittedAt.Equal(b.SubmittedAt) {
		return a.SubmittedAt.Before(b.SubmittedAt)
	}
	return a.SubmitSeq < b.SubmitSeq
}

// QueueCursor walks one class of the queue in queue order (submit time,
// then log order), skipping stale entries. It reads the fold's index as it
// is: use it while the state does not change.
type QueueCursor struct {
	l []qentry
	i int
}

// QueueClass starts a cursor over the queued tasks of class p.
func (s *State) QueueClass(p Priority) QueueCursor {
	if !p.Valid() {
		return QueueCursor{}
	}
	return QueueCursor{l: s.q.lists[p]}
}

// Peek returns the cursor's task, nil at the end.
func (c *QueueCursor) Peek() *Task {
	for c.i < len(c.l) && c.l[c.i].gen == 0 {
		c.i++
	}
	if c.i == len(c.l) {
		return nil
	}
	return c.l[c.i].t
}

// Next moves past the task Peek returned.
func (c *QueueCursor) Next() { c.i++ }

// InLine reports whether a is ahead of b within a class: submit time,
// then log order.
func InLine(a, b *Task) bool { return inLine(a, b) }
