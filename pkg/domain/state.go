package domain

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

// State is the fold of the event log: everything a service knows.
type State struct {
	// Seq is the sequence of the last record applied.
	Seq   uint64
	Tasks map[string]*Task
	Nodes map[string]*Node
	// Owner maps a GPU UUID to the task holding it.
	Owner map[string]string
	// Idem maps team + "\x00" + idempotency key to the task id.
	Idem map[string]string
	// Skipped counts records no fold can apply (undecodable, unknown,
	// invalid data); Ignored counts facts that contradicted the state and
	// were not applied (first in log order wins). Apply says why for each.
	Skipped, Ignored int
	// Epoch is the newest scheduler leader epoch among the decisions
	// folded and EpochSeq the sequence of its first decision; a deposed
	// leader's decision is refused (see fence).
	Epoch, EpochSeq uint64
	// LastTime is the time of the last applied event: the fold's "now".
	LastTime time.Time

	q    queueIndex
	live map[string]*Task // tasks not finished, or still holding GPUs
	hold []*Task          // tasks holding GPUs, in no order (Task.holdAt is the position)

	nx      *nodeIndex       // free GPUs per node, sorted names, totals (index.go)
	cx      *cellIndex       // owner cell of every GPU UUID (cells.go); nil: none kept
	own     []string         // own[c]: Owner of the UUID of cell c (cells.go)
	team    map[string]int   // GPUs held per team
	pre     map[string]*Task // tasks holding GPUs in state Preempting
	victims int              // running preemptible non-CRITICAL tasks holding GPUs
	vic     victimNodes      // GPUs the victims hold, per node (index.go)
	yielded int              // tasks in state Preempting holding no GPUs (awaiting their requeue)
	ends    endIndex         // tasks holding GPUs by estimated end (ends.go)

	skip SkipCode // the code of the last record skipped (ApplyCoded)
}

// NewState returns an empty state.
func NewState() *State {
	return &State{Tasks: map[string]*Task{}, Nodes: map[string]*Node{}, Owner: map[string]string{}, Idem: map[string]string{},
		live: map[string]*Task{}, nx: &nodeIndex{}, cx: newCellIndex()}
}

// IdemKey is the key of the idempotency index.
func IdemKey(team, key string) string { return team + "\x00" + key }

// ApplyCoded is Apply with the code of why a record was skipped beside
// the text ("" and "" when it was applied): the code is what a reader
// decides on (audit verify), the text is for people and logs.
func (s *State) ApplyCoded(r events.Record) (SkipCode, string) {
	s.skip = ""
	why := s.Apply(r)
	if why == "" {
		return "", ""
	}
	return s.skip, why
}

