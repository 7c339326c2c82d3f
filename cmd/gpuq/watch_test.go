package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
)

// TestShorten: on a terminal, history and watch shorten long payloads.
func TestShorten(t *testing.T) {
	env := map[string]string{}
	for _, k := range []string{"HOME", "PATH", "LANG", "SHELL", "TERM", "USER"} {
		env[k] = strings.Repeat("x", 300)
	}
	sub, _ := json.Marshal(events.Submitted{TaskID: "01a22962-7813-7583-8cf9-b646a9f5e718", Name: "rerun-seed2", Team: "vision",
		Priority: "low", GPUs: 8, Hours: 0.5, Hypothesis: "seed 2 confirms the 76.1% top-1", Command: "python3 examples/train.py",
		Env: env})
	disp, _ := json.Marshal(events.Dispatched{TaskID: "01a22962-7813-7583-8cf9-b646a9f5e718", BasedOnSeq: 2, Reason: "placed in queue order",
		Placements: []events.Placement{{Node: "node-1", GPUs: []string{"GPU-b783482e-bf1a-5a7e-a8a2-bdf7a0dd4cf3", "GPU-5f08e16b-d6c8-518d-b27d-e981b7773404"}}}})
	start, _ := json.Marshal(events.Started{TaskID: "01a22962-7813-7583-8cf9-b646a9f5e718", Node: "node-1",
		LogDir: "/home/ada/gpuq/.gpuq/agents/node-1/tasks/01a22962-7813-7583-8cf9-b646a9f5e718"})
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"submitted":   {sub, `{"task_id":"01a22962-7813…","name":"rerun-seed2","team":"vision","priority":"low","gpus":8,"hours":0.5,"hypothesis":"seed 2 confirms the 76.1% top-1","command":"python3 examples/train.py",…}`},
		"dispatched":  {disp, `{"task_id":"01a22962-7813…","placements":[{"node":"node-1","gpus":["GPU-b783482e-…",…]}],"based_on_seq":2,"reason":"placed in queue order"}`},
		"started":     {start, `{"task_id":"01a22962-7813…","node":"node-1","pid":0,"log_dir":"…/01a22962-7813-7583-8cf9-b646a9f5e718"}`},
		"a long text": {[]byte(`{"hypothesis":"` + strings.Repeat("word ", 20) + `"}`), `{"hypothesis":"word word word word word word wo…"}`},
		"short":       {[]byte(`{"task_id":"t1","node":"n1"}`), `{"task_id":"t1","node":"n1"}`},
		"not JSON":    {[]byte(`not json`), `not json`},
	} {
		t.Run(name, func(t *testing.T) {
			if got := shorten(tc.data); got != tc.want {
				t.Errorf("shorten:\n got %s\nwant %s", got, tc.want)
			}
			if n := len([]rune(shorten(tc.data))); n > maxPayload+2 {
				t.Errorf("%d characters, more than %d", n, maxPayload+2)
			}
		})
	}
}

// syncBuf is a buffer written by one goroutine and read by another.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestWatchWaits: watch on a task not in the log yet waits for it, and
// ends with nil (exit 0) however the task ends.
func TestWatchWaits(t *testing.T) {
	for name, end := range map[string]events.Event{
		"completed": events.Completed{TaskID: "t1", Node: "node-1"},
		"failed":    events.Failed{TaskID: "t1", Node: "node-1", ExitCode: 1, Error: "exit code 1"},
		"cancelled": events.Cancelled{TaskID: "t1", Reason: "cancelled"},
	} {
		t.Run(name, func(t *testing.T) {
			l := memlog.New()
			var out, errOut syncBuf
			done := make(chan error, 1)
			go func() {
				done <- watch(context.Background(), l, "t1", true, entryFmt{}, false, &out, &errOut)
			}()
			select {
			case err := <-done:
				t.Fatalf("watch returned at once (%v); it should wait for the task", err)
			case <-time.After(200 * time.Millisecond):
			}
			if !strings.Contains(errOut.String(), "not in the log yet") {
				t.Errorf("stderr %q, want a note that it waits", errOut.String())
			}
			ctx := context.Background()
			for _, e := range []events.Event{
				events.Submitted{TaskID: "t1", Name: "n", Team: "t", Priority: "low", GPUs: 1, Hours: 1, Hypothesis: "h", Command: "c"},
				end,
			} {
				if _, err := events.Append(ctx, l, e, events.Meta{Time: time.Now()}, "", nil); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("watch: %v, want nil (exit 0)", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("watch did not end with the task")
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 2 || !strings.Contains(lines[1], `"type":"`+name+`"`) {
				t.Errorf("watch printed %q, want two lines ending with %s", out.String(), name)
			}
		})
	}
}
