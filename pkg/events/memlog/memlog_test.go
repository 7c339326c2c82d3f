package memlog_test

import (
	"testing"

	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/logtest"
	"github.com/gpuq/gpuq/pkg/events/memlog"
)

func TestConformance(t *testing.T) {
	logtest.Run(t, func(t *testing.T) events.Log { return memlog.New() })
}
