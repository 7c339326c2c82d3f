package domain_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/domain"
)

func TestParsePriority(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    domain.Priority
		wantErr bool
	}{
		"critical":        {in: "critical", want: domain.Critical},
		"high":            {in: "high", want: domain.High},
		"medium":          {in: "medium", want: domain.Medium},
		"low":             {in: "low", want: domain.Low},
		"upper case":      {in: "CRITICAL", want: domain.Critical},
		"mixed case":      {in: "HiGh", want: domain.High},
		"title case":      {in: "Medium", want: domain.Medium},
		"surrounding ws":  {in: " low\n", want: domain.Low},
		"empty":           {in: "", wantErr: true},
		"blank":           {in: "   ", wantErr: true},
		"unknown":         {in: "urgent", wantErr: true},
		"abbreviation":    {in: "med", wantErr: true},
		"rank as number":  {in: "4", wantErr: true},
		"trailing junk":   {in: "high!", wantErr: true},
		"inner space":     {in: "hi gh", wantErr: true},
		"String of zero":  {in: "priority(0)", wantErr: true},
		"two names":       {in: "high,low", wantErr: true},
		"non-ascii lower": {in: "crıtical", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := domain.ParsePriority(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParsePriority(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ParsePriority(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

// TestPriorityRank: classes compare by rank, never by name ("low" < "medium"
// by name).
func TestPriorityRank(t *testing.T) {
	if !(domain.Critical > domain.High && domain.High > domain.Medium && domain.Medium > domain.Low) {
		t.Errorf("rank order broken: critical %d, high %d, medium %d, low %d", domain.Critical, domain.High, domain.Medium, domain.Low)
	}
	if domain.Low != 1 {
		t.Errorf("Low = %d, want 1 (the zero value must be invalid)", domain.Low)
	}
	want := []domain.Priority{domain.Critical, domain.High, domain.Medium, domain.Low}
	if diff := cmp.Diff(want, domain.Priorities); diff != "" {
		t.Errorf("Priorities, highest first (-want +got):\n%s", diff)
	}
}

func TestPriorityString(t *testing.T) {
	cases := map[string]struct {
		p         domain.Priority
		want      string
		wantValid bool
	}{
		"critical": {domain.Critical, "critical", true},
		"high":     {domain.High, "high", true},
		"medium":   {domain.Medium, "medium", true},
		"low":      {domain.Low, "low", true},
		"zero":     {0, "priority(0)", false},
		"above":    {5, "priority(5)", false},
		"negative": {-1, "priority(-1)", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.p.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
			if got := tc.p.Valid(); got != tc.wantValid {
				t.Errorf("Valid() = %v, want %v", got, tc.wantValid)
			}
		})
	}
}

func TestPriorityText(t *testing.T) {
	type doc struct {
		P domain.Priority `json:"p"`
	}
	for _, p := range domain.Priorities {
		b, err := json.Marshal(doc{p})
		if err != nil {
			t.Fatalf("Marshal(%v): %v", p, err)
		}
		if want := `{"p":"` + p.String() + `"}`; string(b) != want {
			t.Errorf("Marshal(%v) = %s, want %s", p, b, want)
		}
		var got doc
		if err := json.Unmarshal(b, &got); err != nil || got.P != p {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", b, got.P, err, p)
		}
	}
	var d doc
	if err := json.Unmarshal([]byte(`{"p":"HIGH"}`), &d); err != nil || d.P != domain.High {
		t.Errorf(`Unmarshal("HIGH") = %v, %v; want high`, d.P, err)
	}
	if err := json.Unmarshal([]byte(`{"p":"soon"}`), &d); err == nil {
		t.Errorf(`Unmarshal("soon") = %v, nil; want an error`, d.P)
	}
}
