package scheduler

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// TestStaleNodeAfterRestart: a scheduler that starts on a log naming a
// node whose agent has not reported since does not dispatch to it — it
// is not declared lost either while its timeout runs — until the node's
// heartbeat is fresh again.
func TestStaleNodeAfterRestart(t *testing.T) {
	s := newServer(t)
	now := time.Now()
	s.append(t, now, dt.Node("n1").GPUs(2).Available(), dt.Task().ID("q").GPUs(1).Submitted())
	var once sync.Once
	ready := make(chan struct{})
	sched := New(Config{Log: s.log, JS: s.log.JetStream(), Policy: policy.New(policy.Options{}), Logger: zerolog.Nop(),
		LeaseTTL: time.Second, Tick: 20 * time.Millisecond, NodeTimeout: 20 * time.Second,
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
	state := func() domain.TaskState {
		st := sched.Snapshot()
		if st == nil || st.Tasks["q"] == nil {
			return ""
		}
		return st.Tasks["q"].State
	}
	time.Sleep(time.Second)
	if got := state(); got != domain.Queued {
		t.Fatalf("without a heartbeat the task is %s, want queued", got)
	}
	if st := sched.Snapshot(); st.Nodes["n1"].State != domain.NodeUp {
		t.Fatalf("the node is %s within its timeout, want up", st.Nodes["n1"].State)
	}
	kv, err := s.log.JetStream().KeyValue(context.Background(), events.HeartbeatBucket)
	if err != nil {
		t.Fatal(err)
	}
	beat, _ := json.Marshal(map[string]any{"node": "n1", "time": time.Now().UTC()})
	if _, err := kv.Put(context.Background(), "n1", beat); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for state() != domain.Dispatched {
		if time.Now().After(deadline) {
			t.Fatalf("after a fresh heartbeat the task is %s, want dispatched", state())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
