// Package logtest is the conformance suite of the events.Log port. Every
// adapter runs it: go test of events/memlog and events/jetstream.
package logtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpuq/gpuq/pkg/events"
)

// Factory returns a fresh, empty log for one test.
type Factory func(t *testing.T) events.Log

func msg(subj, body string) events.Msg { return events.Msg{Subject: subj, Data: []byte(body)} }

type entry struct {
	Seq     uint64
	Subject string
	Data    string
}

func readAll(t *testing.T, l events.Log, from uint64, filter string) []entry {
	t.Helper()
	var got []entry
	if _, err := l.Read(context.Background(), from, filter, func(s events.Stored) error {
		got = append(got, entry{s.Seq, s.Subject, string(s.Data)})
		return nil
	}); err != nil {
		t.Fatalf("Read: %v", err)
	}
	return got
}

func mustAppend(t *testing.T, l events.Log, m events.Msg) events.Ack {
	t.Helper()
	a, err := l.Append(context.Background(), m)
	if err != nil {
		t.Fatalf("Append(%s): %v", m.Subject, err)
	}
	return a
}

// Run runs the whole suite against logs made by newLog.
func Run(t *testing.T, newLog Factory) {
	t.Run("ordering", func(t *testing.T) {
		l := newLog(t)
		want := []entry{}
		for i := 1; i <= 50; i++ {
			subj := fmt.Sprintf("gpuq.task.t%d.submitted", i%7)
			a := mustAppend(t, l, msg(subj, fmt.Sprint(i)))
			if a.Seq != uint64(i) || a.Duplicate {
				t.Fatalf("append %d: ack %+v, want seq %d", i, a, i)
			}
			want = append(want, entry{uint64(i), subj, fmt.Sprint(i)})
		}
		if diff := cmp.Diff(want, readAll(t, l, 0, "")); diff != "" {
			t.Errorf("Read all (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(want[20:], readAll(t, l, 21, "")); diff != "" {
			t.Errorf("Read from 21 (-want +got):\n%s", diff)
		}
		last, err := l.LastSeq(context.Background())
		if err != nil || last != 50 {
			t.Errorf("LastSeq = %d, %v; want 50", last, err)
		}
	})
	t.Run("get by sequence", func(t *testing.T) {
		l := newLog(t)
		g, ok := l.(events.Getter)
		if !ok {
			t.Skip("not a Getter")
		}
		for i := 1; i <= 3; i++ {
			mustAppend(t, l, msg(fmt.Sprintf("gpuq.task.t%d.submitted", i), fmt.Sprint(i)))
		}
		m, err := g.Get(context.Background(), 2)
		if err != nil || m.Seq != 2 || m.Subject != "gpuq.task.t2.submitted" || string(m.Data) != "2" || m.Time.IsZero() {
			t.Fatalf("Get(2) = %+v, %v", m, err)
		}
		for _, seq := range []uint64{0, 4} {
			if _, err := g.Get(context.Background(), seq); err == nil {
				t.Errorf("Get(%d) of a 3-message log: no error", seq)
			}
		}
	})
	t.Run("read filter", func(t *testing.T) {
		l := newLog(t)
		mustAppend(t, l, msg("gpuq.task.a.submitted", "1"))
		mustAppend(t, l, msg("gpuq.task.b.submitted", "2"))
		mustAppend(t, l, msg("gpuq.node.n1.available", "3"))
		mustAppend(t, l, msg("gpuq.task.a.dispatched", "4"))
		want := []entry{{1, "gpuq.task.a.submitted", "1"}, {4, "gpuq.task.a.dispatched", "4"}}
		if diff := cmp.Diff(want, readAll(t, l, 0, "gpuq.task.a.>")); diff != "" {
			t.Errorf("filter task a (-want +got):\n%s", diff)
		}
		if got := readAll(t, l, 0, "gpuq.task.zzz.>"); len(got) != 0 {
			t.Errorf("filter with no match: %v", got)
		}
		if got := readAll(t, l, 0, "gpuq.node.*.available"); len(got) != 1 {
			t.Errorf("node filter: %v", got)
		}
	})
	t.Run("empty log", func(t *testing.T) {
		l := newLog(t)
		if got := readAll(t, l, 0, ""); len(got) != 0 {
			t.Errorf("empty log read %v", got)
		}
	})
	t.Run("dedupe by message id", func(t *testing.T) {
		l := newLog(t)
		a1 := mustAppend(t, l, events.Msg{Subject: "gpuq.task.x.submitted", Data: []byte("first"), MsgID: "k1"})
		mustAppend(t, l, msg("gpuq.task.y.submitted", "other"))
		a2 := mustAppend(t, l, events.Msg{Subject: "gpuq.task.z.submitted", Data: []byte("retry"), MsgID: "k1"})
		if !a2.Duplicate || a2.Seq != a1.Seq {
			t.Errorf("retry ack %+v, want duplicate of seq %d", a2, a1.Seq)
		}
		got := readAll(t, l, 0, "")
		if len(got) != 2 || got[0].Data != "first" {
			t.Errorf("log after retry: %v", got)
		}
	})
	t.Run("expected sequence", func(t *testing.T) {
		l := newLog(t)
		ctx := context.Background()
		tests := []struct {
			name    string
			subject string
			expect  events.Expect
			wantErr error
		}{
			{"first on empty filter", "gpuq.task.a.submitted", events.Expect{Filter: "gpuq.task.a.>", LastSeq: 0}, nil},
			{"other task unaffected", "gpuq.task.b.submitted", events.Expect{Filter: "gpuq.task.b.>", LastSeq: 0}, nil},
			{"follow-up on last seq", "gpuq.task.a.dispatched", events.Expect{Filter: "gpuq.task.a.>", LastSeq: 1}, nil},
			{"stale seq conflicts", "gpuq.task.a.started", events.Expect{Filter: "gpuq.task.a.>", LastSeq: 1}, events.ErrConflict},
			{"zero when not empty conflicts", "gpuq.task.b.cancelled", events.Expect{Filter: "gpuq.task.b.>", LastSeq: 0}, events.ErrConflict},
			{"current seq accepted", "gpuq.task.a.started", events.Expect{Filter: "gpuq.task.a.>", LastSeq: 3}, nil},
		}
		for _, tc := range tests {
			e := tc.expect
			_, err := l.Append(ctx, events.Msg{Subject: tc.subject, Data: []byte(tc.name), Expect: &e})
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("%s: err = %v, want %v", tc.name, err, tc.wantErr)
			}
		}
		if got := readAll(t, l, 0, ""); len(got) != 4 {
			t.Errorf("conflicting appends must append nothing; log has %d", len(got))
		}
	})
	t.Run("follow from a sequence", func(t *testing.T) {
		l := newLog(t)
		for i := 1; i <= 5; i++ {
			mustAppend(t, l, msg(fmt.Sprintf("gpuq.task.f%d.submitted", i), fmt.Sprint(i)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		f, err := l.Follow(ctx, 3, "")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		appended := make(chan error, 1)
		go func() {
			time.Sleep(50 * time.Millisecond)
			for i := 6; i <= 8; i++ {
				if _, err := l.Append(context.Background(), msg(fmt.Sprintf("gpuq.task.f%d.submitted", i), fmt.Sprint(i))); err != nil {
					appended <- err
					return
				}
			}
			appended <- nil
		}()
		// The follower may see a message before its append is acked: wait
		// for the appender before the test (and its connection) ends.
		defer func() {
			if err := <-appended; err != nil {
				t.Errorf("Append: %v", err)
			}
		}()
		for want := uint64(3); want <= 8; want++ {
			s, err := f.Next(ctx)
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if s.Seq != want || string(s.Data) != fmt.Sprint(want) {
				t.Fatalf("Next = seq %d %q, want %d", s.Seq, s.Data, want)
			}
		}
	})
	t.Run("follow filtered and close", func(t *testing.T) {
		l := newLog(t)
		mustAppend(t, l, msg("gpuq.task.a.submitted", "1"))
		mustAppend(t, l, msg("gpuq.node.n.available", "2"))
		mustAppend(t, l, msg("gpuq.task.a.dispatched", "3"))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		f, err := l.Follow(ctx, 0, "gpuq.node.>")
		if err != nil {
			t.Fatal(err)
		}
		s, err := f.Next(ctx)
		if err != nil || s.Seq != 2 {
			t.Fatalf("Next = %d, %v; want 2", s.Seq, err)
		}
		f.Close()
		if _, err := f.Next(ctx); err == nil {
			t.Fatal("Next after Close returned no error")
		}
	})
	t.Run("follow ends with context", func(t *testing.T) {
		l := newLog(t)
		ctx, cancel := context.WithCancel(context.Background())
		f, err := l.Follow(ctx, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		go func() { time.Sleep(30 * time.Millisecond); cancel() }()
		if _, err := f.Next(ctx); err == nil {
			t.Fatal("Next on cancelled ctx returned no error")
		}
	})
	t.Run("event round trip", func(t *testing.T) {
		l := newLog(t)
		ctx := context.Background()
		now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
		in := events.Submitted{TaskID: "t1", Name: "n", Team: "a", Priority: "high", GPUs: 2, Hours: 1, Hypothesis: "h", Command: "true", Preemptible: true, SubmittedAt: now}
		if _, err := events.Append(ctx, l, in, events.Meta{Time: now}, "", nil); err != nil {
			t.Fatal(err)
		}
		var got []events.Record
		if _, err := events.ReadAll(ctx, l, 0, "", func(r events.Record) error { got = append(got, r); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Subject != "gpuq.task.t1.submitted" {
			t.Fatalf("got %+v", got)
		}
		if diff := cmp.Diff(events.Event(in), got[0].Event); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	})
	t.Run("append all", func(t *testing.T) {
		exp := func(task string, seq uint64) *events.Expect {
			return &events.Expect{Filter: "gpuq.task." + task + ".>", LastSeq: seq}
		}
		type want struct {
			Seq       uint64
			Duplicate bool
			Conflict  bool
		}
		for _, tc := range []struct {
			name   string
			before []events.Msg // appended one by one first
			batch  []events.Msg
			want   []want
			stored []string // subjects in the log afterwards
		}{
			{name: "empty batch"},
			{
				name:   "in order",
				batch:  []events.Msg{msg("gpuq.task.a.submitted", "1"), msg("gpuq.task.b.submitted", "2"), msg("gpuq.task.a.dispatched", "3")},
				want:   []want{{Seq: 1}, {Seq: 2}, {Seq: 3}},
				stored: []string{"gpuq.task.a.submitted", "gpuq.task.b.submitted", "gpuq.task.a.dispatched"},
			},
			{
				name:   "duplicate id in the batch and before it",
				before: []events.Msg{{Subject: "gpuq.task.a.submitted", Data: []byte("0"), MsgID: "x"}},
				batch: []events.Msg{{Subject: "gpuq.task.b.submitted", Data: []byte("1"), MsgID: "y"},
					{Subject: "gpuq.task.b.submitted", Data: []byte("2"), MsgID: "y"},
					{Subject: "gpuq.task.a.submitted", Data: []byte("3"), MsgID: "x"}},
				want:   []want{{Seq: 2}, {Seq: 2, Duplicate: true}, {Seq: 1, Duplicate: true}},
				stored: []string{"gpuq.task.a.submitted", "gpuq.task.b.submitted"},
			},
			{
				name:   "expectation on an earlier message of the batch",
				batch:  []events.Msg{{Subject: "gpuq.task.a.dispatched", Expect: exp("a", 0)}, {Subject: "gpuq.task.a.started", Expect: exp("a", 1)}},
				want:   []want{{Seq: 1}, {Seq: 2}},
				stored: []string{"gpuq.task.a.dispatched", "gpuq.task.a.started"},
			},
			{
				name:   "the second guard of one task conflicts, the rest is stored",
				before: []events.Msg{msg("gpuq.task.a.submitted", "0")},
				batch: []events.Msg{{Subject: "gpuq.task.a.dispatched", Expect: exp("a", 1)}, {Subject: "gpuq.task.a.cancelled", Expect: exp("a", 1)},
					{Subject: "gpuq.task.b.dispatched", Expect: exp("b", 7)}, msg("gpuq.task.c.submitted", "3")},
				want:   []want{{Seq: 2}, {Conflict: true}, {Conflict: true}, {Seq: 3}},
				stored: []string{"gpuq.task.a.submitted", "gpuq.task.a.dispatched", "gpuq.task.c.submitted"},
			},
		} {
			t.Run(tc.name, func(t *testing.T) {
				l := newLog(t)
				for _, m := range tc.before {
					mustAppend(t, l, m)
				}
				for i := range tc.batch {
					if tc.batch[i].Data == nil {
						tc.batch[i].Data = []byte(tc.batch[i].Subject)
					}
				}
				res := events.AppendAll(context.Background(), l, tc.batch)
				got := make([]want, len(res))
				for i, r := range res {
					switch {
					case errors.Is(r.Err, events.ErrConflict):
						got[i].Conflict = true
					case r.Err != nil:
						t.Fatalf("message %d: %v", i, r.Err)
					default:
						got[i] = want{Seq: r.Ack.Seq, Duplicate: r.Ack.Duplicate}
					}
				}
				if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("results (-want +got):\n%s", diff)
				}
				var subjects []string
				for _, e := range readAll(t, l, 1, "") {
					subjects = append(subjects, e.Subject)
				}
				if diff := cmp.Diff(tc.stored, subjects, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("log (-want +got):\n%s", diff)
				}
			})
		}
	})
}
