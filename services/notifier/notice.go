package notifier

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// Notice types: the "type" of a notification on the wire. Names are
// constants, never derived from Go names; the list grows only at the end.
const (
	StartsSoon       = "starts_soon"
	ETAChanged       = "eta_changed"
	PreemptRequested = "preempt_requested"
	Started          = "started"
	Completed        = "completed"
	Failed           = "failed"
	Alert            = "alert"
	Test             = "test" // gpuq notify test; never decided from the log
	Suggestion       = "suggestion"
	DeadlineAtRisk   = "deadline_at_risk"
)

// Types lists every notice type a destination may ask for.
var Types = []string{StartsSoon, ETAChanged, PreemptRequested, Started, Completed, Failed, Alert, Test, Suggestion, DeadlineAtRisk}

// Notice is one notification, as a destination receives it (the POST's
// JSON body). Text is one human sentence: Slack's incoming webhooks show
// it as is.
type Notice struct {
	ID       string    `json:"id"`
	Type     string    `json:"type"`
	TaskID   string    `json:"task_id"`
	TaskName string    `json:"task_name"`
	Team     string    `json:"team"`
	Seq      uint64    `json:"seq"` // the log sequence it follows from (advice: the one the advice is based on)
	Time     time.Time `json:"time"`
	Text     string    `json:"text"`
	// Attempt counts the task's starts before this notice (0: never
	// started yet); a requeued task waits again in its next attempt.
	Attempt int `json:"attempt"`

	P50Start       *time.Time `json:"p50_start,omitempty"`
	P90Start       *time.Time `json:"p90_start,omitempty"`
	PrevP50Start   *time.Time `json:"previous_p50_start,omitempty"`
	Reason         string     `json:"reason,omitempty"`
	Node           string     `json:"node,omitempty"`
	GraceEnd       *time.Time `json:"grace_end,omitempty"`
	Preemptor      string     `json:"preemptor,omitempty"`
	PreemptorClass string     `json:"preemptor_class,omitempty"`
	ExitCode       *int       `json:"exit_code,omitempty"`
	Error          string     `json:"error,omitempty"`
	Alert          string     `json:"alert,omitempty"`
	// An alert's cause (the advisor's late.cause: scheduler_stalled,
	// idle_capacity, nodes_lost, gpus_unhealthy, unexplained) and whom to
	// tell (late.tell: operators); none from an advisor without a verdict.
	Cause   string  `json:"cause,omitempty"`
	Tell    string  `json:"tell,omitempty"`
	Command string  `json:"command,omitempty"` // a suggestion's
	SavesS  float64 `json:"saves_s,omitempty"` // a suggestion's P50 saving, in seconds
	// A deadline_at_risk's: the task's deadline, the predicted run (s)
	// and when the task would end, starting at its P90 start.
	Deadline *time.Time `json:"deadline,omitempty"`
	RunS     float64    `json:"run_s,omitempty"`
	P90End   *time.Time `json:"p90_end,omitempty"`

	only   string   // a test notice's one destination
	notify []string // the task's own destinations (gpuq submit --notify)
}

// NoticeID is a notice's id: derived from what makes it unique, so that
// a restart that decides it again gets the same id (and finds it
// recorded), and a receiver can de-duplicate a redelivery by it.
func NoticeID(parts ...any) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%v\x00", p)
	}
	return "n" + hex.EncodeToString(h.Sum(nil))[:31]
}

// label is how a text names a task: its name and team.
func label(name, team string) string {
	if team == "" {
		return fmt.Sprintf("%q", name)
	}
	return fmt.Sprintf("%q (team %s)", name, team)
}

// when writes an absolute time and how far it is from now, e.g.
// "15:04 UTC (in 8 min)".
func when(t, now time.Time) string {
	d := t.Sub(now)
	rel := "now"
	switch {
	case d >= time.Minute:
		rel = "in " + human(d)
	case d <= -time.Minute:
		rel = human(-d) + " ago"
	}
	return fmt.Sprintf("%s UTC (%s)", t.UTC().Format("15:04"), rel)
}

// human writes a duration in whole minutes or hours and minutes.
func human(d time.Duration) string {
	d = d.Round(time.Minute)
	if d < time.Hour {
		return fmt.Sprintf("%d min", int(d.Minutes()))
	}
	h, m := int(d.Hours()), int(d.Minutes())%60
	if m == 0 {
		return fmt.Sprintf("%d h", h)
	}
	return fmt.Sprintf("%d h %d min", h, m)
}

// sentence ends s with one full stop, trimmed of spaces and newlines.
func sentence(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

func ptime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
