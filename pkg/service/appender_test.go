package service_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
	"github.com/gpuq/gpuq/pkg/service"
	"pgregory.net/rapid"
)

// errTimeout stands for an ack that did not come (the outcome unknown);
// errRefused for an error the log answered (the outcome definite).
var (
	errTimeout = errors.New("test: ack timed out")
	errRefused = errors.New("test: refused by the log")
)

// fault is what the faulty log does to the first failing attempts of a
// message (by message id).
type fault struct {
	failing int   // attempts that fail (-1: all)
	err     error // their error
	stored  bool  // whether a failing attempt is stored nevertheless (an ack lost on its way back)
}

// faultyLog is a memlog whose appends fail as scripted; it is a Batcher
// and counts the batches and the appends tried.
type faultyLog struct {
	*memlog.Log
	mu       sync.Mutex
	faults   map[string]fault
	attempts map[string]int
	batches  int
}

func newFaultyLog(faults map[string]fault) *faultyLog {
	return &faultyLog{Log: memlog.New(), faults: faults, attempts: map[string]int{}}
}

func (l *faultyLog) Append(ctx context.Context, m events.Msg) (events.Ack, error) {
	l.mu.Lock()
	l.attempts[m.MsgID]++
	n, f := l.attempts[m.MsgID], l.faults[m.MsgID]
	l.mu.Unlock()
	if f.failing < 0 || n <= f.failing {
		if f.stored {
			if _, err := l.Log.Append(ctx, m); err != nil {
				return events.Ack{}, err
			}
		}
		return events.Ack{}, f.err
	}
	return l.Log.Append(ctx, m)
}

func (l *faultyLog) AppendBatch(ctx context.Context, ms []events.Msg) []events.Result {
	l.mu.Lock()
	l.batches++
	l.mu.Unlock()
	out := make([]events.Result, len(ms))
	for i, m := range ms {
		out[i].Ack, out[i].Err = l.Append(ctx, m)
	}
	return out
}

