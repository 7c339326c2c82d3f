package bench

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/events"
)

// TestAge: the aged restart's node ends up as gpuq opens it — the 24 h
// de-duplication window back, ids published after the restart
// de-duplicated again — with its log intact.
func TestAge(t *testing.T) {
	ctx := context.Background()
	nd, err := startNode(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer nd.close()
	if _, _, err := writeHistory(ctx, nd, 2, 300); err != nil {
		t.Fatal(err)
	}
	if err := nd.age(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := nd.start(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := nd.log.JetStream().Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	if info.Config.Duplicates != events.DefaultDedupeWindow || info.State.Msgs != 300 {
		t.Fatalf("after aging: window %v, %d messages; want %v, 300", info.Config.Duplicates, info.State.Msgs, events.DefaultDedupeWindow)
	}
	for i, want := range []bool{false, true} {
		m := nats.NewMsg(events.TaskPrefix + "bench-age.submitted")
		m.Data = []byte("{}")
		m.Header.Set(js.MsgIDHeader, "bench-age")
		ack, err := nd.log.JetStream().PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if ack.Duplicate != want {
			t.Errorf("publish %d: duplicate %v, want %v", i, ack.Duplicate, want)
		}
	}
}
