package trace

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Window is a span of submit times, [From, Until): the jobs submitted at
// or after From and before Until. From and Until are offsets on the
// trace's own axis, Job.Submit (from the trace's first submission for
// Philly); Origin is that axis' zero in wall-clock time where the trace
// has wall-clock submit times (Philly), else the zero time.Time.
//
// A window is a held-out slice of a trace: `gpuq sim --from/--until` or
// `--split` simulates the window's jobs only, on an empty cluster.
type Window struct {
	// Name is the part's name in a split ("2017-10" for a month, "1/2"
	// for the first of two equal spans); empty for --from/--until.
	Name        string
	From, Until time.Duration
	Origin      time.Time
}

// Contains reports whether a job submitted at offset submit is in w.
func (w Window) Contains(submit time.Duration) bool { return submit >= w.From && submit < w.Until }

// Filter returns the jobs of w, in their order (a new slice).
func (w Window) Filter(jobs []Job) []Job {
	var out []Job
	for _, j := range jobs {
		if w.Contains(j.Submit) {
			out = append(out, j)
		}
	}
	return out
}

// String is the window for people: its name, and its bounds as dates
// where the trace has them, else as offsets.
func (w Window) String() string {
	b := fmt.Sprintf("[%s, %s)", w.bound(w.From), w.bound(w.Until))
	if w.Name != "" {
		return w.Name + " " + b
	}
	return b
}

func (w Window) bound(d time.Duration) string {
	if w.Origin.IsZero() {
		return "+" + d.String()
	}
	return w.Origin.Add(d).UTC().Format(time.RFC3339)
}

// windowJSON is Window on the wire: the bounds in seconds from the
// trace's first submission, and as RFC 3339 times where the trace has
// wall-clock times.
type windowJSON struct {
	Name   string     `json:"name,omitempty"`
	FromS  float64    `json:"from_s"`
	UntilS float64    `json:"until_s"`
	From   *time.Time `json:"from,omitempty"`
	Until  *time.Time `json:"until,omitempty"`
}

// MarshalJSON writes w as {"name", "from_s", "until_s", "from", "until"}.
func (w Window) MarshalJSON() ([]byte, error) {
	j := windowJSON{Name: w.Name, FromS: w.From.Seconds(), UntilS: w.Until.Seconds()}
	if !w.Origin.IsZero() {
		f, u := w.Origin.Add(w.From).UTC(), w.Origin.Add(w.Until).UTC()
		j.From, j.Until = &f, &u
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (w *Window) UnmarshalJSON(b []byte) error {
	var j windowJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*w = Window{Name: j.Name, From: secondsDuration(j.FromS), Until: secondsDuration(j.UntilS)}
	if j.From != nil {
		w.Origin = j.From.Add(-w.From)
	}
	return nil
}

func secondsDuration(s float64) time.Duration {
	return time.Duration(math.Round(s * float64(time.Second)))
}

// Origin is the wall-clock time of offset 0 of the jobs' Submit axis
// (the first submission, for Philly), or the zero time.Time when the
// trace has no wall-clock submit times (openb, a synthetic workload).
func Origin(jobs []Job) time.Time {
	for _, j := range jobs {
		if !j.SubmitTime.IsZero() {
			return j.SubmitTime.Add(-j.Submit)
		}
	}
	return time.Time{}
}

// BoundRule says what --from and --until accept.
const BoundRule = "a date (RFC 3339: 2017-11-01 or 2017-11-01T00:00:00Z, UTC unless it gives an offset) or an offset from the trace's first submission (a duration ≥ 0, e.g. 720h)"

// ParseBound reads one bound of a window: a date (RFC 3339 full-date,
// read as UTC midnight, or date-time) or a duration ≥ 0, the offset from
// the trace's first submission. origin is the wall-clock time of offset
// 0 (Origin); a date needs one.
func ParseBound(s string, origin time.Time) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty: want " + BoundRule)
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return 0, fmt.Errorf("%q: an offset must be ≥ 0 (a date may lie before the trace)", s)
		}
		return d, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t, err = time.ParseInLocation(time.DateOnly, s, time.UTC)
	}
	if err != nil {
		return 0, fmt.Errorf("%q: want %s", s, BoundRule)
	}
	if origin.IsZero() {
		return 0, fmt.Errorf("%q: a date needs a trace with wall-clock submit times (philly); give an offset from the first submission instead, e.g. 720h", s)
	}
	return t.Sub(origin), nil
}

// SplitRule says what --split accepts.
const SplitRule = `"month" (one part per calendar month, UTC) or a whole number of equal spans between 2 and 100 (e.g. 2: halves)`

// maxSplit bounds --split N.
const maxSplit = 100

// Split cuts the jobs' submit span into parts by spec (SplitRule), in
// order, every job in exactly one part:
//
//   - "month": one window per calendar month (UTC) that has a
//     submission, named "2006-01", from its first instant to the next
//     month's; needs wall-clock submit times.
//   - N: N windows of equal length from the first submission to one
//     second after the last, each bound rounded down to a whole second,
//     named "k/N".
//
// jobs must be in submit order (every reader returns them so).
func Split(spec string, jobs []Job) ([]Window, error) {
	if len(jobs) == 0 {
		return nil, errors.New("no job to split")
	}
	origin := Origin(jobs)
	first, last := jobs[0].Submit, jobs[len(jobs)-1].Submit
	spec = strings.TrimSpace(spec)
	if spec == "month" {
		if origin.IsZero() {
			return nil, errors.New(`"month" needs a trace with wall-clock submit times (philly); give a number of equal spans instead, e.g. 2`)
		}
		var out []Window
		t := origin.Add(first).UTC()
		m := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		for m.Sub(origin) <= last {
			next := m.AddDate(0, 1, 0)
			w := Window{Name: m.Format("2006-01"), From: m.Sub(origin), Until: next.Sub(origin), Origin: origin}
			if hasJob(jobs, w) {
				out = append(out, w)
			}
			m = next
		}
		return out, nil
	}
	n, err := strconv.Atoi(spec)
	if err != nil || n < 2 || n > maxSplit {
		return nil, fmt.Errorf("%q: want %s", spec, SplitRule)
	}
	end := last.Truncate(time.Second) + time.Second
	span := float64(end - first)
	out := make([]Window, n)
	for k := range n {
		out[k] = Window{Name: fmt.Sprintf("%d/%d", k+1, n), Origin: origin,
			From: first + time.Duration(span*float64(k)/float64(n)).Truncate(time.Second)}
		if k > 0 {
			out[k-1].Until = out[k].From
		}
	}
	out[0].From = first
	out[n-1].Until = end
	for _, w := range out {
		if w.Until <= w.From {
			return nil, fmt.Errorf("%d parts of whole seconds do not fit the trace's submissions, which span %s: want fewer", n, end-first)
		}
	}
	return out, nil
}

func hasJob(jobs []Job, w Window) bool {
	for _, j := range jobs {
		if w.Contains(j.Submit) {
			return true
		}
	}
	return false
}