// Apply folds one record into the state. It never fails: a record it
// cannot apply changes nothing but the counters and the expected sequence
// of the task its subject names, and Apply returns why it was skipped
// ("" when it was applied). Every service folds with Apply, so every
// service skips the same records for the same reasons (see Skip).
func (s *State) Apply(r events.Record) (skipped string) {
	if r.Seq > s.Seq {
		s.Seq = r.Seq
	}
	// The fold's clock is the log's own (the stream's stored timestamp);
	// a record without one (built in memory) carries the writer's.
	at := r.At()
	if at.After(s.LastTime) {
		s.LastTime = at
	}
	s.ends.advance(at)
	if why := events.SkipReason(r); why != "" {
		s.Skipped++
		s.skip = SkipUndecodable
		// JetStream's expected-sequence check counts every message on a
		// task's subjects, so the task's LastSeq must count this one too.
		if strings.HasPrefix(r.Subject, events.TaskPrefix) {
			if t := s.Tasks[r.Event.Key()]; t != nil && r.Seq > t.LastSeq {
				t.LastSeq = r.Seq
			}
		}
		return why
	}
	switch e := r.Event.(type) {
	case events.Submitted:
		return s.applySubmitted(r.Seq, r.Time, e)
	case events.Available:
		return s.applyAvailable(e)
	case events.Unhealthy:
		return s.applyUnhealthy(e)
	case events.Drained:
		return s.applyDrained(e)
	case events.Undrained:
		return s.applyUndrained(e)
	case events.Lost:
		return s.applyLost(r.Seq, e)
	}
	t := s.Tasks[r.Event.Key()]
	if t == nil {
		return s.ignore(SkipUnknownTask, fmt.Sprintf("%s: task %s was never submitted", r.Event.EventType(), r.Event.Key()))
	}
	t.LastSeq = r.Seq
	defer s.track(t)
	switch e := r.Event.(type) {
	case events.Amended:
		return s.applyAmended(t, e)
	case events.Cancelled:
		return s.applyCancelled(t, at, e)
	case events.ChecklistUpdated:
		return s.applyChecklistUpdated(t, e)
	case events.Dispatched:
		return s.applyDispatched(t, r.Seq, at, e)
	case events.Started:
		return s.applyStarted(t, at, e)
	case events.PreemptRequested:
		return s.applyPreemptRequested(t, r.Seq, at, e)
	case events.Checkpointed:
		return s.applyCheckpointed(t, at, e)
	case events.ProgressReported:
		return s.applyProgressReported(t, at, e)
	case events.Preempted:
		return s.applyPreempted(t, at, e)
	case events.Requeued:
		return s.applyRequeued(t, r.Seq, at, e)
	case events.Completed:
		return s.applyCompleted(t, at, e)
	case events.Failed:
		return s.applyFailed(t, at, e)
	}
	return ""
}

// applyAvailable folds available; it returns why it skipped the record ("" when applied).
func (s *State) applyAvailable(e events.Available) string {
	for _, g := range e.GPUs {
		if g.UUID == "" || g.MemoryMiB < 0 {
			return s.ignore(SkipInvalidData, "available: a GPU without a UUID or with negative memory")
		}
	}
	n := s.node(e.Node)
	n.GPUs = gpusFromEvent(e.GPUs)
	sort.SliceStable(n.GPUs, func(i, j int) bool { return n.GPUs[i].Index < n.GPUs[j].Index })
	s.assignCells(n)
	n.BootID = e.BootID
	if n.State != NodeDrained {
		n.State = NodeUp
	}
	n.Reason = ""
	s.nodeEvent(e.Node)
	return ""
}

// applyUnhealthy folds unhealthy; it returns why it skipped the record ("" when applied).
func (s *State) applyUnhealthy(e events.Unhealthy) string {
	n := s.node(e.Node)
	bad := map[string]bool{}
	for _, u := range e.GPUs {
		bad[u] = true
	}
	for i := range n.GPUs {
		if bad[n.GPUs[i].UUID] {
			n.GPUs[i].Healthy = false
		}
	}
	n.Reason = e.Reason
	s.nodeEvent(e.Node)
	return ""
}

// applyDrained folds drained; it returns why it skipped the record ("" when applied).
func (s *State) applyDrained(e events.Drained) string {
	n := s.node(e.Node)
	n.State, n.Reason, n.DrainPreempt = NodeDrained, e.Reason, e.Preempt
	s.nodeEvent(e.Node)
	return ""
}

// applyUndrained folds undrained; it returns why it skipped the record ("" when applied).
func (s *State) applyUndrained(e events.Undrained) string {
	n := s.Nodes[e.Node]
	if n == nil || n.State != NodeDrained {
		return s.ignore(SkipState, "undrained: node "+e.Node+" is not drained")
	}
	n.State, n.Reason, n.DrainPreempt = NodeUp, "", false
	s.nodeEvent(e.Node)
	return ""
}

// applyLost folds lost; it returns why it skipped the record ("" when applied).
func (s *State) applyLost(seq uint64, e events.Lost) string {
	if why := s.fence(seq, e.Epoch, e.BasedOnSeq); why != "" {
		return why
	}
	n := s.Nodes[e.Node]
	if n == nil {
		return s.ignore(SkipUnknownNode, "lost: node "+e.Node+" is not known")
	}
	n.State, n.Reason = NodeLost, e.Reason
	// A cancelled task still holding GPUs there has no agent left to
	// report its end: release it now.
	for _, t := range s.Tasks {
		if t.State == Cancelled && t.Holding && t.holdsOn(e.Node) {
			s.release(t)
			s.track(t)
		}
	}
	s.nodeEvent(e.Node)
	return ""
}