// stored is every message id in the log, in order.
func (l *faultyLog) stored(t *testing.T) []string {
	t.Helper()
	var ids []string
	if _, err := l.Read(context.Background(), 1, "", func(s events.Stored) error {
		ids = append(ids, string(s.Data))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestAppender(t *testing.T) {
	msg := func(id string) events.Msg { return events.Msg{Subject: "t." + id, Data: []byte(id), MsgID: id} }
	abc := []events.Msg{msg("a"), msg("b"), msg("c")}
	type want struct {
		stored    []string // message ids in the log at the end, in order
		errs      []error  // each message's final error (nil: acked)
		dup       []bool   // each message's ack is a duplicate
		last      uint64
		retries   int
		unknown   int
		maxBatchs int // at most this many batches (the first and one per retry round)
	}
	for _, tc := range []struct {
		name   string
		before []events.Msg // appended before the batch
		faults map[string]fault
		msgs   []events.Msg
		hold   func(n int) bool // Hold's answer at its n-th call (nil: no Hold)
		want   want
	}{{
		name: "every message acknowledged, in one batch",
		msgs: abc,
		want: want{stored: []string{"a", "b", "c"}, errs: []error{nil, nil, nil}, dup: []bool{false, false, false}, last: 3, maxBatchs: 1},
	}, {
		name:   "ack timeout on one message that was not stored: retried, stored once",
		faults: map[string]fault{"b": {failing: 1, err: errTimeout}},
		msgs:   abc,
		want:   want{stored: []string{"a", "c", "b"}, errs: []error{nil, nil, nil}, dup: []bool{false, false, false}, last: 3, retries: 1, maxBatchs: 2},
	}, {
		name:   "ack timeout on one message that was stored: the retry acks the original, nothing doubled",
		faults: map[string]fault{"b": {failing: 1, err: errTimeout, stored: true}},
		msgs:   abc,
		want:   want{stored: []string{"a", "b", "c"}, errs: []error{nil, nil, nil}, dup: []bool{false, true, false}, last: 3, retries: 1, maxBatchs: 2},
	}, {
		name:   "acks time out several times: retried until definite",
		faults: map[string]fault{"a": {failing: 3, err: errTimeout}, "c": {failing: 2, err: errTimeout, stored: true}},
		msgs:   abc,
		want:   want{stored: []string{"b", "c", "a"}, errs: []error{nil, nil, nil}, dup: []bool{false, false, true}, last: 3, retries: 5, maxBatchs: 4},
	}, {
		name:   "error the log answered on one message of the window: not retried, the others stored",
		faults: map[string]fault{"b": {failing: -1, err: errRefused}},
		msgs:   abc,
		want:   want{stored: []string{"a", "c"}, errs: []error{nil, errRefused, nil}, dup: []bool{false, false, false}, last: 2, maxBatchs: 1},
	}, {
		name:   "duplicate of a message stored before: its sequence counts in last",
		before: []events.Msg{msg("x"), msg("c"), msg("y")},
		msgs:   abc,
		want:   want{stored: []string{"x", "c", "y", "a", "b"}, errs: []error{nil, nil, nil}, dup: []bool{false, false, true}, last: 5, maxBatchs: 1},
	}, {
		name:   "a duplicate beyond the batch's own appends: last is the original's",
		before: []events.Msg{msg("x"), msg("y"), msg("a")},
		msgs:   []events.Msg{msg("a")},
		want:   want{stored: []string{"x", "y", "a"}, errs: []error{nil}, dup: []bool{true}, last: 3, maxBatchs: 1},
	}, {
		name:   "expected sequence refused: a conflict, not retried",
		before: []events.Msg{msg("x")},
		msgs:   []events.Msg{msg("a"), {Subject: "t.b", Data: []byte("b"), MsgID: "b", Expect: &events.Expect{Filter: "t.x", LastSeq: 7}}, msg("c")},
		want:   want{stored: []string{"x", "a", "c"}, errs: []error{nil, events.ErrConflict, nil}, dup: []bool{false, false, false}, last: 3, maxBatchs: 1},
	}, {
		name:   "unknown outcome while Hold turns false: stops, the outcome reported unknown",
		faults: map[string]fault{"b": {failing: -1, err: errTimeout}},
		msgs:   abc,
		hold:   func(n int) bool { return n <= 3 },
		want:   want{stored: []string{"a", "c"}, errs: []error{nil, errTimeout, nil}, dup: []bool{false, false, false}, last: 2, retries: 1, unknown: 1, maxBatchs: 2},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newFaultyLog(tc.faults)
			for _, m := range tc.before {
				if _, err := l.Log.Append(context.Background(), m); err != nil {
					t.Fatal(err)
				}
			}
			wake := make(chan struct{}, 1)
			a := service.NewAppender(l, wake)
			a.MinBackoff, a.MaxBackoff = time.Millisecond, 2*time.Millisecond
			a.Retry = func(err error) bool { return errors.Is(err, errTimeout) }
			holds := 0
			if tc.hold != nil {
				a.Hold = func() bool { holds++; return tc.hold(holds) }
			}
			if !a.Start(context.Background(), tc.msgs) || !a.Busy() {
				t.Fatal("Start: not started")
			}
			if a.Start(context.Background(), tc.msgs) {
				t.Fatal("Start while a batch is in flight: started another")
			}
			select {
			case <-wake:
			case <-time.After(10 * time.Second):
				t.Fatal("no wake after the batch")
			}
			r, ok := a.Take()
			if !ok || a.Busy() {
				t.Fatalf("Take after the wake: ok %v, busy %v", ok, a.Busy())
			}
			if got := l.stored(t); !slices.Equal(got, tc.want.stored) {
				t.Errorf("log holds %q, want %q", got, tc.want.stored)
			}
			for i, res := range r.Results {
				if !errors.Is(res.Err, tc.want.errs[i]) || (res.Err == nil) != (tc.want.errs[i] == nil) {
					t.Errorf("message %s: error %v, want %v", tc.msgs[i].MsgID, res.Err, tc.want.errs[i])
				}
				if res.Ack.Duplicate != tc.want.dup[i] {
					t.Errorf("message %s: duplicate %v, want %v", tc.msgs[i].MsgID, res.Ack.Duplicate, tc.want.dup[i])
				}
			}
			if r.Last != tc.want.last || r.Retries != tc.want.retries || r.Unknown != tc.want.unknown {
				t.Errorf("last %d, retries %d, unknown %d; want %d, %d, %d", r.Last, r.Retries, r.Unknown, tc.want.last, tc.want.retries, tc.want.unknown)
			}
			if l.batches == 0 || l.batches > tc.want.maxBatchs {
				t.Errorf("%d batches, want 1 to %d (one AppendBatch per round)", l.batches, tc.want.maxBatchs)
			}
		})
	}
}

// A batch whose context ends while an outcome is unknown ends with it
// unknown; Take before the end returns nothing.
func TestAppenderContextEnds(t *testing.T) {
	l := newFaultyLog(map[string]fault{"a": {failing: -1, err: errTimeout}})
	a := service.NewAppender(l, nil)
	a.MinBackoff, a.MaxBackoff = time.Millisecond, time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	a.Start(ctx, []events.Msg{{Subject: "t.a", Data: []byte("a"), MsgID: "a"}})
	if _, ok := a.Take(); ok {
		// Possible only if the batch already ended, which it cannot before cancel.
		t.Fatal("Take returned a batch whose outcome is still unknown")
	}
	cancel()
	r, ok := a.Wait(context.Background())
	if !ok || r.Unknown != 1 || r.Results[0].Err == nil || r.Last != 0 {
		t.Fatalf("after the context ended: ok %v, %+v; want the one message unknown, nothing acked", ok, r)
	}
}

// For any batch and any faults — acks lost before or after the append
// was stored, several times over, a refusal the log answers — the batch
// ends with every outcome definite, and the outcomes are the log's: a
// message is acknowledged exactly when the log holds it, and holds it
// once; Last is the highest sequence of the batch's messages in the log.
func TestPropAppenderOutcomesAreTheLogs(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 12).Draw(rt, "messages")
		before := rapid.IntRange(0, n).Draw(rt, "stored before") // the first ones appended before, same ids
		faults := map[string]fault{}
		var msgs []events.Msg
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("m%d", i)
			msgs = append(msgs, events.Msg{Subject: "t." + id, Data: []byte(id), MsgID: id})
			switch rapid.IntRange(0, 3).Draw(rt, "fault "+id) {
			case 1:
				faults[id] = fault{failing: rapid.IntRange(1, 3).Draw(rt, "lost "+id), err: errTimeout}
			case 2:
				faults[id] = fault{failing: rapid.IntRange(1, 3).Draw(rt, "ack lost "+id), err: errTimeout, stored: true}
			case 3:
				if i >= before { // the log answers a duplicate as one, whatever else it would refuse
					faults[id] = fault{failing: -1, err: errRefused}
				}
			}
		}
		l := newFaultyLog(faults)
		for _, m := range msgs[:before] {
			if _, err := l.Log.Append(context.Background(), m); err != nil {
				rt.Fatal(err)
			}
		}
		a := service.NewAppender(l, nil)
		a.MinBackoff, a.MaxBackoff = time.Microsecond, time.Microsecond
		a.Retry = func(err error) bool { return errors.Is(err, errTimeout) }
		a.Start(context.Background(), msgs)
		r, ok := a.Wait(context.Background())
		if !ok || r.Unknown != 0 {
			rt.Fatalf("ok %v, %d unknown: want every outcome definite", ok, r.Unknown)
		}
		at := map[string]uint64{} // message id → its sequence in the log
		if _, err := l.Read(context.Background(), 1, "", func(s events.Stored) error {
			if _, twice := at[string(s.Data)]; twice {
				rt.Fatalf("%s stored twice", s.Data)
			}
			at[string(s.Data)] = s.Seq
			return nil
		}); err != nil {
			rt.Fatal(err)
		}
		var last uint64
		for i, m := range msgs {
			seq, in := at[m.MsgID]
			res := r.Results[i]
			switch {
			case in && res.Err != nil:
				rt.Fatalf("%s is in the log at %d, its outcome is %v", m.MsgID, seq, res.Err)
			case !in && res.Err == nil:
				rt.Fatalf("%s is not in the log, its outcome is an ack at %d", m.MsgID, res.Ack.Seq)
			case in && res.Ack.Seq != seq:
				rt.Fatalf("%s is in the log at %d, acked at %d", m.MsgID, seq, res.Ack.Seq)
			case !in && !errors.Is(res.Err, errRefused):
				rt.Fatalf("%s is not in the log with outcome %v: want only a refusal to leave it out", m.MsgID, res.Err)
			}
			if in {
				last = max(last, seq)
			}
		}
		if r.Last != last {
			rt.Fatalf("Last %d, want %d", r.Last, last)
		}
	})
}
