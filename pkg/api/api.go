// Package api is gpuq's request/reply contract over NATS, shared by the
// submitter (server side) and the gpuq CLI (client side), plus the JSON
// views of tasks that the CLI and the HTTP API print.
//
// Requests go to gpuq.api.v1.<op> (queue group "submitter"); every reply is
// a Reply: either a result or {"error": "...", "field": "..."}. A reply with
// a Field is the caller's fault (CLI exit code 2, HTTP 400, or 409 when the
// task's state does not allow the operation, e.g. a checkpoint of a queued
// task); without one it is the server's (exit 1, HTTP 5xx) or NotFound
// (HTTP 404). Status, when set, is the HTTP status the same answer has over
// HTTP: any 4xx is a refusal (CLI exit 2, or 3 for a task not found), with
// a field or without (a team's credentials asking for an admin's
// operation: 403).
package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/gpuq/gpuq/pkg/domain"
)

// Subjects of the request/reply API.
const (
	SubjectPrefix = "gpuq.api.v1."
	OpSubmit      = "submit"
	OpShow        = "show"
	OpQueue       = "queue"
	OpCancel      = "cancel"
	OpAmend       = "amend"
	OpChecklist   = "checklist"
	OpHistory     = "history"
	OpCheckpoint  = "checkpoint"
	QueueGroup    = "submitter"
	// TeamPrefix scopes the API to a team: a request on
	// gpuq.api.v1.team.<team>.<op> acts for that team only (the submitter
	// refuses other teams' tasks with 403), and the NATS server lets only
	// that team's users (auth role ci-<team>) and the admin publish there.
	TeamPrefix = SubjectPrefix + "team."
	// JobPrefix is the job API: a request on
	// gpuq.api.v1.job.<node>.<task>.<run>.<op> (JobSubject) acts for one run
	// of one task, the one dispatched at sequence <run> and started on
	// <node>; the submitter answers it only while that run is the task's
	// and it is running or being preempted. A job's own credential (minted
	// by its agent, pkg/auth) may publish there and nowhere else.
	JobPrefix = SubjectPrefix + "job."
)

// JobOps are the operations of the job API.
var JobOps = []string{OpCheckpoint, OpHistory}

// JobSubject is the job API subject of op for one run of a task.
func JobSubject(node, task string, run uint64, op string) string {
	return fmt.Sprintf("%s%s.%s.%d.%s", JobPrefix, node, task, run, op)
}

// Job names the run a job credential acts for (Client.Job).
type Job struct {
	Node string
	Task string
	Run  uint64
}

// Subject is the subject of op, scoped to team when team is not "".
func Subject(team, op string) string {
	if team == "" {
		return SubjectPrefix + op
	}
	return TeamPrefix + team + "." + op
}

// Reply is the envelope of every answer.
type Reply struct {
	Result   json.RawMessage `json:"result,omitempty"`
	Error    string          `json:"error,omitempty"`
	Field    string          `json:"field,omitempty"`
	NotFound bool            `json:"not_found,omitempty"`
	Status   int             `json:"status,omitempty"`
	// Next, on a page of a paginated answer (queue), is the cursor of the
	// next page (the request's after); "" on the last page.
	Next string `json:"next,omitempty"`
}