// applyAmended folds amended; it returns why it skipped the record ("" when applied).
func (s *State) applyAmended(t *Task, e events.Amended) string {
	if t.State.Terminal() {
		return s.ignore(SkipState, "amended: task is "+string(t.State))
	}
	// A value out of range (or a class this build does not know) leaves
	// its field unchanged.
	p, perr := ParsePriority(e.Priority)
	if e.GPUs > 0 {
		t.GPUs = e.GPUs
	}
	if perr == nil && p != t.Priority {
		old := t.Priority
		t.Priority = p
		if t.State == Queued {
			s.q.left(t, old)
			s.q.add(t)
		}
	}
	if e.Hours > 0 && !math.IsInf(e.Hours, 0) {
		t.Hours = e.Hours
	}
	if e.Hypothesis != "" {
		t.Hypothesis = e.Hypothesis
	}
	return ""
}

// applyCancelled folds cancelled; it returns why it skipped the record ("" when applied).
func (s *State) applyCancelled(t *Task, at time.Time, e events.Cancelled) string {
	switch t.State {
	case Completed, Failed, Cancelled:
		return s.ignore(SkipState, "cancelled: task is "+string(t.State)+" already")
	case Running, Preempting:
		t.Holding = t.HoldsGPUs()
	default:
		s.release(t)
	}
	if t.State == Queued {
		s.q.left(t, t.Priority)
	}
	t.State, t.EndedAt, t.Reason, t.ReasonCode = Cancelled, at, e.Reason, ""
	return ""
}

// applyChecklistUpdated folds checklist_updated; it returns why it skipped the record ("" when applied).
func (s *State) applyChecklistUpdated(t *Task, e events.ChecklistUpdated) string {
	if t.Checklist == nil {
		t.Checklist = map[string]bool{}
	}
	t.Checklist[e.Item] = e.Done
	return ""
}

// applyDispatched folds dispatched; it returns why it skipped the record ("" when applied).
func (s *State) applyDispatched(t *Task, seq uint64, at time.Time, e events.Dispatched) string {
	if why := s.fence(seq, e.Epoch, e.BasedOnSeq); why != "" {
		return why
	}
	if t.State != Queued {
		return s.ignore(SkipState, "dispatched: task is "+string(t.State)+", not queued")
	}
	if !s.canPlace(e.Placements) {
		return s.ignore(SkipPlacement, "dispatched: placements name GPUs that are unknown, held or repeated")
	}
	s.q.left(t, t.Priority)
	t.State, t.DispatchedAt, t.DispatchSeq = Dispatched, at, seq
	t.Placements = clonePlacements(e.Placements)
	t.Node = ""
	if len(e.Placements) > 0 {
		t.Node = e.Placements[0].Node
	}
	t.ResumeFrom = e.ResumeFrom
	t.ResumeStep = 0
	if e.ResumeFrom != "" && e.ResumeFrom == t.Checkpoint {
		t.ResumeStep = t.CheckpointStep
	}
	t.Reason, t.ReasonCode = e.Reason, ""
	t.PreemptFor, t.PreemptPolicy, t.PreemptAt = "", "", time.Time{}
	for _, p := range e.Placements {
		n := s.Nodes[p.Node]
		for _, g := range p.GPUs {
			s.setOwner(n, g, t.ID)
		}
	}
	s.placementsChanged(t.Placements)
	return ""
}

// applyStarted folds started; it returns why it skipped the record ("" when applied).
func (s *State) applyStarted(t *Task, at time.Time, e events.Started) string {
	if t.State != Dispatched {
		return s.ignore(SkipState, "started: task is "+string(t.State)+", not dispatched")
	}
	if why := s.fromNode(t, "started", e.Node); why != "" {
		return why
	}
	t.State, t.StartedAt, t.PID = Running, at, e.PID
	if t.FirstStarted.IsZero() {
		t.FirstStarted = at
	}
	return ""
}

