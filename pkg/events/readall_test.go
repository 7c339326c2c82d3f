package events_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
)

// TestReadAll: short reads are handled inline, long ones through the
// decoding goroutine; either way fn sees every record once, in log order,
// an undecodable one as an Invalid event that never stops the read, and
// the first fn error ends the read and is returned.
func TestReadAll(t *testing.T) {
	const n = 3000
	l := memlog.New()
	ctx := context.Background()
	at := time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)
	for i := 1; i <= n; i++ {
		e := events.Event(events.Completed{TaskID: fmt.Sprintf("t%d", i), Node: "n1"})
		subj, data, _, err := events.Encode(e, events.Meta{Time: at})
		if err != nil {
			t.Fatal(err)
		}
		if i == 2500 {
			data = []byte(`{"id":"x","type":"completed","v":1,"data":{"task_id":5}}`) // undecodable
		}
		if _, err := l.Append(ctx, events.Msg{Subject: subj, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	errStop := errors.New("stop")
	cases := map[string]struct {
		from    uint64
		filter  string
		stopAt  uint64 // fn fails here; 0: never
		wantN   int    // records fn saw
		wantBad int    // of them Invalid
		wantErr string // "" for no error
	}{
		"short, inline":                {from: 1, filter: "gpuq.task.t7.>", wantN: 1},
		"short, over the bad record":   {from: 2001, stopAt: 0, wantN: 1000, wantBad: 1},
		"long, over the bad record":    {from: 1, wantN: n, wantBad: 1},
		"long, fn fails early":         {from: 1, stopAt: 10, wantN: 10, wantErr: "stop"},
		"long, fn fails late":          {from: 1, stopAt: 2000, wantN: 2000, wantErr: "stop"},
		"long, fn fails past the bad":  {from: 1, stopAt: 2700, wantN: 2700, wantBad: 1, wantErr: "stop"},
		"long, past the bad record":    {from: 2501, wantN: 500},
		"bad record alone, by subject": {from: 1, filter: "gpuq.task.t2500.>", wantN: 1, wantBad: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var seqs []uint64
			bad := 0
			last, err := events.ReadAll(ctx, l, tc.from, tc.filter, func(r events.Record) error {
				seqs = append(seqs, r.Seq)
				if inv, ok := r.Event.(events.Invalid); ok {
					bad++
					if r.Seq != 2500 || !strings.HasPrefix(inv.Reason, "undecodable: seq 2500") {
						return fmt.Errorf("seq %d invalid: %s", r.Seq, inv.Reason)
					}
				}
				if want := fmt.Sprintf("t%d", r.Seq); r.Event.Key() != want {
					return fmt.Errorf("seq %d holds %s, want %s", r.Seq, r.Event.Key(), want)
				}
				if r.Seq == tc.stopAt {
					return errStop
				}
				return nil
			})
			if last != n {
				t.Errorf("last = %d, want %d", last, n)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if len(seqs) != tc.wantN || bad != tc.wantBad {
				t.Fatalf("fn saw %d records, %d invalid; want %d, %d", len(seqs), bad, tc.wantN, tc.wantBad)
			}
			for i := 1; i < len(seqs); i++ {
				if seqs[i] <= seqs[i-1] {
					t.Fatalf("record %d after %d: not in log order", seqs[i], seqs[i-1])
				}
			}
		})
	}
}

// TestReadSubmitted: the agent's read of a task's exported environment.
func TestReadSubmitted(t *testing.T) {
	l := memlog.New()
	ctx := context.Background()
	at := time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)
	for _, e := range []events.Event{
		events.Submitted{TaskID: "a", Name: "first", Env: map[string]string{"K": "1"}, SubmittedAt: at}, // seq 1
		events.Submitted{TaskID: "b", Name: "other", SubmittedAt: at},                                   // seq 2
		events.Completed{TaskID: "a", Node: "n1"},                                                       // seq 3
		events.Submitted{TaskID: "a", Name: "duplicate", SubmittedAt: at},                               // seq 4, ignored by the fold
	} {
		if _, err := events.Append(ctx, l, e, events.Meta{Time: at}, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string]struct {
		id       string
		seq      uint64
		wantName string
		wantEnv  string
		wantErr  error
	}{
		"at its sequence":         {id: "a", seq: 1, wantName: "first", wantEnv: "1"},
		"from before it":          {id: "b", seq: 1, wantName: "other"},
		"the first from seq on":   {id: "a", seq: 2, wantName: "duplicate"},
		"none from seq on":        {id: "b", seq: 3, wantErr: events.ErrNotSubmitted},
		"no such task":            {id: "c", seq: 1, wantErr: events.ErrNotSubmitted},
		"past the end of the log": {id: "a", seq: 9, wantErr: events.ErrNotSubmitted},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := events.ReadSubmitted(ctx, l, tc.id, tc.seq)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got.Name != tc.wantName || got.Env["K"] != tc.wantEnv {
				t.Errorf("got %q with K=%q, want %q with K=%q", got.Name, got.Env["K"], tc.wantName, tc.wantEnv)
			}
		})
	}
}
