package audit_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/audit"
	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
)

// TestVerifyLiveDigest: the live scheduler's digest is compared with a
// fresh replay's after the same sequence — whatever the log holds after
// it — and a difference is a violation at that sequence.
func TestVerifyLiveDigest(t *testing.T) {
	recs := newTimed().at(0, dt.Node("n1").GPUs(4).Available(), task("a").GPUs(2).Submitted(), dt.Dispatch("a", dt.On("n1", 0, 1))).
		at(5, started("a", "n1"), task("b").GPUs(1).Submitted()).
		at(9, completed("a", "n1")).recs()
	at := func(seq uint64) string { return audit.Digest(audit.Fold(recs, seq)) }
	cases := map[string]struct {
		live     *audit.LiveDigest
		wantLive string
		wantOK   bool
		want     []found
	}{
		"no live digest asked":      {live: nil, wantLive: "", wantOK: true},
		"live at the log's end":     {live: &audit.LiveDigest{Instance: "s1", Seq: 6, Digest: at(6)}, wantLive: audit.LiveMatch, wantOK: true},
		"live behind the log's end": {live: &audit.LiveDigest{Instance: "s1", Seq: 3, Digest: at(3)}, wantLive: audit.LiveMatch, wantOK: true},
		"live before any record":    {live: &audit.LiveDigest{Instance: "s1", Seq: 0, Digest: audit.Digest(domain.NewState())}, wantLive: audit.LiveMatch, wantOK: true},
		"live state differs": {live: &audit.LiveDigest{Instance: "s1", Seq: 4, Digest: at(3)}, wantLive: audit.LiveMismatch,
			want: []found{{4, audit.LiveDigestMismatch, ""}}},
		"live beyond the log": {live: &audit.LiveDigest{Instance: "s1", Seq: 99, Digest: at(6)}, wantLive: audit.LiveMismatch,
			want: []found{{99, audit.LiveDigestMismatch, ""}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rep := audit.Verify(recs, audit.Options{Live: tc.live})
			if rep.Live != tc.wantLive || rep.OK != tc.wantOK {
				t.Errorf("live %q ok %v, want %q %v (%+v)", rep.Live, rep.OK, tc.wantLive, tc.wantOK, rep.Violations)
			}
			var got []found
			for _, v := range rep.Violations {
				got = append(got, found{v.Seq, v.Kind, v.TaskID})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
			if tc.live != nil && (rep.LiveDigest != tc.live.Digest || rep.LiveDigestSeq != tc.live.Seq || rep.LiveInstance != "s1") {
				t.Errorf("report's live fields %q %d %q", rep.LiveDigest, rep.LiveDigestSeq, rep.LiveInstance)
			}
			if rep.Digest != at(0) {
				t.Errorf("the whole log's digest changed with the live check")
			}
		})
	}
}
