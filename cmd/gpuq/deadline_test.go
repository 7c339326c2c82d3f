package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseDeadline(t *testing.T) {
	now := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		in   string
		want time.Time // zero: refused
	}{
		"RFC 3339 UTC":         {"2026-12-03T18:00:00Z", time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC)},
		"RFC 3339 with offset": {"2026-12-03T19:00:00+01:00", time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC)},
		"hours":                {"6h", now.Add(6 * time.Hour)},
		"minutes":              {"90m", now.Add(90 * time.Minute)},
		"days":                 {"2d", now.Add(48 * time.Hour)},
		"days and hours":       {"1d12h", now.Add(36 * time.Hour)},
		"spaces around":        {" 6h ", now.Add(6 * time.Hour)},
		"negative":             {"-1h", time.Time{}},
		"zero":                 {"0s", time.Time{}},
		"days then negative":   {"1d-2h", time.Time{}},
		"a date without time":  {"2026-12-03", time.Time{}},
		"words":                {"tomorrow", time.Time{}},
		"too many days":        {"400d", time.Time{}},
		"a bare number":        {"6", time.Time{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseDeadline(tc.in, now)
			if tc.want.IsZero() {
				if err == nil || code(err) != exitInvalid || !strings.Contains(err.Error(), "--deadline") {
					t.Fatalf("parseDeadline(%q) = %v, %v; want an exit-2 error naming --deadline", tc.in, got, err)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("parseDeadline(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

// gpuq submit refuses a bad --deadline or --notify before it connects:
// exit 2, naming the flag or the field.
func TestSubmitDeadlineNotifyRefused(t *testing.T) {
	base := []string{"submit", "--nats", "nats://127.0.0.1:1", "--name", "n", "--team", "vision", "--hypothesis", "h", "--command", "true"}
	many := []string{}
	for i := range 5 {
		many = append(many, "--notify", "https://hooks.example.com/"+string(rune('a'+i)))
	}
	cases := map[string]struct {
		args []string
		want string
	}{
		"a deadline that passed":       {[]string{"--deadline", "2020-01-01T00:00:00Z"}, "deadline: must be in the future"},
		"a deadline two years ahead":   {[]string{"--deadline", time.Now().Add(2 * 365 * 24 * time.Hour).UTC().Format(time.RFC3339)}, "deadline: must be at most 366 days ahead"},
		"a deadline that is not one":   {[]string{"--deadline", "soon"}, "--deadline"},
		"a negative duration":          {[]string{"--deadline", "-2h"}, "--deadline"},
		"five notify URLs":             {many, "notify: at most 4"},
		"a notify URL with a password": {[]string{"--notify", "https://u:pw@hooks.example.com/x"}, "notify:"},
		"a notify URL not http":        {[]string{"--notify", "file:///etc/passwd"}, "notify:"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			if c := run(append(append([]string{}, base...), tc.args...), &stdout, &stderr); c != exitInvalid || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want %d naming %q", c, stderr.String(), exitInvalid, tc.want)
			}
		})
	}
}
