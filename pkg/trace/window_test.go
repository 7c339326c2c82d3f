package trace

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var philly0 = time.Date(2017, 10, 1, 0, 0, 45, 0, time.UTC) // the Philly trace's first submission

func TestParseBound(t *testing.T) {
	cases := map[string]struct {
		in     string
		origin time.Time
		want   time.Duration
		err    string // a part of the error; "" for none
	}{
		"offset in hours":          {in: "720h", origin: philly0, want: 720 * time.Hour},
		"offset without origin":    {in: "90m", want: 90 * time.Minute},
		"zero offset":              {in: "0", want: 0},
		"negative offset":          {in: "-5h", origin: philly0, err: "≥ 0"},
		"full date is UTC":         {in: "2017-11-01", origin: philly0, want: 31*24*time.Hour - 45*time.Second},
		"date-time in UTC":         {in: "2017-10-01T00:01:45Z", origin: philly0, want: time.Minute},
		"date-time with an offset": {in: "2017-10-01T02:00:45+02:00", origin: philly0, want: 0},
		"date before the trace":    {in: "2017-09-30", origin: philly0, want: -24*time.Hour - 45*time.Second},
		"date without wall clock":  {in: "2017-11-01", err: "wall-clock"},
		"not a month":              {in: "2017-13-01", origin: philly0, err: "RFC 3339"},
		"garbage":                  {in: "november", origin: philly0, err: "offset from the trace's first submission"},
		"empty":                    {in: " ", origin: philly0, err: "empty"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseBound(tc.in, tc.origin)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("ParseBound(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
				}
			case err != nil:
				t.Errorf("ParseBound(%q): %v", tc.in, err)
			case got != tc.want:
				t.Errorf("ParseBound(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

// jobsAt is a job list submitted at the given wall-clock times (Philly's
// shape: Submit from the first).
func jobsAt(times ...string) []Job {
	var jobs []Job
	for i, s := range times {
		at, err := time.Parse(time.RFC3339, s)
		if err != nil {
			panic(err)
		}
		jobs = append(jobs, Job{ID: string(rune('a' + i)), SubmitTime: at, Submit: at.Sub(mustTime(times[0])), GPUs: 1})
	}
	return jobs
}

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestSplit(t *testing.T) {
	twoMonths := jobsAt("2017-10-01T00:00:45Z", "2017-10-31T23:59:59Z", "2017-11-01T00:00:00Z", "2017-11-30T23:52:12Z")
	gap := jobsAt("2017-10-05T00:00:00Z", "2017-12-05T00:00:00Z")
	relative := []Job{{ID: "a", Submit: 10 * time.Second}, {ID: "b", Submit: 100 * time.Second}, {ID: "c", Submit: 109 * time.Second}}
	cases := map[string]struct {
		spec  string
		jobs  []Job
		names []string
		sizes []int
		err   string
	}{
		"months":                      {spec: "month", jobs: twoMonths, names: []string{"2017-10", "2017-11"}, sizes: []int{2, 2}},
		"a month without submission":  {spec: "month", jobs: gap, names: []string{"2017-10", "2017-12"}, sizes: []int{1, 1}},
		"halves, at 31 October noon":  {spec: "2", jobs: twoMonths, names: []string{"1/2", "2/2"}, sizes: []int{1, 3}},
		"halves of a relative trace":  {spec: "2", jobs: relative, names: []string{"1/2", "2/2"}, sizes: []int{1, 2}},
		"thirds":                      {spec: " 3 ", jobs: relative, names: []string{"1/3", "2/3", "3/3"}, sizes: []int{1, 0, 2}},
		"month without wall clock":    {spec: "month", jobs: relative, err: "wall-clock"},
		"one part":                    {spec: "1", jobs: twoMonths, err: "between 2 and 100"},
		"too many parts":              {spec: "101", jobs: twoMonths, err: "between 2 and 100"},
		"not a number":                {spec: "week", jobs: twoMonths, err: `"month"`},
		"no job":                      {spec: "2", err: "no job"},
		"parts shorter than a second": {spec: "3", jobs: relative[:1], err: "want fewer"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			parts, err := Split(tc.spec, tc.jobs)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Split(%q) = %v, %v; want an error with %q", tc.spec, parts, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			var sizes []int
			for _, p := range parts {
				names = append(names, p.Name)
				sizes = append(sizes, len(p.Filter(tc.jobs)))
			}
			if strings.Join(names, " ") != strings.Join(tc.names, " ") || !slices.Equal(sizes, tc.sizes) {
				t.Errorf("parts %v of %v jobs, want %v of %v", names, sizes, tc.names, tc.sizes)
			}
		})
	}
}

// TestSplitPartitions: whatever the jobs and the split, the parts are in
// order and do not overlap (equal spans are contiguous; a month without
// a submission is left out), and every job is in exactly one of them.
func TestSplitPartitions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 200).Draw(t, "jobs")
		offs := rapid.SliceOfN(rapid.Int64Range(0, 90*24*3600*1000), n, n).Draw(t, "submit_ms")
		jobs := make([]Job, n)
		for i, ms := range offs {
			jobs[i] = Job{ID: string(rune(i)), Submit: time.Duration(ms) * time.Millisecond, GPUs: 1}
		}
		sortJobs(jobs)
		if rapid.Bool().Draw(t, "wall clock") {
			for i := range jobs {
				jobs[i].SubmitTime = philly0.Add(jobs[i].Submit)
			}
		}
		spec := "month"
		if jobs[0].SubmitTime.IsZero() || rapid.Bool().Draw(t, "equal spans") {
			spec = rapid.StringMatching(`[2-9]|[1-9][0-9]`).Draw(t, "parts")
		}
		parts, err := Split(spec, jobs)
		if err != nil {
			if strings.Contains(err.Error(), "want fewer") {
				return // a span of fewer seconds than parts
			}
			t.Fatal(err)
		}
		for k, p := range parts {
			if p.Until <= p.From {
				t.Fatalf("part %s is empty", p)
			}
			if k > 0 && p.From < parts[k-1].Until {
				t.Fatalf("part %s begins before %s ends", p, parts[k-1])
			}
			if k > 0 && spec != "month" && p.From != parts[k-1].Until {
				t.Fatalf("part %s does not begin where %s ends", p, parts[k-1])
			}
		}
		for _, j := range jobs {
			in := 0
			for _, p := range parts {
				if p.Contains(j.Submit) {
					in++
				}
			}
			if in != 1 {
				t.Fatalf("job at %v in %d parts of %v", j.Submit, in, parts)
			}
		}
	})
}

