package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

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

// TestConformanceDirect: a Log that reads and follows by direct gets
// passes the same suite, and leaves no consumer on the stream.
func TestConformanceDirect(t *testing.T) {
	logtest.Run(t, func(t *testing.T) events.Log {
		l := newLog(t).(*jetstream.Log).Direct()
		t.Cleanup(func() {
			s, err := l.JetStream().Stream(context.Background(), events.StreamName)
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Consumers != 0 {
				t.Errorf("direct reads left %d consumers on the stream, want 0", info.State.Consumers)
			}
		})
		return l
	})
}

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

// TestReadStalledConsumer: a read whose consumer goes silent (here:
// paused by the server, so it neither delivers nor fails) ends with an
// error naming the stall instead of hanging; its caller retries.
func TestReadStalledConsumer(t *testing.T) {
	l := newLog(t).(*jetstream.Log)
	ctx := context.Background()
	const n = 6000 // more than a pull's 4,096, so the read has to ask again
	msgs := make([]events.Msg, n)
	for i := range msgs {
		msgs[i] = events.Msg{Subject: "gpuq.task.a.submitted", Data: []byte("x"), MsgID: fmt.Sprint(i)}
	}
	for _, r := range l.AppendBatch(ctx, msgs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	defer func(d time.Duration) { jetstream.ReadStallAfter = d }(jetstream.ReadStallAfter)
	jetstream.ReadStallAfter = 400 * time.Millisecond
	paused := false
	got := 0
	done := make(chan error, 1)
	go func() {
		_, err := l.Read(ctx, 1, "", func(events.Stored) error {
			if got++; !paused {
				paused = true
				st, err := l.JetStream().Stream(ctx, events.StreamName)
				if err != nil {
					t.Error(err)
					return nil
				}
				names := st.ConsumerNames(ctx)
				for name := range names.Name() {
					if _, err := l.JetStream().PauseConsumer(ctx, events.StreamName, name, time.Now().Add(time.Hour)); err != nil {
						t.Errorf("pause %s: %v", name, err)
					}
				}
			}
			return nil
		})
		done <- err
	}()
	select {
	case err := <-done:
		if got >= n {
			t.Skipf("the read got all %d messages: the pause came too late to test a stall", got)
		}
		if err == nil || !strings.Contains(err.Error(), "stalled") {
			t.Fatalf("read of a silent consumer got %d of %d and returned %v, want a stall error", got, n, err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the read of a silent consumer hung (got %d of %d)", got, n)
	}
}

// TestDirectReadsWithoutAllowDirect: on a stream made before direct gets
// were asked for (no allow_direct) whose user may not update it, a
// direct Log still reads, follows and gets the last of a subject, one
// message at a time through the stream's message get — and creates no
// consumer either. A user that may update the stream turns direct gets
// on when it opens the log.
func TestDirectReadsWithoutAllowDirect(t *testing.T) {
	srv := embeddedtest.Server(t)
	nc := embeddedtest.Connect(t, srv, "old")
	ctx := context.Background()
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := events.AuditStream("", 1, 0)
	cfg.AllowDirect = false
	if _, err := j.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	l, err := jetstream.Attach(ctx, nc, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := l.Append(ctx, events.Msg{Subject: fmt.Sprintf("gpuq.task.t%d.submitted", i%2), Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	var seqs []uint64
	if _, err := l.Read(ctx, 2, "gpuq.task.t0.>", func(m events.Stored) error { seqs = append(seqs, m.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seqs) != "[3 5]" {
		t.Errorf("read t0 from 2: %v, want [3 5]", seqs)
	}
	if m, ok, err := l.Last(ctx, "gpuq.task.t1.submitted"); err != nil || !ok || m.Seq != 4 {
		t.Errorf("last t1: %+v %v %v, want seq 4", m, ok, err)
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fl, err := l.Follow(fctx, 5, "")
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	if m, err := fl.Next(fctx); err != nil || m.Seq != 5 {
		t.Fatalf("follow: %+v %v", m, err)
	}
	if _, err := l.Append(ctx, events.Msg{Subject: "gpuq.node.n.available", Data: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	if m, err := fl.Next(fctx); err != nil || m.Seq != 6 || string(m.Data) != "y" {
		t.Fatalf("follow after an append: %+v %v", m, err)
	}
	s, err := j.Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Consumers; n != 0 {
		t.Errorf("%d consumers, want 0", n)
	}

	// Opening the log as a user that may update the stream turns direct
	// gets on.
	if _, err := jetstream.Open(ctx, nc, jetstream.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if s, err = j.Stream(ctx, events.StreamName); err != nil || !s.CachedInfo().Config.AllowDirect {
		t.Errorf("after Open: allow_direct %v (%v), want true", err == nil && s.CachedInfo().Config.AllowDirect, err)
	}
}

// TestDirectReadSlowReader: a direct read whose callback is slow still
// gets every record, in order, without a gap: a batch waits for it
// however long it takes.
func TestDirectReadSlowReader(t *testing.T) {
	l := newLog(t).(*jetstream.Log)
	ctx := context.Background()
	const n = 3000 // several batches
	msgs := make([]events.Msg, n)
	for i := range msgs {
		msgs[i] = events.Msg{Subject: "gpuq.task.a.submitted", Data: []byte("x")}
	}
	for _, r := range l.AppendBatch(ctx, msgs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	var next uint64 = 1
	if _, err := l.Direct().Read(ctx, 1, "", func(m events.Stored) error {
		if m.Seq != next {
			return fmt.Errorf("got seq %d, want %d", m.Seq, next)
		}
		next++
		if m.Seq%1024 < 300 {
			time.Sleep(100 * time.Microsecond) // slower than the server sends
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if next != n+1 {
		t.Fatalf("read up to %d, want %d", next-1, n)
	}
}
