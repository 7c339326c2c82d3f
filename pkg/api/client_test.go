package api_test

import (
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/api"
)

// TestNoRespondersNamesTheService: a request no one answers names the
// service that answers it — the advisor for stats and estimate (issue
// 22: `gpuq stats` blamed the submitter while the advisor replayed).
func TestNoRespondersNamesTheService(t *testing.T) {
	cases := map[string]struct {
		op, want, not string
	}{
		"stats":    {api.OpStats, "no gpuq advisor is answering stats", "submitter"},
		"estimate": {api.OpEstimate, "no gpuq advisor is answering estimate", "submitter"},
		"queue":    {api.OpQueue, "no gpuq submitter is answering queue", "advisor"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := api.NoResponders(c.op, "nats://127.0.0.1:4222").Error()
			if !strings.Contains(got, c.want) || strings.Contains(got, c.not) || !strings.Contains(got, "catching up") {
				t.Errorf("%q: want %q, not %q, and catching up", got, c.want, c.not)
			}
		})
	}
}