// applyPreemptRequested folds preempt_requested; it returns why it skipped the record ("" when applied).
func (s *State) applyPreemptRequested(t *Task, seq uint64, at time.Time, e events.PreemptRequested) string {
	if why := s.fence(seq, e.Epoch, e.BasedOnSeq); why != "" {
		return why
	}
	if t.State != Running && t.State != Dispatched {
		return s.ignore(SkipState, "preempt_requested: task is "+string(t.State)+", not running")
	}
	t.State, t.PreemptFor, t.Reason, t.ReasonCode = Preempting, e.For, e.Reason, e.Cause()
	t.PreemptPolicy, t.PreemptAt = e.Policy, at
	return ""
}

// applyCheckpointed folds checkpointed; it returns why it skipped the record ("" when applied).
func (s *State) applyCheckpointed(t *Task, at time.Time, e events.Checkpointed) string {
	switch {
	case t.State == Dispatched, t.State == Running, t.State == Preempting:
	case t.State == Cancelled && t.HoldsGPUs():
	default:
		return s.ignore(SkipState, "checkpointed: task is "+string(t.State)+"; a checkpoint is accepted only while it runs")
	}
	t.Checkpoint, t.CheckpointAt, t.CheckpointStep = e.Ref, at, e.Step
	return ""
}

// applyProgressReported folds progress_reported; it returns why it skipped the record ("" when applied).
func (s *State) applyProgressReported(t *Task, at time.Time, e events.ProgressReported) string {
	if t.State != Running && t.State != Preempting {
		return s.ignore(SkipState, "progress_reported: task is "+string(t.State)+", not running")
	}
	if why := s.fromNode(t, "progress_reported", e.Node); why != "" {
		return why
	}
	if !(e.Fraction >= 0 && e.Fraction <= 1) || e.Step < 0 || e.Total < 0 || (e.Total > 0 && e.Step > e.Total) {
		return s.ignore(SkipInvalidData, fmt.Sprintf("progress_reported: step %d of %d, fraction %v out of range", e.Step, e.Total, e.Fraction))
	}
	t.ProgressStep, t.ProgressTotal, t.ProgressFraction, t.ProgressAt = e.Step, e.Total, e.Fraction, at
	return ""
}

// applyPreempted folds preempted; it returns why it skipped the record ("" when applied).
func (s *State) applyPreempted(t *Task, at time.Time, e events.Preempted) string {
	if !t.HoldsGPUs() {
		return s.ignore(SkipState, "preempted: task holds no GPUs (a duplicate or a stray report)")
	}
	if why := s.fromNode(t, "preempted", e.Node); why != "" {
		return why
	}
	if e.NotStarted {
		t.StartedAt = time.Time{} // no run: nothing to count
	}
	s.endRun(t, at)
	if e.Checkpoint != "" && e.Checkpoint != t.Checkpoint {
		t.Checkpoint, t.CheckpointStep = e.Checkpoint, 0
	}
	if t.State == Running || t.State == Dispatched {
		// Stopped by its node with no request of this attempt: the
		// node's reason is the preemption's.
		t.PreemptFor, t.PreemptPolicy, t.Reason, t.ReasonCode = "", "", e.Reason, ReasonNodeStopped
	}
	t.LostGPUSecs += e.LostGPUSeconds
	s.release(t)
	switch {
	case t.State == Cancelled:
	case e.NotStarted:
		// Back to the queue by the scheduler's requeued, with this
		// reason (decide), not counted as a preemption.
		t.State, t.PreemptFor, t.Reason, t.ReasonCode = Preempting, "", NotStartedReason(e.Node), ReasonNotStarted
	default:
		t.Preemptions++
		t.State = Preempting // until the scheduler's requeued
	}
	return ""
}

