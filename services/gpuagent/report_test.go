package gpuagent

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// faultyReports is the agent's log whose exit reports fail as fail says,
// at each attempt: whether the failing append is stored anyway (its ack
// lost), and the error (nil: the append goes through).
type faultyReports struct {
	events.Log
	fail     func(msgID string, attempt int) (stored bool, err error)
	mu       sync.Mutex
	attempts map[string]int
}

func (l *faultyReports) Append(ctx context.Context, m events.Msg) (events.Ack, error) {
	if !strings.HasPrefix(m.MsgID, "exit:") {
		return l.Log.Append(ctx, m)
	}
	l.mu.Lock()
	l.attempts[m.MsgID]++
	n := l.attempts[m.MsgID]
	l.mu.Unlock()
	stored, err := l.fail(m.MsgID, n)
	if err == nil || stored {
		ack, aerr := l.Log.Append(ctx, m)
		if err == nil || aerr != nil {
			return ack, aerr
		}
	}
	return events.Ack{}, err
}

func (l *faultyReports) AppendBatch(ctx context.Context, ms []events.Msg) []events.Result {
	out := make([]events.Result, len(ms))
	for i, m := range ms {
		out[i].Ack, out[i].Err = l.Append(ctx, m)
	}
	return out
}

func (l *faultyReports) tries(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for id, k := range l.attempts {
		if strings.HasPrefix(id, prefix) {
			n += k
		}
	}
	return n
}

// Exit reports go out together (events.AppendAll), and one whose append fails — its ack
// lost after it was stored, the append lost, an error on one report of
// the batch — is appended again until the log has it: each task ends
// with exactly one report, and its run directory goes once reported.
func TestReportsWithUnknownOutcomes(t *testing.T) {
	errLost := errors.New("test: no ack in time")
	for _, tc := range []struct {
		name string
		fail func(msgID string, attempt int) (bool, error)
		// tries bounds the report appends the agent makes in all: one
		// the log lacks is appended again; one the log holds already,
		// its ack lost, at most once more (a de-duplicated no-op), none
		// once the fold shows it.
		minTries, maxTries int
	}{
		{"ack lost after the report was stored", func(id string, n int) (bool, error) {
			return true, map[bool]error{true: errLost}[strings.HasPrefix(id, "exit:t1:") && n == 1]
		}, 2, 3},
		{"report lost twice", func(id string, n int) (bool, error) {
			return false, map[bool]error{true: errLost}[strings.HasPrefix(id, "exit:t1:") && n <= 2]
		}, 4, 4},
		{"error on one report of the batch, the other stored", func(id string, n int) (bool, error) {
			return false, map[bool]error{true: errors.New("test: refused")}[strings.HasPrefix(id, "exit:t2:") && n == 1]
		}, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			fl := &faultyReports{Log: n.log, fail: tc.fail, attempts: map[string]int{}}
			n.alog = fl
			n.start(true)
			n.run("t1", `sleep 0.5`, 0)
			n.run("t2", `sleep 0.5`, 1)
			for _, id := range []string{"t1", "t2"} {
				n.waitState(id, domain.Completed, 30*time.Second)
			}
			time.Sleep(500 * time.Millisecond) // any report appended twice would be there by now
			for _, id := range []string{"t1", "t2"} {
				if c := n.count(id, events.TypeCompleted); c != 1 {
					t.Errorf("%s: %d completed events, want 1; history %s", id, c, n.types(id))
				}
				if tries := fl.tries("exit:" + id + ":"); tries < 1 {
					t.Errorf("%s: its report was never appended", id)
				}
			}
			if tries := fl.tries("exit:"); tries < tc.minTries || tries > tc.maxTries {
				t.Errorf("%d report appends in all, want %d to %d", tries, tc.minTries, tc.maxTries)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				dirs, _ := filepath.Glob(filepath.Join(n.dir, "tasks", "*", "runs", "*"))
				if len(dirs) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("run directories %v left after both reports are in the log", dirs)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
