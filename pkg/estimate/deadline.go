package estimate

import (
	"fmt"
	"strings"
	"time"
)

// DeadlineRisk reports whether a task that starts at its P90 start and
// then runs for run would end after its deadline, and says why in words
// ("may miss its deadline 18:00 UTC: P90 start 16:40 UTC + about 2 h run
// ends 18:40 UTC"). A start already past is taken as now: the task has
// not started, so it starts at now at the earliest. The one rule of the
// advice's deadline_at_risk and the notifier's notice.
func DeadlineRisk(deadline, p90Start time.Time, run time.Duration, now time.Time) (bool, string) {
	if deadline.IsZero() {
		return false, ""
	}
	start := p90Start
	if start.Before(now) {
		start = now
	}
	end := start.Add(run)
	if !end.After(deadline) {
		return false, ""
	}
	return true, fmt.Sprintf("may miss its deadline %s: P90 start %s + about %s run ends %s",
		Clock(deadline, now), Clock(start, now), Approx(run), Clock(end, now))
}

// Clock is a time for a sentence: "18:00 UTC", with the date when it is
// not today's (UTC): "Dec 4 18:00 UTC".
func Clock(t, now time.Time) string {
	t, now = t.UTC(), now.UTC()
	if t.YearDay() == now.YearDay() && t.Year() == now.Year() {
		return t.Format("15:04 UTC")
	}
	return t.Format("Jan 2 15:04 UTC")
}

// Approx is a duration for a sentence, to the minute: "2 h", "2 h 5 min",
// "40 min" (under a minute: "1 min").
func Approx(d time.Duration) string {
	d = d.Round(time.Minute)
	if d < time.Minute {
		d = time.Minute
	}
	h, m := int(d.Hours()), int(d.Minutes())%60
	var parts []string
	if h > 0 {
		parts = append(parts, fmt.Sprintf("%d h", h))
	}
	if m > 0 {
		parts = append(parts, fmt.Sprintf("%d min", m))
	}
	return strings.Join(parts, " ")
}
