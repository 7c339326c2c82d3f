package scheduler

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/service"
)

// lossyLog is the test server's log whose scheduler appends of dispatches
// fail at their first attempt as fault says: the ack lost after the
// append was stored, the append lost, or refused by the server.
type lossyLog struct {
	events.Log
	fault    string
	mu       sync.Mutex
	attempts map[string]int
}

var errAckLost = errors.New("test: no ack in time")

func (l *lossyLog) Append(ctx context.Context, m events.Msg) (events.Ack, error) {
	l.mu.Lock()
	l.attempts[m.MsgID]++
	first := l.attempts[m.MsgID] == 1
	l.mu.Unlock()
	if first && strings.HasPrefix(m.MsgID, "dispatch:") {
		switch l.fault {
		case "ack lost":
			if _, err := l.Log.Append(ctx, m); err != nil {
				return events.Ack{}, err
			}
			return events.Ack{}, errAckLost
		case "append lost":
			return events.Ack{}, errAckLost
		case "refused":
			return events.Ack{}, &js.APIError{Code: 503, ErrorCode: 10077, Description: "test: refused"}
		}
	}
	return l.Log.Append(ctx, m)
}

// AppendBatch appends one at a time (a Batcher, so that the scheduler's
// batches come here).
func (l *lossyLog) AppendBatch(ctx context.Context, ms []events.Msg) []events.Result {
	out := make([]events.Result, len(ms))
	for i, m := range ms {
		out[i].Ack, out[i].Err = l.Append(ctx, m)
	}
	return out
}

// Whatever befalls the first append of each dispatch — its ack lost
// after it was stored, the append lost, the server refusing it — every
// task is dispatched exactly once, and the fold of the log skips nothing
// (no decision taken on a state without a dispatch that landed: no GPU
// given twice).
func TestDispatchesWithUnknownOutcomes(t *testing.T) {
	for _, tc := range []struct {
		fault   string
		retried bool // the scheduler logs a retry
	}{
		{fault: "none"},
		{fault: "ack lost", retried: true},
		{fault: "append lost", retried: true},
		{fault: "refused"},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			s := newServer(t)
			now := time.Now()
			tasks := []string{"q1", "q2", "q3", "q4", "q5"}
			s.append(t, now, dt.Node("n1").GPUs(2).Available())
			for _, id := range tasks {
				s.append(t, now, dt.Task().ID(id).GPUs(1).Submitted())
			}
			log := &lossyLog{Log: s.log, fault: tc.fault, attempts: map[string]int{}}
			logs := &syncBuffer{}
			ready := make(chan struct{})
			var once sync.Once
			sched := New(Config{Log: log, JS: s.log.JetStream(), Policy: policy.New(policy.Options{}), Logger: zerolog.New(logs),
				LeaseTTL: 2 * time.Second, Tick: 20 * time.Millisecond, NodeTimeout: -1, SnapshotEvery: -1,
				Ready: func() { once.Do(func() { close(ready) }) }})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- sched.Run(ctx) }()
			defer func() { cancel(); <-done }()
			select {
			case <-ready:
			case <-time.After(time.Minute):
				t.Fatal("the scheduler did not get ready")
			}
			// Each dispatched task is started and completed at once, as an
			// agent would, until every task has completed.
			ended := map[string]bool{}
			deadline := time.Now().Add(time.Minute)
			for len(ended) < len(tasks) {
				if time.Now().After(deadline) {
					t.Fatalf("completed %v of %v in a minute; log:\n%s", ended, tasks, logs.String())
				}
				st := sched.Snapshot()
				if st == nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				for _, id := range tasks {
					if tk := st.Tasks[id]; tk != nil && tk.State == domain.Dispatched && !ended[id] {
						ended[id] = true
						s.append(t, time.Now(), events.Started{TaskID: id, Node: tk.Node}, events.Completed{TaskID: id, Node: tk.Node})
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
			dispatches := map[string]int{}
			for _, e := range s.tail(t, 0) {
				if d, ok := e.(events.Dispatched); ok {
					dispatches[d.TaskID]++
				}
			}
			for _, id := range tasks {
				if dispatches[id] != 1 {
					t.Errorf("task %s dispatched %d times, want once", id, dispatches[id])
				}
			}
			skipped, err := service.Skipped(context.Background(), s.log)
			if err != nil {
				t.Fatal(err)
			}
			if len(skipped) > 0 {
				t.Errorf("the fold skipped %+v, want nothing (a GPU given twice, a task dispatched twice)", skipped)
			}
			if got := strings.Contains(logs.String(), "appends retried"); got != tc.retried {
				t.Errorf("retry logged: %v, want %v; log:\n%s", got, tc.retried, logs.String())
			}
		})
	}
}
