package domain

import (
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

// TaskState is where a task is in its life. Wire names are stable.
type TaskState string

// Task states.
const (
	Queued     TaskState = "queued"
	Dispatched TaskState = "dispatched"
	Running    TaskState = "running"
	Preempting TaskState = "preempting"
	Completed  TaskState = "completed"
	Failed     TaskState = "failed"
	Cancelled  TaskState = "cancelled"
)

// Terminal reports whether the state is final.
func (s TaskState) Terminal() bool { return s == Completed || s == Failed || s == Cancelled }

// Checklist items of the waiting playbook, in the order they are advised.
const (
	ItemCodeReview     = "code_review"
	ItemExperimentPlan = "experiment_plan"
	ItemDocumentation  = "documentation"
)

// ChecklistItems lists the playbook in order.
var ChecklistItems = []string{ItemCodeReview, ItemExperimentPlan, ItemDocumentation}

// Task is the folded state of one task.
type Task struct {
	ID             string
	Name           string
	Team           string
	Priority       Priority
	GPUs           int
	Hours          float64
	Hypothesis     string
	Command        string
	Preemptible    bool
	PreemptSignal  string
	GraceS         float64
	GPUModel       string
	MinGPUMemMiB   int
	IdempotencyKey string
	// Dir is the submitter's working directory. The exported environment
	// is not folded: it stays in the submitted event (at SubmitSeq), which
	// the agent reads when it starts the task (events.ReadSubmitted), so
	// that a queued task costs no memory for it.
	Dir string
	// Deadline is the finish-by time the submitter asked for (zero:
	// none); Notify the task's own webhook destinations.
	Deadline time.Time
	Notify   []string

	// SubmittedAt is the task's place in line; it never changes.
	SubmittedAt time.Time
	SubmitSeq   uint64

	State      TaskState
	Placements []events.Placement // current placement, while dispatched/running/preempting
	// Holding: the task's GPUs are still held although the task is
	// cancelled, until its agent reports the process gone.
	Holding bool

	DispatchedAt time.Time
	DispatchSeq  uint64
	StartedAt    time.Time // of the current run
	FirstStarted time.Time // of the first run; zero if never started
	EndedAt      time.Time
	Node         string // first placement's node, for display
	PID          int

	Checkpoint   string
	CheckpointAt time.Time
	// CheckpointStep is the step of Checkpoint when the job said (0: not
	// given); ResumeStep that of ResumeFrom, as of the dispatch.
	CheckpointStep int64
	ResumeFrom     string
	ResumeStep     int64
	Preemptions    int
	// PreemptFor, PreemptPolicy and PreemptAt are the preemption request
	// of the current attempt (its preemptor, the policy that decided it,
	// and when): a dispatch clears them, so that nothing of an earlier
	// attempt's request is taken for this one's.
	PreemptFor    string
	PreemptPolicy string
	PreemptAt     time.Time
	// Progress is the latest progress its job reported (progress_reported;
	// ProgressAt zero: none).
	ProgressStep, ProgressTotal int64
	ProgressFraction            float64
	ProgressAt                  time.Time
	LostGPUSecs                 float64
	RunSeconds                  float64 // accumulated over finished runs (preempted or ended)

	ExitCode   int
	Error      string
	StderrTail string
	Reason     string // last reason recorded by a decision
	// ReasonCode is the code beside Reason, for readers that decide on
	// it (the Reason* codes, or the events' Preempt* and Requeue* codes
	// of the request or requeue that set it; "" for others).
	ReasonCode string

	Checklist map[string]bool

	// LastSeq is the sequence of the task's last event: the expected
	// sequence for a writer that must not act on stale task state.
	LastSeq uint64

	qgen uint32 // queue index generation
	// inLive and inHold: the task is in its State's live and holding
	// indexes (see State.track). A clone is in its clone's indexes.
	inLive, inHold bool
	holdAt         int // position in State.hold while inHold
	// held, inPre, inVictim: the GPUs counted for the task's team, and
	// whether it is in the preempting index and counted as a victim (see
	// State.trackHolders).
	held            int
	inPre, inVictim bool
	// vicPls: the placements counted in State.vic while inVictim.
	vicPls []events.Placement
	// inYielded: counted in State.yielded (see State.trackHolders).
	inYielded bool
	// endIn, endAt: the task's set in the end index and its position
	// there (see endIndex).
	endIn uint8
	endAt int32
}

// GPUUUIDs lists every GPU of the current placement.
func (t *Task) GPUUUIDs() []string {
	var out []string
	for _, p := range t.Placements {
		out = append(out, p.GPUs...)
	}
	return out
}

// HoldsGPUs reports whether the task currently owns GPUs.
func (t *Task) HoldsGPUs() bool { return len(t.Placements) > 0 }

// Before is the queue order: higher class first, then earlier submission,
// then log order. It is total and deterministic.
func (t *Task) Before(u *Task) bool {
	if t.Priority != u.Priority {
		return t.Priority > u.Priority
	}
	if !t.SubmittedAt.Equal(u.SubmittedAt) {
		return t.SubmittedAt.Before(u.SubmittedAt)
	}
	return t.SubmitSeq < u.SubmitSeq
}

// Clone returns a deep copy.
func (t *Task) Clone() *Task {
	c := new(Task)
	t.cloneInto(c)
	return c
}

// cloneInto makes c a deep copy of t.
func (t *Task) cloneInto(c *Task) {
	*c = *t
	c.Placements = clonePlacements(t.Placements)
	c.vicPls = nil
	if t.inVictim { // counted with its placements as they are (trackHolders)
		c.vicPls = c.Placements
	}
	if t.Checklist != nil {
		c.Checklist = make(map[string]bool, len(t.Checklist))
		for k, v := range t.Checklist {
			c.Checklist[k] = v
		}
	}
}

// clonePlacements copies ps; the GPU lists share one allocation.
func clonePlacements(ps []events.Placement) []events.Placement {
	if ps == nil {
		return nil
	}
	n := 0
	for _, p := range ps {
		n += len(p.GPUs)
	}
	all := make([]string, 0, n)
	out := make([]events.Placement, len(ps))
	for i, p := range ps {
		out[i].Node = p.Node
		if p.GPUs != nil {
			start := len(all)
			all = append(all, p.GPUs...)
			out[i].GPUs = all[start:len(all):len(all)]
		}
	}
	return out
}

func (t *Task) holdsOn(node string) bool {
	for _, p := range t.Placements {
		if p.Node == node {
			return true
		}
	}
	return false
}

// notStartedPrefix begins NotStartedReason.
const notStartedPrefix = "not started on "

// NotStartedReason is the reason of a task whose node reported its
// process never started (events.Preempted.NotStarted): it goes back to
// the queue for it.
func NotStartedReason(node string) string {
	return notStartedPrefix + node + ": its agent stopped between recording the start and starting the process; nothing ran"
}

// Codes of Task.ReasonCode set by a node's report (the others are the
// codes of the events that set the reason).
const (
	// ReasonNotStarted: the task's process never started on its node
	// (events.Preempted.NotStarted); it goes back to the queue.
	ReasonNotStarted = "not_started"
	// ReasonNodeStopped: its node stopped a run no request asked to stop.
	ReasonNodeStopped = "node_stopped"
)

// NotStarted reports whether t yields its GPUs because its process never
// started (NotStartedReason).
func (t *Task) NotStarted() bool {
	return t.State == Preempting && t.PreemptFor == "" && t.ReasonCode == ReasonNotStarted
}
