package events

import (
	"strings"
	"time"
)

// Type is an event's stable wire name: past tense, the last token of its subject.
type Type string

// Task events, on gpuq.task.<task_id>.<type>.
const (
	TypeSubmitted        Type = "submitted"
	TypeAmended          Type = "amended"
	TypeCancelled        Type = "cancelled"
	TypeChecklistUpdated Type = "checklist_updated"
	TypeDispatched       Type = "dispatched"
	TypeStarted          Type = "started"
	TypePreemptRequested Type = "preempt_requested"
	TypeCheckpointed     Type = "checkpointed"
	TypePreempted        Type = "preempted"
	TypeRequeued         Type = "requeued"
	TypeCompleted        Type = "completed"
	TypeFailed           Type = "failed"
	TypeProgressReported Type = "progress_reported"
)

// Node events, on gpuq.node.<node>.<type>.
const (
	TypeAvailable Type = "available"
	TypeUnhealthy Type = "unhealthy"
	TypeDrained   Type = "drained"
	TypeUndrained Type = "undrained"
	TypeLost      Type = "lost"
)

// The fast decoder of each event type below is generated from this file
// (fastdecode_gen.go): after changing a type, run `go generate
// ./pkg/events`. A string field tagged `fastdecode:"text"` is unique to
// its event (an id, a command, free text) and is copied, not interned.

// Event is one fact. Key is the task id or node name its subject carries.
type Event interface {
	EventType() Type
	Key() string
}

// Submitted: a task entered the queue. SubmittedAt is its place in line for
// its whole life, across amendments and preemptions.
type Submitted struct {
	TaskID         string    `json:"task_id" fastdecode:"text"`
	Name           string    `json:"name" fastdecode:"text"`
	Team           string    `json:"team"`
	Priority       string    `json:"priority"`
	GPUs           int       `json:"gpus"`
	Hours          float64   `json:"hours"`
	Hypothesis     string    `json:"hypothesis" fastdecode:"text"`
	Command        string    `json:"command" fastdecode:"text"`
	Preemptible    bool      `json:"preemptible"`
	PreemptSignal  string    `json:"preempt_signal,omitempty"`
	GraceS         float64   `json:"grace_s,omitempty"`
	GPUModel       string    `json:"gpu_model,omitempty"`
	MinGPUMemMiB   int       `json:"min_gpu_mem_mib,omitempty"`
	IdempotencyKey string    `json:"idempotency_key,omitempty" fastdecode:"text"`
	SubmittedAt    time.Time `json:"submitted_at"`
	// Env and Dir are the submitter's environment (filtered, see
	// domain.Request) and working directory, for the job.
	Env map[string]string `json:"env,omitempty"`
	Dir string            `json:"dir,omitempty"`
	// Deadline is the finish-by time the submitter asked for (gpuq submit
	// --deadline), absolute; absent when none. The notifier warns
	// (deadline_at_risk) when the P90 start plus the predicted run passes it.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Notify lists the task's own webhook destinations (gpuq submit
	// --notify), which get this task's notices; absent when none.
	Notify []string `json:"notify,omitempty"`
}

// Amended: some of a queued task's fields changed; it keeps its place.
// Zero values mean "unchanged".
type Amended struct {
	TaskID     string  `json:"task_id" fastdecode:"text"`
	GPUs       int     `json:"gpus,omitempty"`
	Priority   string  `json:"priority,omitempty"`
	Hours      float64 `json:"hours,omitempty"`
	Hypothesis string  `json:"hypothesis,omitempty" fastdecode:"text"`
}

// Cancelled: a person or CI withdrew the task. By is who: the credential
// that asked (auth.Caller.Name: "admin", "team:<team>") when the
// submitter authenticates its callers, else what the caller said; Note is
// what the caller said about it when By is its credential (absent in
// records written before the field, and without auth).
type Cancelled struct {
	TaskID string `json:"task_id" fastdecode:"text"`
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	Note   string `json:"note,omitempty"`
}

// ChecklistUpdated: a waiting-playbook item was marked done (or undone).
type ChecklistUpdated struct {
	TaskID string `json:"task_id" fastdecode:"text"`
	Item   string `json:"item"`
	Done   bool   `json:"done"`
}

// Placement is a part of a task on one node.
type Placement struct {
	Node string   `json:"node"`
	GPUs []string `json:"gpus"` // GPU UUIDs
}

// Dispatched: the scheduler placed the task. BasedOnSeq is the last log
// sequence the decision saw; ResumeFrom is the checkpoint to resume from.
type Dispatched struct {
	TaskID     string      `json:"task_id" fastdecode:"text"`
	Placements []Placement `json:"placements"`
	BasedOnSeq uint64      `json:"based_on_seq"`
	ResumeFrom string      `json:"resume_from,omitempty" fastdecode:"text"`
	Reason     string      `json:"reason,omitempty"`
	Backfill   bool        `json:"backfill,omitempty"`
	// Epoch is the deciding leader's lease epoch: the fold refuses a
	// decision of an epoch older than the newest it has seen, so a leader
	// that was paused past its lease decides nothing (0: unfenced).
	Epoch uint64 `json:"epoch,omitempty"`
}

