package audit

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// Causes of a wait, in Explanation.Parts: pkg/alarm's, which the advisor's
// alarm adds up the same way (alarm.CauseOf).
const (
	CauseCapacity      = alarm.CauseCapacity
	CauseAhead         = alarm.CauseAhead
	CauseReservation   = alarm.CauseReservation
	CauseFragmentation = alarm.CauseFragmentation
	CauseConstraint    = alarm.CauseConstraint
	CauseNode          = alarm.CauseNode
	CausePreempted     = alarm.CausePreempted
	CauseNoScheduler   = alarm.CauseNoScheduler
	CauseStarting      = alarm.CauseStarting
)

// Explanation is the breakdown of a task's whole wait: `gpuq explain --json`.
type Explanation struct {
	TaskID string `json:"task_id"`
	State  string `json:"state"`
	// WaitedS is every second between its submission and its first
	// start, and between each preemption and the next start, up to the
	// last record of the log while it still waits. Parts add up to it.
	WaitedS float64 `json:"waited_s"`
	// Waiting: it still waited at the log's last record.
	Waiting bool `json:"waiting"`
	// Parts: one per cause, the longest first, with the tasks that
	// blocked it (in the order they first did).
	Parts []Part `json:"parts"`
	// Spans: the wait in log order, a span per sequence range with one
	// cause and the same blockers.
	Spans []Span `json:"spans"`
	// Tasks describes every task named in Blocking: class and team.
	Tasks map[string]Blocker `json:"tasks,omitempty"`
}

// Part is the time of one cause.
type Part struct {
	Cause    string   `json:"cause"`
	S        float64  `json:"s"`
	Blocking []string `json:"blocking"`
}

// Span is one stretch of the wait with one cause and the same blockers.
type Span struct {
	Cause    string    `json:"cause"`
	S        float64   `json:"s"`
	Blocking []string  `json:"blocking"`
	FromSeq  uint64    `json:"from_seq"`
	ToSeq    uint64    `json:"to_seq"` // the record that ended it (the last record while it still waits)
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Reason   string    `json:"reason,omitempty"` // the policy's reason code
}

// Blocker describes a blocking task.
type Blocker struct {
	Priority string `json:"priority"`
	Team     string `json:"team"`
	Name     string `json:"name,omitempty"`
}

// ErrNotFound: the log has no submission of the task.
var ErrNotFound = fmt.Errorf("audit: task not found")

// Explain folds the whole log and breaks down the task's wait. At every
// record while the task waits it runs the one policy on the state there,
// at the log's time of the record, and takes the policy's own reason for
// the task (policy.Wait) as the cause of the time until the next record.
func Explain(recs []events.Record, pol *policy.Policy, taskID string) (Explanation, error) {
	f := newFolder()
	ex := Explanation{TaskID: taskID, Parts: []Part{}, Spans: []Span{}}
	var (
		waiting      bool
		cur          Span
		last         time.Time
		lastSeq      uint64
		seen         bool
		afterPreempt bool
	)
	for _, r := range recs {
		at := r.At()
		if waiting && at.After(last) {
			ex.add(&cur, last, at, r.Seq)
		}
		if at.After(last) {
			last = at
		}
		lastSeq = r.Seq
		why := f.apply(r)
		t := f.st.Tasks[taskID]
		if t == nil {
			continue
		}
		seen = true
		if why != "" && waiting {
			continue // nothing changed
		}
		if p, ok := r.Event.(events.Preempted); ok && p.TaskID == taskID && why == "" {
			afterPreempt = true
		}
		var cause, reason string
		var blocking []string
		switch t.State {
		case domain.Queued:
			if afterPreempt {
				cause, blocking = CausePreempted, nonEmpty(t.PreemptFor)
				break
			}
			if !waiting || relevant(r.Event) {
				cause, reason, blocking = causeOf(f, pol, t)
			} else {
				cause, reason, blocking = cur.Cause, cur.Reason, cur.Blocking
			}
		case domain.Dispatched:
			cause = CauseStarting
			if afterPreempt {
				cause, blocking = CausePreempted, nonEmpty(t.PreemptFor)
			}
		case domain.Preempting:
			// Its process stopped; or it is yielding before it ever started.
			if !t.HoldsGPUs() || t.StartedAt.IsZero() {
				cause, blocking = CausePreempted, nonEmpty(t.PreemptFor)
			}
		case domain.Running:
			afterPreempt = false
		}
		if cause == "" {
			if waiting {
				ex.flush(&cur)
			}
			waiting = false
			continue
		}
		if waiting && (cause != cur.Cause || !slices.Equal(blocking, cur.Blocking)) {
			ex.flush(&cur)
		}
		if !waiting || cur.Cause == "" {
			cur = Span{Cause: cause, Reason: reason, Blocking: blocking, FromSeq: r.Seq, From: at.UTC()}
		}
		waiting = true
	}
	if !seen {
		return Explanation{}, fmt.Errorf("%w: %s", ErrNotFound, taskID)
	}
	if waiting {
		cur.ToSeq = lastSeq
		ex.flush(&cur)
		ex.Waiting = true
	}
	ex.State = string(f.st.Tasks[taskID].State)
	ex.summarise(f.st)
	return ex, nil
}