// applyRequeued folds requeued; it returns why it skipped the record ("" when applied).
func (s *State) applyRequeued(t *Task, seq uint64, at time.Time, e events.Requeued) string {
	if why := s.fence(seq, e.Epoch, e.BasedOnSeq); why != "" {
		return why
	}
	if t.State.Terminal() || t.State == Queued {
		return s.ignore(SkipState, "requeued: task is "+string(t.State))
	}
	s.endRun(t, at)
	s.release(t)
	t.State, t.Reason, t.ReasonCode = Queued, e.Reason, e.Cause()
	t.ResumeFrom = e.ResumeFrom
	s.q.add(t)
	t.Node, t.PID = "", 0
	return ""
}

// applyCompleted folds completed; it returns why it skipped the record ("" when applied).
func (s *State) applyCompleted(t *Task, at time.Time, e events.Completed) string {
	if why := s.fromNode(t, "completed", e.Node); why != "" {
		return why
	}
	return s.finish(t, at, Completed)
}

// applyFailed folds failed; it returns why it skipped the record ("" when applied).
func (s *State) applyFailed(t *Task, at time.Time, e events.Failed) string {
	if t.State != Cancelled && (t.State.Terminal() || t.State == Queued) {
		return s.ignore(SkipState, "failed: task is "+string(t.State))
	}
	if why := s.fromNode(t, "failed", e.Node); why != "" {
		return why
	}
	t.ExitCode, t.Error, t.StderrTail = e.ExitCode, e.Error, e.StderrTail
	return s.finish(t, at, Failed)
}

// ignore counts a fact that contradicts the state (first in log order
// wins) and returns why.
func (s *State) ignore(code SkipCode, why string) string {
	s.Ignored++
	s.skip = code
	return why
}

// fence refuses a scheduling decision of a deposed leader: one whose
// epoch (the lease's, see events.Dispatched.Epoch) is older than the
// newest this fold has seen, and which was decided on the log as it was
// before that epoch's first decision (based_on_seq) — the view of a leader
// that was paused or cut off while another took over. A decision cannot
// be based on its own or a later sequence. A newer epoch becomes the
// newest. Epoch 0, a log written before epochs, is accepted until the
// first fenced decision.
//
// The second condition keeps a forged decision with a huge epoch from
// fencing out the real leader for good: the leader's next decisions are
// based on a log that includes the forgery, so they are accepted. Who may
// write decisions at all is for the NATS server's permissions to decide.
func (s *State) fence(seq, epoch, based uint64) string {
	if based != 0 && seq != 0 && based >= seq {
		return s.ignore(SkipFenced, fmt.Sprintf("decision based on sequence %d, not before its own %d", based, seq))
	}
	if epoch < s.Epoch && based < s.EpochSeq {
		return s.ignore(SkipFenced, fmt.Sprintf("decision of leader epoch %d, based on sequence %d, before epoch %d decided at %d: a deposed leader",
			epoch, based, s.Epoch, s.EpochSeq))
	}
	if epoch > s.Epoch {
		s.Epoch, s.EpochSeq = epoch, seq
	}
	return ""
}

// fromNode refuses a lifecycle report about a task holding GPUs from a
// node the task is not placed on.
func (s *State) fromNode(t *Task, what, node string) string {
	if !t.HoldsGPUs() || t.holdsOn(node) {
		return ""
	}
	return s.ignore(SkipWrongNode, fmt.Sprintf("%s: reported by node %q, but the task runs on %s", what, node, t.Node))
}

