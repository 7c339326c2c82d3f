package jetstream_test

import (
	"context"
	"testing"

	"github.com/gpuq/gpuq/pkg/embedded/embeddedtest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/events/logtest"
)

// newLog starts an embedded server of its own for each case.
func newLog(t *testing.T) events.Log {
	srv := embeddedtest.Server(t)
	nc := embeddedtest.Connect(t, srv, "conformance")
	l, err := jetstream.Open(context.Background(), nc, jetstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestConformance(t *testing.T) { logtest.Run(t, newLog) }

func TestStreamDeniesDeleteAndPurge(t *testing.T) {
	l := newLog(t).(*jetstream.Log)
	ctx := context.Background()
	if _, err := l.Append(ctx, events.Msg{Subject: "gpuq.task.a.submitted", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	s, err := l.JetStream().Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(ctx, 1); err == nil {
		t.Error("DeleteMsg succeeded on the audit stream")
	}
	if err := s.Purge(ctx); err == nil {
		t.Error("Purge succeeded on the audit stream")
	}
}