// add extends the current span to to, at the record seq that ends this
// stretch.
func (ex *Explanation) add(cur *Span, from, to time.Time, seq uint64) {
	d := to.Sub(from).Seconds()
	cur.S += d
	cur.To = to.UTC()
	cur.ToSeq = seq
	ex.WaitedS += d
}

func (ex *Explanation) flush(cur *Span) {
	if cur.Cause != "" && (cur.S > 0 || cur.ToSeq > cur.FromSeq) {
		if cur.To.IsZero() {
			cur.To = cur.From
		}
		if cur.Blocking == nil {
			cur.Blocking = []string{}
		}
		ex.Spans = append(ex.Spans, *cur)
	}
	*cur = Span{}
}

// summarise groups the spans by cause, longest first, and describes the
// blockers.
func (ex *Explanation) summarise(st *domain.State) {
	idx := map[string]int{}
	for _, s := range ex.Spans {
		i, ok := idx[s.Cause]
		if !ok {
			i = len(ex.Parts)
			idx[s.Cause] = i
			ex.Parts = append(ex.Parts, Part{Cause: s.Cause, Blocking: []string{}})
		}
		p := &ex.Parts[i]
		p.S += s.S
		for _, b := range s.Blocking {
			if !contains(p.Blocking, b) {
				p.Blocking = append(p.Blocking, b)
			}
		}
	}
	// Longest first; ties keep their first appearance.
	for i := 1; i < len(ex.Parts); i++ {
		for j := i; j > 0 && ex.Parts[j].S > ex.Parts[j-1].S; j-- {
			ex.Parts[j], ex.Parts[j-1] = ex.Parts[j-1], ex.Parts[j]
		}
	}
	for _, p := range ex.Parts {
		for _, b := range p.Blocking {
			if t := st.Tasks[b]; t != nil {
				if ex.Tasks == nil {
					ex.Tasks = map[string]Blocker{}
				}
				ex.Tasks[b] = Blocker{Priority: t.Priority.String(), Team: t.Team, Name: t.Name}
			}
		}
	}
}

// relevant: a record that can change a queued task's reason. A checklist
// item, a checkpoint or a progress report cannot.
func relevant(e events.Event) bool {
	switch e.(type) {
	case events.ChecklistUpdated, events.Checkpointed, events.ProgressReported:
		return false
	}
	return true
}

// causeOf is the policy's reason for a queued task at the fold's state,
// as a cause (alarm.CauseOf, the alarm's own mapping).
func causeOf(f *folder, pol *policy.Policy, t *domain.Task) (cause, reason string, blocking []string) {
	return alarm.CauseOf(f.st, f.plan(pol), t)
}

func nonEmpty(id string) []string {
	if id == "" {
		return []string{}
	}
	return []string{id}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// Text is the explanation in one line, e.g. "waited 3h12m: 2h05m behind
// 01a2… (high, team nlp) for capacity, 40m fragmentation, 27m after
// preemption".
func (ex Explanation) Text() string {
	var b strings.Builder
	verb := "waited"
	if ex.Waiting {
		verb = "has waited"
	}
	fmt.Fprintf(&b, "%s %s", verb, dur(ex.WaitedS))
	if len(ex.Parts) == 0 {
		return b.String()
	}
	b.WriteString(":")
	for i, p := range ex.Parts {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s ", dur(p.S))
		who := ex.who(p.Blocking)
		switch p.Cause {
		case CausePreempted:
			b.WriteString("after preemption")
			if who != "" {
				b.WriteString(" for " + who)
			}
		case CauseNoScheduler:
			b.WriteString("startable, waiting for the scheduler")
		case CauseStarting:
			b.WriteString("starting on its node")
		default:
			if who != "" {
				fmt.Fprintf(&b, "behind %s for %s", who, p.Cause)
			} else {
				b.WriteString(p.Cause)
			}
		}
	}
	return b.String()
}

func (ex Explanation) who(ids []string) string {
	var parts []string
	for i, id := range ids {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("%d more", len(ids)-3))
			break
		}
		s := id
		if bl, ok := ex.Tasks[id]; ok {
			s = fmt.Sprintf("%s (%s, team %s)", id, bl.Priority, bl.Team)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// dur writes seconds as 3h12m, 40m00s, 27s, 5.6s, 12ms or <1ms.
func dur(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d >= 10*time.Second:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d >= time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return "<1ms"
}