// applySubmitted folds submitted; it returns why it skipped the record ("" when applied).
func (s *State) applySubmitted(seq uint64, logTime time.Time, e events.Submitted) string {
	if d, dup := s.Tasks[e.TaskID]; dup {
		if seq > d.LastSeq {
			d.LastSeq = seq // the stream's expected-sequence check counts it
		}
		return s.ignore(SkipDuplicate, "submitted: task "+e.TaskID+" exists already")
	}
	p, err := ParsePriority(e.Priority)
	if err != nil {
		p = Low // a class this build does not know waits as the lowest
	}
	switch {
	case e.GPUs < 1:
		return s.skipSubmit("gpus: must be ≥ 1")
	case e.Hours < 0 || math.IsNaN(e.Hours) || math.IsInf(e.Hours, 0):
		return s.skipSubmit("hours: must be a finite number ≥ 0")
	case e.GraceS < 0 || math.IsNaN(e.GraceS) || math.IsInf(e.GraceS, 0):
		return s.skipSubmit("grace_s: must be a finite number ≥ 0")
	case e.MinGPUMemMiB < 0:
		return s.skipSubmit("min_gpu_mem_mib: must be ≥ 0")
	}
	// The place in line is the log's time of the submission when the log
	// has one: a submitter whose clock is off moves nobody in the queue.
	subAt := e.SubmittedAt
	if !logTime.IsZero() {
		subAt = logTime
	}
	t := &Task{
		ID: e.TaskID, Name: e.Name, Team: e.Team, Priority: p, GPUs: e.GPUs, Hours: e.Hours,
		Hypothesis: e.Hypothesis, Command: e.Command, Preemptible: e.Preemptible, PreemptSignal: e.PreemptSignal,
		GraceS: e.GraceS, GPUModel: e.GPUModel, MinGPUMemMiB: e.MinGPUMemMiB, IdempotencyKey: e.IdempotencyKey,
		SubmittedAt: subAt, SubmitSeq: seq, State: Queued, LastSeq: seq, Dir: e.Dir, Notify: e.Notify,
	}
	if e.Deadline != nil {
		t.Deadline = *e.Deadline
	}
	s.Tasks[t.ID] = t
	s.track(t)
	s.q.add(t)
	if e.IdempotencyKey != "" {
		k := IdemKey(e.Team, e.IdempotencyKey)
		if _, ok := s.Idem[k]; !ok {
			s.Idem[k] = t.ID
		}
	}
	return ""
}

// skipSubmit refuses a submission whose data breaks a rule no submitter
// lets through. The task does not exist, so a later valid submission
// of the same id may still create it.
func (s *State) skipSubmit(why string) string {
	s.Skipped++
	s.skip = SkipInvalidData
	return "submitted: invalid data: " + why
}

func (s *State) finish(t *Task, at time.Time, to TaskState) string {
	if t.State == Cancelled {
		s.endRun(t, at)
		s.release(t)
		return ""
	}
	if t.State.Terminal() || t.State == Queued {
		return s.ignore(SkipState, fmt.Sprintf("%s: task is %s", to, t.State))
	}
	s.endRun(t, at)
	s.release(t)
	t.State, t.EndedAt = to, at
	return ""
}

func (s *State) endRun(t *Task, at time.Time) {
	if !t.StartedAt.IsZero() && at.After(t.StartedAt) {
		t.RunSeconds += at.Sub(t.StartedAt).Seconds()
	}
	t.StartedAt = time.Time{}
}

func (s *State) release(t *Task) {
	for _, p := range t.Placements {
		n := s.Nodes[p.Node]
		for _, g := range p.GPUs {
			// Owner[g], read through its cell when it has one.
			c := s.cellOf(n, g)
			var o string
			if c >= 0 {
				o = s.own[c]
			} else {
				o = s.Owner[g]
			}
			if o == t.ID {
				delete(s.Owner, g)
				if c >= 0 {
					s.own[c] = ""
				}
			}
		}
	}
	if t.Placements != nil {
		s.placementsChanged(t.Placements)
	}
	t.Placements, t.Holding = nil, false
}

// canPlace: every GPU exists on a known node, is not held, appears once.
func (s *State) canPlace(ps []events.Placement) bool {
	if len(ps) == 0 {
		return false
	}
	total := 0
	for _, p := range ps {
		n := s.Nodes[p.Node]
		if n == nil || len(p.GPUs) == 0 {
			return false
		}
		cells := s.cellsOf(n)
		for _, g := range p.GPUs {
			if i := n.gpuAt(g); i < 0 || s.ownerAt(n, cells, i) != "" {
				return false
			}
		}
		total += len(p.GPUs)
	}
	return !repeats(ps, total)
}

