package domain_test

import (
	"testing"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestApplyCodedSkipCodes: every way a fold passes over a record has its
// code, and the code, not the text, is what a reader decides on (audit
// verify counts a dispatch refused for its placements). The last record
// of each log is the one judged; the ones before it must apply.
func TestApplyCodedSkipCodes(t *testing.T) {
	n1 := dt.Node("n1").GPUs(4).Available()
	t1 := dt.Task().ID("t1").GPUs(2).Submitted()
	t2 := dt.Task().ID("t2").GPUs(2).Submitted()
	d1 := dt.Dispatch("t1", dt.On("n1", 0, 1))
	st1 := events.Started{TaskID: "t1", Node: "n1", PID: 1}

	cases := map[string]struct {
		log  []events.Event
		want domain.SkipCode
	}{
		"applied":               {log: []events.Event{n1, t1, d1}, want: ""},
		"undecodable":           {log: []events.Event{t1, dt.UnknownTask("t1", "resized")}, want: domain.SkipUndecodable},
		"invalid submission":    {log: []events.Event{dt.Task().ID("t1").GPUs(0).Submitted()}, want: domain.SkipInvalidData},
		"gpu without a uuid":    {log: []events.Event{events.Available{Node: "n1", GPUs: []events.GPU{{Index: 0}}}}, want: domain.SkipInvalidData},
		"never submitted":       {log: []events.Event{n1, d1}, want: domain.SkipUnknownTask},
		"lost node never seen":  {log: []events.Event{events.Lost{Node: "n9"}}, want: domain.SkipUnknownNode},
		"submitted twice":       {log: []events.Event{t1, t1}, want: domain.SkipDuplicate},
		"started while queued":  {log: []events.Event{n1, t1, st1}, want: domain.SkipState},
		"placement held":        {log: []events.Event{n1, t1, t2, d1, dt.Dispatch("t2", dt.On("n1", 1, 2))}, want: domain.SkipPlacement},
		"placement unknown gpu": {log: []events.Event{n1, t1, dt.Dispatch("t1", dt.On("n9", 0))}, want: domain.SkipPlacement},
		"wrong node":            {log: []events.Event{n1, t1, d1, events.Started{TaskID: "t1", Node: "n2", PID: 1}}, want: domain.SkipWrongNode},
		"deposed leader": {log: []events.Event{n1, t1, t2,
			events.Dispatched{TaskID: "t1", Placements: []events.Placement{dt.On("n1", 0)}, Epoch: 2, BasedOnSeq: 3},
			events.Dispatched{TaskID: "t2", Placements: []events.Placement{dt.On("n1", 1)}, Epoch: 1, BasedOnSeq: 3}},
			want: domain.SkipFenced},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			recs := dt.NewLog().Append(tc.log...).Records()
			st := domain.NewState()
			for _, r := range recs[:len(recs)-1] {
				if code, why := st.ApplyCoded(r); why != "" || code != "" {
					t.Fatalf("record %d skipped (%s: %s); the setup must apply", r.Seq, code, why)
				}
			}
			code, why := st.ApplyCoded(recs[len(recs)-1])
			if code != tc.want {
				t.Errorf("code = %q (%s); want %q", code, why, tc.want)
			}
			if (why == "") != (tc.want == "") {
				t.Errorf("text %q beside code %q: a skip has both, an applied record neither", why, code)
			}
		})
	}
}
