//go:build !linux

package bench

import "time"

// threadCPUTime is not measured here.
func threadCPUTime() time.Duration { return 0 }
