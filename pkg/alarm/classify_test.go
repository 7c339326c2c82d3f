package alarm_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/alarm"
)

// A wait of 3 h against a threshold of 2 h (a P50 of 1 h at submission):
// an hour over. Which hours were broken decides.
func TestClassify(t *testing.T) {
	late := func(broken map[alarm.Cause]float64, legit map[string]float64, other float64) alarm.Breakdown {
		return alarm.Breakdown{WaitS: 3 * 3600, EstimateS: 3600, ThresholdS: 2 * 3600, Broken: broken, Legit: legit, OtherS: other}
	}
	type want struct {
		alarm  bool
		cause  alarm.Cause
		reason string
	}
	cases := map[string]struct {
		in   alarm.Breakdown
		want want
	}{
		"holders overran: legitimate": {
			late(nil, map[string]float64{alarm.HoldersOverran: 3 * 3600}, 0),
			want{reason: alarm.HoldersOverran}},
		"higher classes arrived: legitimate": {
			late(nil, map[string]float64{alarm.HoldersOverran: 3600, alarm.HigherClass: 2 * 3600}, 0),
			want{reason: alarm.HigherClass}},
		"a guarantee reclaimed: legitimate": {
			late(nil, map[string]float64{alarm.GuaranteeReclaim: 3 * 3600}, 0),
			want{reason: alarm.GuaranteeReclaim}},
		"nothing observed (a restarted advisor): legitimate by default": {
			late(nil, nil, 0),
			want{reason: alarm.HoldersOverran}},
		"scheduler stalled for the whole excess": {
			late(map[alarm.Cause]float64{alarm.SchedulerStalled: 3600}, map[string]float64{alarm.HoldersOverran: 2 * 3600}, 0),
			want{alarm: true, cause: alarm.SchedulerStalled}},
		"scheduler stalled for less than the excess: legitimate": {
			late(map[alarm.Cause]float64{alarm.SchedulerStalled: 3599}, map[string]float64{alarm.HoldersOverran: 2*3600 + 1}, 0),
			want{reason: alarm.HoldersOverran}},
		"idle capacity": {
			late(map[alarm.Cause]float64{alarm.IdleCapacity: 2 * 3600}, map[string]float64{alarm.Reserved: 3600}, 0),
			want{alarm: true, cause: alarm.IdleCapacity}},
		"nodes lost": {
			late(map[alarm.Cause]float64{alarm.NodesLost: 5000}, map[string]float64{alarm.HoldersOverran: 3*3600 - 5000}, 0),
			want{alarm: true, cause: alarm.NodesLost}},
		"unhealthy GPUs": {
			late(map[alarm.Cause]float64{alarm.GPUsUnhealthy: 3 * 3600}, nil, 0),
			want{alarm: true, cause: alarm.GPUsUnhealthy}},
		"two broken causes: the one of most seconds": {
			late(map[alarm.Cause]float64{alarm.GPUsUnhealthy: 1800, alarm.NodesLost: 2400}, map[string]float64{alarm.HoldersOverran: 3*3600 - 4200}, 0),
			want{alarm: true, cause: alarm.NodesLost}},
		"nothing explains it": {
			late(nil, map[string]float64{alarm.HoldersOverran: 1800}, 3*3600-1800),
			want{alarm: true, cause: alarm.Unexplained}},
		"broken and unexplained together, unexplained more": {
			late(map[alarm.Cause]float64{alarm.NodesLost: 1200}, map[string]float64{alarm.HoldersOverran: 2 * 3600}, 2400),
			want{alarm: true, cause: alarm.Unexplained}},
		"exactly at the threshold without the broken time: an alarm": {
			late(map[alarm.Cause]float64{alarm.SchedulerStalled: 3600}, map[string]float64{alarm.HoldersOverran: 2 * 3600}, 0),
			want{alarm: true, cause: alarm.SchedulerStalled}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := alarm.Classify(tc.in)
			got := want{alarm: v.Alarm, cause: v.Cause, reason: v.Reason}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("Classify (-want +got):\n%s", diff)
			}
			if v.Alarm && v.Tell != alarm.Operators {
				t.Errorf("an alarm tells %q, want %q", v.Tell, alarm.Operators)
			}
			if !v.Alarm && (v.Tell != "" || v.Cause != "") {
				t.Errorf("no alarm, yet tell %q cause %q", v.Tell, v.Cause)
			}
			if v.Text() == "" {
				t.Error("no text")
			}
		})
	}
}
