package auth_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/api"
)

// TestSubmitterAsksAdvisorStats: the submitter's credential may ask the
// advisor's statistics (the dashboard's calibration, GET /v1/stats), and
// the advisor's may answer.
func TestSubmitterAsksAdvisorStats(t *testing.T) {
	a := newAuthServer(t)
	adv := a.as("advisor")
	if _, err := adv.nc.QueueSubscribe(api.SubjectPrefix+api.OpStats, api.AdvisorQueueGroup, func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"result":{"n":0}}`))
	}); err != nil {
		t.Fatal(err)
	}
	if err := adv.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	sub := a.as("submitter")
	if _, err := sub.nc.Request(api.SubjectPrefix+api.OpStats, []byte(`{}`), 3*time.Second); err != nil {
		t.Fatalf("the submitter asking stats: %v (%s; advisor: %s)", err, sub.violations(), adv.violations())
	}
}