// Started: an agent started the task's process.
type Started struct {
	TaskID string `json:"task_id" fastdecode:"text"`
	Node   string `json:"node"`
	PID    int    `json:"pid"`
	LogDir string `json:"log_dir,omitempty" fastdecode:"text"`
}

// PreemptRequested: the scheduler asked the task to checkpoint and yield.
type PreemptRequested struct {
	TaskID     string  `json:"task_id" fastdecode:"text"`
	For        string  `json:"for" fastdecode:"text"`
	Policy     string  `json:"policy"`
	Reason     string  `json:"reason" fastdecode:"text"`
	GraceS     float64 `json:"grace_s"`
	BasedOnSeq uint64  `json:"based_on_seq"`
	Epoch      uint64  `json:"epoch,omitempty"` // as Dispatched.Epoch
	// Code is why, for readers that decide on it (audit verify): one of
	// the Preempt* codes. Records written before codes have none: Cause
	// reads them.
	Code string `json:"code,omitempty"`
}

// Codes of PreemptRequested: why a task is preempted.
const (
	PreemptByClass   = "class"         // for a higher class, under the policy named
	PreemptReclaim   = "reclaim"       // for a team below its guarantee, reclaiming GPUs borrowed
	PreemptDrain     = "drain"         // its node drained with --preempt
	PreemptUnhealthy = "gpu_unhealthy" // a GPU it holds turned unhealthy
)

// Cause is Code, or, for a record written before codes, the code its
// policy and reason imply: the one place where old records' text is read
// (reclaims said "team guarantee"; drains and unhealthy GPUs had their
// own policy names).
func (e PreemptRequested) Cause() string {
	switch {
	case e.Code != "":
		return e.Code
	case e.Policy == "drain":
		return PreemptDrain
	case e.Policy == "gpu-unhealthy":
		return PreemptUnhealthy
	case strings.Contains(e.Reason, "team guarantee"):
		return PreemptReclaim
	}
	return PreemptByClass
}

// Checkpointed: the job saved a checkpoint it can resume from. Step is
// the training step it holds, when the job said (0: not given).
type Checkpointed struct {
	TaskID string `json:"task_id" fastdecode:"text"`
	Ref    string `json:"ref" fastdecode:"text"`
	Step   int64  `json:"step,omitempty"`
}

// Preempted: the task's process has exited after a preemption request.
// Forced is true when it had to be killed; LostGPUSeconds is the work since
// its last checkpoint. NotStarted: the task's node gives its GPUs back
// because its process never started (the agent stopped between appending
// started and starting it: no run of it is recorded there); nothing ran,
// nothing was lost, and the task goes back to the queue like a preempted
// one, not counted as a preemption.
type Preempted struct {
	TaskID         string  `json:"task_id" fastdecode:"text"`
	Node           string  `json:"node"`
	Checkpoint     string  `json:"checkpoint,omitempty" fastdecode:"text"`
	Forced         bool    `json:"forced,omitempty"`
	LostGPUSeconds float64 `json:"lost_gpu_seconds,omitempty"`
	ExitCode       int     `json:"exit_code"`
	// Reason says why the node stopped a run no preemption request of
	// this attempt asked to stop (its agent cut off from NATS or shut
	// down, a GPU failed); empty after a request.
	Reason     string `json:"reason,omitempty" fastdecode:"text"`
	NotStarted bool   `json:"not_started,omitempty"`
}

// Requeued: the task went back to the queue at its original place.
type Requeued struct {
	TaskID     string `json:"task_id" fastdecode:"text"`
	Reason     string `json:"reason" fastdecode:"text"`
	ResumeFrom string `json:"resume_from,omitempty" fastdecode:"text"`
	Epoch      uint64 `json:"epoch,omitempty"`        // as Dispatched.Epoch
	BasedOnSeq uint64 `json:"based_on_seq,omitempty"` // as Dispatched.BasedOnSeq
	// Code is why, for readers that decide on it (metrics): RequeueNodeLost
	// or RequeuePreempted. Records written before codes have none: Cause
	// reads them.
	Code string `json:"code,omitempty"`
}

// Codes of Requeued.
const (
	RequeuePreempted = "preempted" // after a preemption (or a process that never started)
	RequeueNodeLost  = "node_lost" // its node was lost
)

// Cause is Code, or, for a record written before codes, the code its
// reason implies (a lost node's requeue said "node N lost").
func (e Requeued) Cause() string {
	switch {
	case e.Code != "":
		return e.Code
	case strings.HasPrefix(e.Reason, "node ") && strings.HasSuffix(e.Reason, " lost"):
		return RequeueNodeLost
	}
	return RequeuePreempted
}

// Completed: the task's process exited 0.
type Completed struct {
	TaskID string `json:"task_id" fastdecode:"text"`
	Node   string `json:"node"`
}

