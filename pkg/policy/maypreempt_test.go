package policy_test

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/policy"
)

// TestMayPreemptByClass: the class rule the passes use and audit verify
// checks, class ageing included.
func TestMayPreemptByClass(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	task := func(id string, p domain.Priority, submitted time.Time) *domain.Task {
		return &domain.Task{ID: id, Priority: p, SubmittedAt: submitted}
	}
	high := task("h", domain.High, t0)
	crit := task("c", domain.Critical, t0)
	lowOld := task("lo", domain.Low, t0.Add(-30*time.Hour)) // waited long: aged ahead of high under 12h ageing
	lowNew := task("ln", domain.Low, t0.Add(time.Hour))
	aging := policy.Options{Preemption: policy.Ladder, ClassAging: 12 * time.Hour}
	cases := map[string]struct {
		o    policy.Options
		t, v *domain.Task
		want bool
	}{
		"critical-only, critical":          {policy.Options{}, crit, lowNew, true},
		"critical-only, high":              {policy.Options{}, high, lowNew, false},
		"ladder, higher class":             {policy.Options{Preemption: policy.Ladder}, high, lowOld, true},
		"ladder, same class":               {policy.Options{Preemption: policy.Ladder}, lowNew, lowOld, false},
		"ladder ageing, victim behind":     {aging, high, lowNew, true},
		"ladder ageing, victim aged ahead": {aging, high, lowOld, false},
		"ladder ageing off under spf":      {policy.Options{Preemption: policy.Ladder, ClassAging: 12 * time.Hour, WithinClass: policy.ShortestPredicted}, high, lowOld, true},
		"defaults are critical-only":       {policy.DefaultOptions(), high, lowNew, false},
	}
	for name, tc := range cases {
		if got := policy.MayPreemptByClass(tc.o, tc.t, tc.v); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}
