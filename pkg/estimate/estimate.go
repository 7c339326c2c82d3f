package estimate

import (
	"time"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/domain"
)

// SeedFormula is the source document's wait estimate, kept as the baseline
// to beat: the estimated hours of queued tasks of strictly higher class,
// divided by the parallel capacity (free GPUs, or total/2 when none are
// free), at least half an hour. It ignores running tasks, GPU counts, order
// within a class and that estimates are wrong.
func SeedFormula(s *domain.State, t *domain.Task) time.Duration {
	var hours float64
	for _, u := range s.Tasks {
		if u.State == domain.Queued && u.ID != t.ID && u.Priority > t.Priority {
			hours += u.Hours
		}
	}
	total, free := s.TotalGPUs()
	capacity := float64(free)
	if free == 0 {
		capacity = float64(total) / 2
	}
	if capacity < 1 {
		capacity = 1
	}
	h := hours / capacity
	if h < 0.5 {
		h = 0.5
	}
	return time.Duration(h * float64(time.Hour))
}

// Action is one step of the waiting playbook.
type Action struct {
	Item string // checklist item, or "wait_calmly"
	Text string
}

// WaitCalmly is the action once preparation is done.
const WaitCalmly = "wait_calmly"

// ChangeRequest is the action for a task no node could ever hold: waiting
// will not help.
const ChangeRequest = "change_request"

var actionText = map[string]string{
	domain.ItemCodeReview:     "Review the code: check the training script for bugs, the config, and the data pipeline.",
	domain.ItemExperimentPlan: "Plan the experiments: set priorities, the resources for the next runs, and a fallback plan.",
	domain.ItemDocumentation:  "Document: update the experiment log and archive old tasks.",
	WaitCalmly:                "Preparation done: wait calmly for the GPUs — stop refreshing, you will be notified.",
}

// NextAction is the first playbook item not yet done.
func NextAction(t *domain.Task) Action {
	for _, it := range domain.ChecklistItems {
		if !t.Checklist[it] {
			return Action{Item: it, Text: actionText[it]}
		}
	}
	return Action{Item: WaitCalmly, Text: actionText[WaitCalmly]}
}

// Advice is what gpuq tells a waiting person, on gpuq.advice.<task_id>.
type Advice struct {
	TaskID      string       `json:"task_id"`
	State       string       `json:"state"`
	Position    int          `json:"position"`
	P50WaitS    float64      `json:"p50_wait_s"`
	P90WaitS    float64      `json:"p90_wait_s"`
	P50Start    time.Time    `json:"p50_start"`
	P90Start    time.Time    `json:"p90_start"`
	Method      string       `json:"method"`
	Basis       string       `json:"basis"`
	Reason      string       `json:"reason"`
	Blockers    []string     `json:"blockers"`
	Action      string       `json:"action"`
	ActionText  string       `json:"action_text"`
	Alert       string       `json:"alert"`
	Suggestions []Suggestion `json:"suggestions"`
	BasedOnSeq  uint64       `json:"based_on_seq"`
	At          time.Time    `json:"at"`
	// RunS is the predicted run (the predictor's median of what the task
	// is still to run), in seconds: with P90Start, when it would end.
	RunS float64 `json:"run_s,omitempty"`
	// Deadline is the task's finish-by time (gpuq submit --deadline);
	// DeadlineAtRisk says that the P90 start plus the predicted run passes
	// it (or that the task cannot start), DeadlineReason how
	// (DeadlineRisk).
	Deadline       *time.Time `json:"deadline,omitempty"`
	DeadlineAtRisk bool       `json:"deadline_at_risk,omitempty"`
	DeadlineReason string     `json:"deadline_reason,omitempty"`

	// Late: the wait passed 2× the estimate at submission, classified
	// (pkg/alarm): an alarm (Alert is its text) naming the broken cause
	// and whom to tell, or the legitimate reason of a revised estimate.
	Late *alarm.Verdict `json:"late,omitempty"`
}
