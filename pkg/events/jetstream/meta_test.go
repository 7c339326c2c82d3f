package jetstream

import (
	"context"
	"strconv"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/embedded/embeddedtest"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestMetadataEqualsNATS: on messages delivered by the embedded server
// (every position of a read, with and without a filter, and a follow),
// metadata gives the stream sequence, timestamp and pending count of
// nats.go's Metadata, and takes the allocation-free path.
func TestMetadataEqualsNATS(t *testing.T) {
	srv := embeddedtest.Server(t)
	nc := embeddedtest.Connect(t, srv, "meta")
	ctx := context.Background()
	l, err := Open(ctx, nc, StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := 0; i < n; i++ {
		subj := "gpuq.task.t" + strconv.Itoa(i%7) + ".submitted"
		if _, err := l.Append(ctx, events.Msg{Subject: subj, Data: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, filter := range []string{"", "gpuq.task.t3.>"} {
		c, err := l.consumer(ctx, 1, filter)
		if err != nil {
			t.Fatal(err)
		}
		it, err := c.Messages(js.PullMaxMessages(64))
		if err != nil {
			t.Fatal(err)
		}
		want := n
		if filter != "" {
			want = n / 7
		}
		for k := 0; k < want; k++ {
			m, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			if _, _, _, ok := ackMeta(m.Reply()); !ok {
				t.Fatalf("ackMeta refused the server's reply %q", m.Reply())
			}
			got, err := metadata(m)
			if err != nil {
				t.Fatal(err)
			}
			if got.seq != md.Sequence.Stream || got.pending != md.NumPending || !got.time.Equal(md.Timestamp) || got.time.Location() != md.Timestamp.Location() {
				t.Fatalf("reply %q: metadata %+v, nats.go %d %d %v", m.Reply(), got, md.Sequence.Stream, md.NumPending, md.Timestamp)
			}
		}
		it.Stop()
	}
	if a := testing.AllocsPerRun(100, func() { _, _, _, _ = ackMeta("$JS.ACK._.ACC.GPUQ.c.1.2.3.1764547200000000000.4.xyz") }); a != 0 {
		t.Errorf("ackMeta allocates %v times", a)
	}
}

// TestAckMeta: both shapes of the ack reply subject, and everything that
// must be left to Metadata.
func TestAckMeta(t *testing.T) {
	ts := time.Date(2026, 11, 30, 12, 0, 0, 123, time.UTC).UnixNano()
	tss := strconv.FormatInt(ts, 10)
	for _, c := range []struct {
		reply        string
		ok           bool
		seq, pending uint64
		ts           int64
	}{
		{"$JS.ACK.GPUQ.cons.1.42.7." + tss + ".9", true, 42, 9, ts},                                   // v1: 9 tokens
		{"$JS.ACK._.HASH.GPUQ.cons.1.42.7." + tss + ".9.rnd", true, 42, 9, ts},                        // v2: 12 tokens
		{"$JS.ACK.dom.HASH.GPUQ.cons.1.42.7." + tss + ".0", true, 42, 0, ts},                          // v2 without the last token
		{"$JS.ACK.dom.HASH.GPUQ.cons.1.42.7." + tss + ".0.a.b", true, 42, 0, ts},                      // extra tokens
		{"$JS.ACK.GPUQ.cons.1.42.7." + tss, false, 0, 0, 0},                                           // 8 tokens
		{"$JS.ACK.x.GPUQ.cons.1.42.7." + tss + ".9", false, 0, 0, 0},                                  // 10 tokens
		{"$JS.ACK.GPUQ.cons.1.4x.7." + tss + ".9", false, 0, 0, 0},                                    // not a number
		{"$JS.ACK.GPUQ.cons.1..7." + tss + ".9", false, 0, 0, 0},                                      // empty number
		{"$JS.ACK.GPUQ.cons.1.-4.7." + tss + ".9", false, 0, 0, 0},                                    // sign
		{"$JS.ACK.GPUQ.cons.1.9999999999999999999.7." + tss + ".9", true, 9999999999999999999, 9, ts}, // 19 digits
		{"$JS.ACK.GPUQ.cons.1.18446744073709551616.7." + tss + ".9", false, 0, 0, 0},                  // 20 digits
		{"$JS.ACX.GPUQ.cons.1.42.7." + tss + ".9", false, 0, 0, 0},                                    // prefix
		{"", false, 0, 0, 0},
		{"_INBOX.abc", false, 0, 0, 0},
	} {
		seq, gotTS, pending, ok := ackMeta(c.reply)
		if ok != c.ok || ok && (seq != c.seq || pending != c.pending || gotTS != c.ts) {
			t.Errorf("ackMeta(%q) = %d %d %d %v, want %d %d %d %v", c.reply, seq, gotTS, pending, ok, c.seq, c.ts, c.pending, c.ok)
		}
	}
}