// Failed: the task's process exited non-zero, or could not start.
type Failed struct {
	TaskID     string `json:"task_id" fastdecode:"text"`
	Node       string `json:"node,omitempty"`
	ExitCode   int    `json:"exit_code"`
	Error      string `json:"error,omitempty" fastdecode:"text"`
	StderrTail string `json:"stderr_tail,omitempty" fastdecode:"text"`
}

// ProgressReported: the job reported its progress through its task socket;
// the agent of its node records it when it moved, at most once per
// interval (--progress-every). Step of Total, or a Fraction in [0, 1]
// alone; Fraction is always set.
type ProgressReported struct {
	TaskID   string  `json:"task_id" fastdecode:"text"`
	Node     string  `json:"node"`
	Step     int64   `json:"step,omitempty"`
	Total    int64   `json:"total,omitempty"`
	Fraction float64 `json:"fraction"`
}

// GPU is one device of a node's inventory, as NVML reports it.
type GPU struct {
	UUID      string `json:"uuid"`
	Index     int    `json:"index"`
	Model     string `json:"model"`
	MemoryMiB int    `json:"memory_mib"`
	Healthy   bool   `json:"healthy"`
}

// Available: a node's inventory, published by its agent on start and on change.
type Available struct {
	Node     string `json:"node"`
	GPUs     []GPU  `json:"gpus"`
	FreeGPUs int    `json:"free_gpus"`
	BootID   string `json:"boot_id,omitempty"`
	Driver   string `json:"driver,omitempty"`
}

// Unhealthy: GPUs NVML marked unhealthy (e.g. a critical Xid error).
type Unhealthy struct {
	Node   string   `json:"node"`
	GPUs   []string `json:"gpus"`
	Reason string   `json:"reason"`
}

// Drained: an operator took the node out of scheduling. Running tasks
// finish; with Preempt the scheduler preempts the preemptible ones
// politely, and they resume elsewhere.
type Drained struct {
	Node    string `json:"node"`
	Reason  string `json:"reason,omitempty"`
	By      string `json:"by,omitempty"`
	Preempt bool   `json:"preempt,omitempty"`
}

// Undrained: an operator put a drained node back into scheduling.
type Undrained struct {
	Node   string `json:"node"`
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}

// Lost: the node missed its heartbeats for longer than the node timeout.
type Lost struct {
	Node       string `json:"node"`
	Reason     string `json:"reason"`
	Epoch      uint64 `json:"epoch,omitempty"`        // as Dispatched.Epoch
	BasedOnSeq uint64 `json:"based_on_seq,omitempty"` // as Dispatched.BasedOnSeq
}

func (Submitted) EventType() Type        { return TypeSubmitted }
func (Amended) EventType() Type          { return TypeAmended }
func (Cancelled) EventType() Type        { return TypeCancelled }
func (ChecklistUpdated) EventType() Type { return TypeChecklistUpdated }
func (Dispatched) EventType() Type       { return TypeDispatched }
func (Started) EventType() Type          { return TypeStarted }
func (PreemptRequested) EventType() Type { return TypePreemptRequested }
func (Checkpointed) EventType() Type     { return TypeCheckpointed }
func (Preempted) EventType() Type        { return TypePreempted }
func (Requeued) EventType() Type         { return TypeRequeued }
func (Completed) EventType() Type        { return TypeCompleted }
func (Failed) EventType() Type           { return TypeFailed }
func (ProgressReported) EventType() Type { return TypeProgressReported }
func (Available) EventType() Type        { return TypeAvailable }
func (Unhealthy) EventType() Type        { return TypeUnhealthy }
func (Drained) EventType() Type          { return TypeDrained }
func (Undrained) EventType() Type        { return TypeUndrained }
func (Lost) EventType() Type             { return TypeLost }

func (e Submitted) Key() string        { return e.TaskID }
func (e Amended) Key() string          { return e.TaskID }
func (e Cancelled) Key() string        { return e.TaskID }
func (e ChecklistUpdated) Key() string { return e.TaskID }
func (e Dispatched) Key() string       { return e.TaskID }
func (e Started) Key() string          { return e.TaskID }
func (e PreemptRequested) Key() string { return e.TaskID }
func (e Checkpointed) Key() string     { return e.TaskID }
func (e Preempted) Key() string        { return e.TaskID }
func (e Requeued) Key() string         { return e.TaskID }
func (e Completed) Key() string        { return e.TaskID }
func (e Failed) Key() string           { return e.TaskID }
func (e ProgressReported) Key() string { return e.TaskID }
func (e Available) Key() string        { return e.Node }
func (e Unhealthy) Key() string        { return e.Node }
func (e Drained) Key() string          { return e.Node }
func (e Undrained) Key() string        { return e.Node }
func (e Lost) Key() string             { return e.Node }

// Unknown is what Decode returns for a type or schema version this build
// does not know. Folds skip it (and count it); it is never an error, so an
// old reader survives a newer writer.
type Unknown struct {
	Type    Type
	Version int
	K       string
	Raw     []byte
}

func (u Unknown) EventType() Type { return u.Type }
func (u Unknown) Key() string     { return u.K }
