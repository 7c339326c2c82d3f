package submitter

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/embedded/embeddedtest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
)

// On JetStream: followers resuming from before the service started read
// the log by sequence, without a consumer each; the advice already in
// GPUQ_ADVICE and the advice published later both reach them.
func TestStreamJetStream(t *testing.T) {
	srv := embeddedtest.Server(t)
	nc := embeddedtest.Connect(t, srv, "submitter")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log, err := jetstream.Open(ctx, nc, jetstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	js := log.JetStream()
	if _, err := js.CreateOrUpdateStream(ctx, events.AdviceStream(1)); err != nil {
		t.Fatal(err)
	}
	id := func(i int) string { return fmt.Sprintf("0190a000-0000-7000-8000-%012d", i) }
	for i := range 30 {
		if _, err := events.Append(ctx, log, events.Submitted{TaskID: id(i), Name: "early", Team: "nlp", Priority: "low",
			GPUs: 1, Hours: 1, Hypothesis: "h", Command: "c", SubmittedAt: t0}, events.Meta{Time: t0}, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, events.AdviceSubject(id(0)), []byte(fmt.Sprintf(`{"task_id":%q,"state":"queued","position":1,"based_on_seq":30,"reason":"before"}`, id(0)))); err != nil {
		t.Fatal(err)
	}

	addr := freeAddr(t)
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{NC: nc, Log: log, HTTPAddr: addr, Limits: testLimits, Logger: testLogger(t),
			Ready: func() { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run returned before ready: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("not ready after 20s")
	}
	consumers := func() int {
		st, err := js.Stream(ctx, events.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	before := consumers()

	base := "http://" + addr + "/v1/events"
	var streams []*stream
	for i := range 10 {
		streams = append(streams, openStream(t, base, "Last-Event-ID", strconv.Itoa(i)))
	}
	for i, s := range streams {
		got := s.until(10*time.Second, func(g []sse) bool {
			return hasID(30)(g) && strings.Contains(fmt.Sprint(g), `"reason":"before"`)
		})
		if diff := cmp.Diff(seqRange(uint64(i)+1, 30), ids(got)); diff != "" {
			t.Errorf("follower after %d (-want +got):\n%s", i, diff)
		}
	}
	// the service's own fold may re-open its one consumer meanwhile; a
	// consumer per follower would add 10
	if after := consumers(); after >= before+len(streams) {
		t.Errorf("consumers on %s: %d with %d followers, %d before", events.StreamName, after, len(streams), before)
	}
	if _, err := js.Publish(ctx, events.AdviceSubject(id(1)), []byte(fmt.Sprintf(`{"task_id":%q,"state":"queued","position":2,"based_on_seq":31,"reason":"later"}`, id(1)))); err != nil {
		t.Fatal(err)
	}
	streams[0].until(10*time.Second, func(g []sse) bool { return strings.Contains(fmt.Sprint(g), `"reason":"later"`) })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return: a stream held the shutdown")
	}
}
