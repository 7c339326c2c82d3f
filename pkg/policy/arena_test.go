package policy_test

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/policy"
)

// The reservation walk's what-if cuts the GPU lists it builds from a
// pooled arena: with and without the arena, a pass decides and explains
// the same, byte for byte, over random states played forward (and passes
// in a row reuse the pooled chunks).
func TestPropArenaSameDecisions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genWorld(t)
		c.submitMore(t, 40)
		o := genOptions(t)
		p := policy.New(o)
		c.playSame(t, o, p, p.WithoutArena(), 4, "the arena", nil)
	})
}
