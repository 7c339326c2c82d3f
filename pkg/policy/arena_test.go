package policy_test

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/policy"
)

// The reservation walk's what-if cuts the GPU lists it builds from a
// pooled arena: at every step of a pass, over random states played
// forward, the reservation's what-if gives the same start and GPUs as the
// reference that allocates its lists (and passes in a row reuse the
// pooled chunks: Policy.PlanChecked).
func TestPropArenaSameDecisions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genWorld(t)
		c.submitMore(t, 40)
		o := genOptions(t)
		p := policy.New(o)
		c.playChecked(t, o, p, 4, "the arena", nil)
	})
}