// repeats reports whether a GPU appears twice in ps, which hold total GPUs.
func repeats(ps []events.Placement, total int) bool {
	if total > 64 {
		seen := make(map[string]bool, total)
		for _, p := range ps {
			for _, g := range p.GPUs {
				if seen[g] {
					return true
				}
				seen[g] = true
			}
		}
		return false
	}
	var prev [64]string // no allocation for a usual placement
	k := 0
	for _, p := range ps {
		for _, g := range p.GPUs {
			for _, h := range prev[:k] {
				if g == h {
					return true
				}
			}
			prev[k] = g
			k++
		}
	}
	return false
}

// gpuAt returns the position of uuid in n.GPUs, -1 when n lacks it.
func (n *Node) gpuAt(uuid string) int {
	for i := range n.GPUs {
		if n.GPUs[i].UUID == uuid {
			return i
		}
	}
	return -1
}

func (s *State) node(name string) *Node {
	n := s.Nodes[name]
	if n == nil {
		n = &Node{Name: name, State: NodeUp}
		s.Nodes[name] = n
	}
	return n
}

// FreeGPUs lists the node's healthy GPUs that no task holds, by index.
func (s *State) FreeGPUs(n *Node) []GPU {
	var out []GPU
	cells := s.cellsOf(n)
	for i, g := range n.GPUs {
		if g.Healthy && s.ownerAt(n, cells, i) == "" {
			out = append(out, g)
		}
	}
	return out
}

// track keeps the live index (tasks not finished or still holding GPUs)
// and the index of tasks holding GPUs. The task's flags say which index
// holds it, so an event that changes neither touches no map.
func (s *State) track(t *Task) {
	if s.live == nil {
		s.live = map[string]*Task{}
	}
	if live := !t.State.Terminal() || t.HoldsGPUs(); live != t.inLive {
		if live {
			s.live[t.ID] = t
		} else {
			delete(s.live, t.ID)
		}
		t.inLive = live
	}
	if hold := t.HoldsGPUs(); hold != t.inHold {
		if hold {
			t.holdAt = len(s.hold)
			s.hold = append(s.hold, t)
		} else {
			last := s.hold[len(s.hold)-1]
			s.hold[t.holdAt], last.holdAt = last, t.holdAt
			s.hold[len(s.hold)-1] = nil
			s.hold = s.hold[:len(s.hold)-1]
		}
		t.inHold = hold
	}
	s.trackHolders(t)
	s.trackEnd(t)
}

// Live returns the number of tasks not finished or still holding GPUs.
func (s *State) Live() int { return len(s.live) }

// EachActive calls fn for every task holding GPUs, in no particular order.
func (s *State) EachActive(fn func(*Task)) {
	for _, t := range s.hold {
		fn(t)
	}
}

// Active returns the tasks holding GPUs, in submit order.
func (s *State) Active() []*Task {
	out := make([]*Task, 0, len(s.hold))
	for _, t := range s.hold {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SubmitSeq < out[j].SubmitSeq })
	return out
}

// NodeNames returns node names sorted.
func (s *State) NodeNames() []string {
	return append([]string(nil), s.SortedNodes()...)
}

// TotalGPUs counts healthy GPUs on schedulable nodes.
func (s *State) TotalGPUs() (total, free int) {
	if s.nx != nil {
		return s.nx.totals.Healthy, s.nx.freeCount
	}
	for _, n := range s.Nodes {
		if !n.Schedulable() {
			continue
		}
		for _, g := range n.GPUs {
			if g.Healthy {
				total++
				if s.Owner[g.UUID] == "" {
					free++
				}
			}
		}
	}
	return total, free
}

// Clone returns a deep copy; what-ifs run on clones.
func (s *State) Clone() *State {
	c := &State{Seq: s.Seq, Skipped: s.Skipped, Ignored: s.Ignored, LastTime: s.LastTime, Epoch: s.Epoch, EpochSeq: s.EpochSeq,
		Tasks: make(map[string]*Task, len(s.Tasks)), Nodes: make(map[string]*Node, len(s.Nodes)),
		Owner: make(map[string]string, len(s.Owner)), Idem: make(map[string]string, len(s.Idem))}
	slab := make([]Task, len(s.Tasks)) // one allocation for every task
	i := 0
	for k, v := range s.Tasks {
		v.cloneInto(&slab[i])
		c.Tasks[k] = &slab[i]
		i++
	}
	s.cloneIndexes(c)
	return c
}