// SubmitReply answers a submit.
type SubmitReply struct {
	TaskID    string `json:"task_id"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Seq       uint64 `json:"seq"`
}

// IDRequest names one task.
type IDRequest struct {
	TaskID string `json:"task_id"`
	By     string `json:"by,omitempty"`
}

// QueueRequest lists tasks, one page at a time: at most Limit tasks
// (0: QueuePage; more than QueuePage: refused) and at most QueuePageBytes
// of them, the first after the task After names (""; from the start).
// The reply's Next is the After of the next page. A task that changes
// group between two pages (starts, ends) may be listed twice or not at
// all: each page is a view of the queue as it is when it is asked for.
type QueueRequest struct {
	All   bool   `json:"all,omitempty"`
	Limit int    `json:"limit,omitempty"`
	After string `json:"after,omitempty"`
}

// Queue pages: a page holds at most QueuePage tasks and, encoded, at most
// QueuePageBytes (but always one task), well under NATS's default 1 MiB
// maximum payload.
const (
	QueuePage      = 1000
	QueuePageBytes = 512 << 10
)

// AmendRequest changes a queued task without losing its place.
type AmendRequest struct {
	TaskID     string  `json:"task_id"`
	GPUs       int     `json:"gpus,omitempty"`
	Priority   string  `json:"priority,omitempty"`
	Hours      float64 `json:"hours,omitempty"`
	Hypothesis string  `json:"hypothesis,omitempty"`
}

// ChecklistRequest marks a playbook item.
type ChecklistRequest struct {
	TaskID string `json:"task_id"`
	Item   string `json:"item"`
	Done   bool   `json:"done"`
}

// CheckpointRequest reports a checkpoint the task's job saved. It is
// accepted only while the task is running or preempting.
type CheckpointRequest struct {
	TaskID string `json:"task_id"`
	Ref    string `json:"ref"`
	// Step is the training step the checkpoint holds (0: not given).
	Step int64 `json:"step,omitempty"`
}

// MaxCheckpointRef bounds CheckpointRequest.Ref, in bytes (Linux's PATH_MAX).
const MaxCheckpointRef = 4096

// Validate checks the ref; the task id and state are the server's to check.
// The ref is kept as given: it reaches the next run as GPUQ_RESUME_FROM, so
// it must be usable as an environment variable's value.
func (r CheckpointRequest) Validate() error {
	if strings.TrimSpace(r.Ref) == "" {
		return &domain.FieldError{Field: "ref", Rule: "must not be empty: say where the checkpoint was saved"}
	}
	if len(r.Ref) > MaxCheckpointRef {
		return &domain.FieldError{Field: "ref", Rule: fmt.Sprintf("must be at most %d bytes (got %d)", MaxCheckpointRef, len(r.Ref))}
	}
	if r.Step < 0 {
		return &domain.FieldError{Field: "step", Rule: fmt.Sprintf("must be at least 0 (got %d)", r.Step)}
	}
	for i, c := range r.Ref {
		if unicode.IsControl(c) {
			return &domain.FieldError{Field: "ref", Rule: fmt.Sprintf("must not contain control characters (got %q at byte %d)", c, i)}
		}
	}
	return nil
}

// CheckpointReply answers an accepted checkpoint: Seq is the sequence of
// its checkpointed event, State the task's state when it was accepted.
type CheckpointReply struct {
	TaskID string `json:"task_id"`
	Ref    string `json:"ref"`
	Seq    uint64 `json:"seq"`
	State  string `json:"state"`
}

// TaskView is a task as people and scripts see it.
type TaskView struct {
	TaskID       string          `json:"task_id"`
	Name         string          `json:"name"`
	Team         string          `json:"team"`
	Priority     string          `json:"priority"`
	GPUs         int             `json:"gpus"`
	Hours        float64         `json:"hours"`
	Hypothesis   string          `json:"hypothesis"`
	Command      string          `json:"command"`
	Preemptible  bool            `json:"preemptible"`
	GPUModel     string          `json:"gpu_model,omitempty"`
	State        string          `json:"state"`
	Node         string          `json:"node,omitempty"`
	Placements   []PlacementView `json:"placements,omitempty"`
	SubmittedAt  time.Time       `json:"submitted_at"`
	StartedAt    *time.Time      `json:"started_at,omitempty"`
	EndedAt      *time.Time      `json:"ended_at,omitempty"`
	ExitCode     *int            `json:"exit_code,omitempty"`
	Error        string          `json:"error,omitempty"`
	StderrTail   string          `json:"stderr_tail,omitempty"`
	Reason       string          `json:"reason,omitempty"`
	Preemptions  int             `json:"preemptions"`
	Checkpoint   string          `json:"checkpoint,omitempty"`
	ResumeFrom   string          `json:"resume_from,omitempty"`
	LostGPUHours float64         `json:"lost_gpu_hours,omitempty"`
	Checklist    map[string]bool `json:"checklist,omitempty"`
	// Deadline is the finish-by time (gpuq submit --deadline); Notify the
	// task's own webhook destinations (gpuq submit --notify).
	Deadline *time.Time `json:"deadline,omitempty"`
	Notify   []string   `json:"notify,omitempty"`
	// LogNode and LogPath: where the task's output is (the node of its
	// latest start, and the file there); `show` only.
	LogNode string `json:"log_node,omitempty"`
	LogPath string `json:"log_path,omitempty"`
	Seq     uint64 `json:"seq"`

	// Progress is the latest progress the running task's job reported
	// (its task socket's POST /v1/progress), while it holds GPUs.
	Progress *ProgressView `json:"progress,omitempty"`
	// PredictedEnd is when the running task is predicted to end (the P50
	// of the run-time predictor the scheduler uses, its progress
	// included), and PredictedBasis what that rests on ("progress 40 %",
	// "learned from 120 runs of team vision", …); `show` only.
	PredictedEnd   *time.Time `json:"predicted_end,omitempty"`
	PredictedBasis string     `json:"predicted_basis,omitempty"`
}

// ProgressView is a job's latest progress report: Step of Total when it
// gave them (else 0), Fraction always, At when it was recorded.
type ProgressView struct {
	Step     int64     `json:"step"`
	Total    int64     `json:"total"`
	Fraction float64   `json:"fraction"`
	At       time.Time `json:"at"`
}

// PlacementView is a part of a task on one node.
type PlacementView struct {
	Node string   `json:"node"`
	GPUs []string `json:"gpus"`
}

// View renders a task.
func View(t *domain.Task) TaskView {
	v := TaskView{
		TaskID: t.ID, Name: t.Name, Team: t.Team, Priority: t.Priority.String(), GPUs: t.GPUs, Hours: t.Hours,
		Hypothesis: t.Hypothesis, Command: t.Command, Preemptible: t.Preemptible, GPUModel: t.GPUModel,
		State: string(t.State), Node: t.Node, SubmittedAt: t.SubmittedAt, Error: t.Error, StderrTail: t.StderrTail, Reason: reason(t),
		Preemptions: t.Preemptions, Checkpoint: t.Checkpoint, ResumeFrom: t.ResumeFrom,
		LostGPUHours: t.LostGPUSecs / 3600, Seq: t.LastSeq,
	}
	if len(t.Checklist) > 0 {
		v.Checklist = make(map[string]bool, len(t.Checklist))
		for k, b := range t.Checklist {
			v.Checklist[k] = b
		}
	}
	if !t.Deadline.IsZero() {
		d := t.Deadline
		v.Deadline = &d
	}
	if len(t.Notify) > 0 {
		v.Notify = append([]string(nil), t.Notify...)
	}
	for _, p := range t.Placements {
		v.Placements = append(v.Placements, PlacementView{Node: p.Node, GPUs: append([]string(nil), p.GPUs...)})
	}
	if !t.FirstStarted.IsZero() {
		s := t.FirstStarted
		v.StartedAt = &s
	}
	if t.State.Terminal() {
		e := t.EndedAt
		v.EndedAt = &e
		if t.State == domain.Failed || t.State == domain.Completed {
			c := t.ExitCode
			v.ExitCode = &c
		}
	}
	if t.State == domain.Queued {
		v.Node = ""
	}
	if !t.ProgressAt.IsZero() && t.HoldsGPUs() && !t.StartedAt.IsZero() && !t.ProgressAt.Before(t.StartedAt) {
		v.Progress = &ProgressView{Step: t.ProgressStep, Total: t.ProgressTotal, Fraction: t.ProgressFraction, At: t.ProgressAt}
	}
	return v
}

// reason is the task's reason as its state says it: the last decision's
// while it is queued, placed or being preempted, or cancelled; how it
// ended once it completed or failed (a failed task's last decision, its
// placement, says nothing of why it failed).
func reason(t *domain.Task) string {
	switch t.State {
	case domain.Completed:
		return fmt.Sprintf("completed: exit code %d", t.ExitCode)
	case domain.Failed:
		if t.Error != "" {
			return "failed: " + t.Error
		}
		return fmt.Sprintf("failed: exit code %d", t.ExitCode)
	}
	return t.Reason
}

// HistoryEntry is one event of a task's history.
type HistoryEntry struct {
	Seq         uint64          `json:"seq"`
	Type        string          `json:"type"`
	Time        time.Time       `json:"time"`
	ID          string          `json:"id"`
	CausationID string          `json:"causation_id,omitempty"`
	Data        json.RawMessage `json:"data"`
}

// Advisor operations (queue group "advisor").
const (
	OpEstimate        = "estimate"
	OpStats           = "stats"
	AdvisorQueueGroup = "advisor"
)

// EstimateRequest asks for a task's advice, or for a what-if: the advice
// the task would have with another GPU count or class, changing nothing.
type EstimateRequest struct {
	TaskID         string `json:"task_id"`
	WhatIfGPUs     int    `json:"what_if_gpus,omitempty"`
	WhatIfPriority string `json:"what_if_priority,omitempty"`
}

// TaskIDRule is what a task id in a request must be.
const TaskIDRule = "must be a task id as submit gives it: a UUID in lower case, such as 0190a5b2-3c4d-7e8f-9a0b-1c2d3e4f5a6b"

// IsTaskID reports whether id has the shape of the ids submit mints: a
// UUID in its canonical text form, in lower case (36 characters).
func IsTaskID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// CheckTaskID refuses a request's task id that is empty or not of the
// shape IsTaskID says, naming the field task_id.
func CheckTaskID(id string) error {
	if id == "" {
		return &domain.FieldError{Field: "task_id", Rule: "is required"}
	}
	if !IsTaskID(id) {
		got := id
		if len(got) > 40 {
			got = got[:40] + "…"
		}
		return &domain.FieldError{Field: "task_id", Rule: fmt.Sprintf("%s (got %q)", TaskIDRule, got)}
	}
	return nil
}