func TestWindowJSON(t *testing.T) {
	cases := map[string]struct {
		w    Window
		want string
	}{
		"with wall clock": {Window{Name: "2017-11", From: 31*24*time.Hour - 45*time.Second, Until: 61*24*time.Hour - 45*time.Second, Origin: philly0},
			`{"name":"2017-11","from_s":2678355,"until_s":5270355,"from":"2017-11-01T00:00:00Z","until":"2017-12-01T00:00:00Z"}`},
		"offsets only": {Window{From: time.Hour, Until: 2 * time.Hour}, `{"from_s":3600,"until_s":7200}`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := json.Marshal(tc.w)
			if err != nil || string(b) != tc.want {
				t.Fatalf("got %s, %v; want %s", b, err, tc.want)
			}
			var back Window
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if back.Name != tc.w.Name || back.From != tc.w.From || back.Until != tc.w.Until || !back.Origin.Equal(tc.w.Origin) {
				t.Errorf("round trip: %+v, want %+v", back, tc.w)
			}
		})
	}
}

// TestPhillyWindows cuts the Philly trace into its two months, by
// --split month, by --from/--until dates and by offsets: 47,192 jobs
// submitted in October, 21,311 in November (the README's 68,503 in all).
func TestPhillyWindows(t *testing.T) {
	jobs, err := ReadPhilly(openTrace(t, "philly/jobs-2017-10-11.csv"))
	if err != nil {
		t.Fatal(err)
	}
	origin := Origin(jobs)
	if !origin.Equal(philly0) {
		t.Fatalf("origin %v, want %v", origin, philly0)
	}
	months, err := Split("month", jobs)
	if err != nil {
		t.Fatal(err)
	}
	halves, err := Split("2", jobs)
	if err != nil {
		t.Fatal(err)
	}
	bound := func(s string) time.Duration {
		d, err := ParseBound(s, origin)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if len(months) != 2 || len(halves) != 2 {
		t.Fatalf("%d months, %d halves; want 2 and 2", len(months), len(halves))
	}
	cases := map[string]struct {
		w    Window
		want int
	}{
		"split month: October":   {months[0], 47192},
		"split month: November":  {months[1], 21311},
		"dates: October":         {Window{From: bound("2017-10-01"), Until: bound("2017-11-01")}, 47192},
		"dates: November":        {Window{From: bound("2017-11-01"), Until: bound("2017-12-01")}, 21311},
		"RFC 3339: November":     {Window{From: bound("2017-11-01T00:00:00Z"), Until: bound("2017-12-01T00:00:00Z")}, 21311},
		"offsets: October":       {Window{From: 0, Until: bound("743h59m15s")}, 47192},
		"split 2: the halves":    {Window{From: halves[0].From, Until: halves[1].Until}, 68503},
		"the whole, open bounds": {Window{From: bound("0"), Until: jobs[len(jobs)-1].Submit + time.Second}, 68503},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := len(tc.w.Filter(jobs)); got != tc.want {
				t.Errorf("%s holds %d jobs, want %d", tc.w, got, tc.want)
			}
		})
	}
	if months[0].Name != "2017-10" || months[1].Name != "2017-11" || months[0].Until != months[1].From {
		t.Errorf("months %v, want 2017-10 then 2017-11, contiguous", months)
	}
	// The halves are 30.5 days each: the first ends on 31 October at noon.
	if got := origin.Add(halves[0].Until).Format(time.DateTime); !strings.HasPrefix(got, "2017-10-31 11:") {
		t.Errorf("the first half ends at %s, want 2017-10-31 about noon", got)
	}
}