// CloneLive returns a copy holding only the live tasks (not finished, or
// still holding GPUs) and every node: what a forward simulation needs,
// at a cost that does not grow with the log's history.
func (s *State) CloneLive() *State {
	c := &State{Seq: s.Seq, LastTime: s.LastTime, Epoch: s.Epoch, EpochSeq: s.EpochSeq, Tasks: make(map[string]*Task, len(s.live)),
		Nodes: make(map[string]*Node, len(s.Nodes)), Owner: make(map[string]string, len(s.Owner)), Idem: map[string]string{}}
	slab := make([]Task, len(s.live)) // one allocation for every task
	c.live = make(map[string]*Task, len(s.live))
	i := 0
	for k, v := range s.live {
		v.cloneInto(&slab[i])
		c.Tasks[k] = &slab[i]
		c.live[k] = &slab[i]
		i++
	}
	s.cloneIndexes(c)
	return c
}

func (s *State) cloneIndexes(c *State) {
	if c.live == nil { // CloneLive built it with the tasks
		c.live = make(map[string]*Task, len(s.live))
		for k := range s.live {
			c.live[k] = c.Tasks[k]
		}
	}
	c.hold = make([]*Task, len(s.hold))
	for i, t := range s.hold {
		c.hold[i] = c.Tasks[t.ID] // same position: holdAt holds
	}
	c.ends = s.ends.clone(c)
	for p := range s.q.lists {
		if len(s.q.lists[p]) == 0 {
			continue
		}
		l := make([]qentry, 0, len(s.q.lists[p]))
		for _, e := range s.q.lists[p] {
			if e.live(Priority(p)) {
				l = append(l, qentry{c.Tasks[e.t.ID], e.gen})
			}
		}
		c.q.lists[p] = l
	}
	// The nodes and their GPU lists are cut from one allocation each (as
	// Node.Clone, each list its own: cap == len, so an append copies).
	nodes := make([]Node, len(s.Nodes))
	ng := 0
	for _, v := range s.Nodes {
		ng += len(v.GPUs)
	}
	gpus := make([]GPU, 0, ng)
	i := 0
	for k, v := range s.Nodes {
		n := &nodes[i]
		i++
		*n = *v
		n.GPUs = nil
		if len(v.GPUs) > 0 {
			a := len(gpus)
			gpus = append(gpus, v.GPUs...)
			n.GPUs = gpus[a:len(gpus):len(gpus)]
		}
		c.Nodes[k] = n
	}
	if len(c.Owner) == 0 && s.Owner != nil {
		c.Owner = maps.Clone(s.Owner)
	} else {
		for k, v := range s.Owner {
			c.Owner[k] = v
		}
	}
	if s.nx != nil {
		c.nx = s.nx.clone()
	}
	if s.cx != nil {
		s.cx.shared.Store(true) // either state copies it before adding to it
		c.cx, c.own = s.cx, slices.Clone(s.own)
	}
	if s.team != nil {
		c.team = maps.Clone(s.team)
	} else {
		c.team = make(map[string]int)
	}
	c.pre = make(map[string]*Task, len(s.pre))
	for k := range s.pre {
		c.pre[k] = c.Tasks[k]
	}
	c.victims = s.victims
	c.vic = s.vic.clone()
	c.yielded = s.yielded
	if len(c.Idem) == 0 && len(c.Tasks) == len(s.Tasks) {
		for k, v := range s.Idem {
			c.Idem[k] = v
		}
	}
}

// InState returns the tasks in one state, in submit order.
func (s *State) InState(st TaskState) []*Task {
	var out []*Task
	tasks := s.live
	if st.Terminal() {
		tasks = s.Tasks
	}
	for _, t := range tasks {
		if t.State == st {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SubmitSeq < out[j].SubmitSeq })
	return out
}
