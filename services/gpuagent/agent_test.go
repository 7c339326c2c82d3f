package gpuagent

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/embedded"
	"github.com/gpuq/gpuq/pkg/embedded/embeddedtest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
	"github.com/gpuq/gpuq/services/gpuagent/inventory"
	"github.com/gpuq/gpuq/services/gpuagent/runner"
)

// node is one agent under test: the event log is a memlog (the test plays
// the scheduler by appending its decisions), the heartbeat bucket is on
// an embedded NATS server, the tasks are real processes.
type node struct {
	t       *testing.T
	log     *memlog.Log
	alog    events.Log // the agent's own view of log (nil: log itself)
	srv     *embedded.Server
	dir     string
	name    string
	timeout time.Duration
	natsOff bool // the test shut the NATS server down
	inv     *inventory.Inventory
	cancel  context.CancelFunc
	done    chan error
}

func newNode(t *testing.T) *node {
	t.Helper()
	n := &node{t: t, log: memlog.New(), srv: embeddedtest.Server(t), dir: t.TempDir(), name: "n1", timeout: 30 * time.Second}
	t.Cleanup(func() {
		n.stop()
		// Whatever a test left running goes now (the runs' supervisors
		// would otherwise fence them only after the node timeout).
		if !n.natsOff {
			n.start(true)
			n.stop()
		}
		// The temporary directory goes only once no supervisor writes
		// into it any more.
		dirs, _ := filepath.Glob(filepath.Join(n.dir, "tasks", "*", "runs", "*"))
		for _, dir := range dirs {
			if p, err := runner.Adopt(dir); err == nil {
				select {
				case <-p.Wait():
				case <-time.After(15 * time.Second):
					t.Errorf("run %s still going at the end of the test", dir)
				}
			}
		}
	})
	return n
}

// start runs an agent on the node's data directory.
func (n *node) start(stopOnExit bool) {
	n.t.Helper()
	nc := embeddedtest.Connect(n.t, n.srv, "agent")
	js, err := jetstream.New(nc)
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	var once sync.Once
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() {
		var log events.Log = n.log
		if n.alog != nil {
			log = n.alog
		}
		n.done <- Run(ctx, Config{Log: log, JS: js, Node: n.name, DataDir: n.dir, CheckpointRoot: filepath.Join(n.dir, "ckpt"),
			Inventory: inventory.Options{Mock: true, MockGPUs: 2}, Inv: n.inv, Logger: zerolog.Nop(), Heartbeat: 200 * time.Millisecond,
			KillAfter: time.Second, NodeTimeout: n.timeout, StopOnExit: stopOnExit, Ready: func() { once.Do(func() { close(ready) }) }})
	}()
	select {
	case <-ready:
	case err := <-n.done:
		n.t.Fatalf("agent exited: %v", err)
	case <-time.After(20 * time.Second):
		n.t.Fatal("agent not ready in 20 s")
	}
}

// stop stops the agent (its tasks keep running unless it was started
// with stopOnExit).
func (n *node) stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	<-n.done
	n.cancel = nil
}

func (n *node) fold() *domain.State {
	st := domain.NewState()
	_, err := events.ReadAll(context.Background(), n.log, 1, "", func(r events.Record) error { st.Apply(r); return nil })
	if err != nil {
		n.t.Fatal(err)
	}
	return st
}

func (n *node) append(e events.Event) {
	n.t.Helper()
	if _, err := events.Append(context.Background(), n.log, e, events.Meta{Time: time.Now()}, "", nil); err != nil {
		n.t.Fatal(err)
	}
}

// run submits a task and dispatches it onto the node's GPUs by index.
func (n *node) run(id, command string, gpus ...int) {
	n.t.Helper()
	st := n.fold()
	node := st.Nodes[n.name]
	if node == nil {
		n.t.Fatal("the agent announced no node")
	}
	n.append(dt.Task().ID(id).GPUs(len(gpus)).Command(command).Submitted())
	pl := events.Placement{Node: n.name}
	for _, i := range gpus {
		pl.GPUs = append(pl.GPUs, node.GPUs[i].UUID)
	}
	d := dt.Dispatch(id, pl)
	d.BasedOnSeq = n.fold().Seq
	n.append(d)
}

// requeue plays the scheduler declaring the node lost and requeuing id.
func (n *node) requeue(id string) {
	st := n.fold()
	n.append(events.Lost{Node: n.name, Reason: "test: silent", BasedOnSeq: st.Seq})
	n.append(events.Requeued{TaskID: id, Reason: "node lost", BasedOnSeq: n.fold().Seq})
}

// waitState waits until the task is in state.
func (n *node) waitState(id string, state domain.TaskState, d time.Duration) *domain.Task {
	n.t.Helper()
	deadline := time.Now().Add(d)
	for {
		if t := n.fold().Tasks[id]; t != nil && t.State == state {
			return t
		}
		if time.Now().After(deadline) {
			t := n.fold().Tasks[id]
			got := domain.TaskState("absent")
			if t != nil {
				got = t.State
			}
			n.t.Fatalf("task %s is %s after %s, want %s; its events: %s", id, got, d, state, n.types(id))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// types lists the task's events in log order.
func (n *node) types(id string) string {
	var out []string
	_, _ = events.ReadAll(context.Background(), n.log, 1, events.TaskSubjects(id), func(r events.Record) error {
		out = append(out, string(r.Event.EventType()))
		return nil
	})
	return strings.Join(out, " ")
}

func (n *node) count(id string, typ events.Type) int {
	return strings.Count(" "+n.types(id)+" ", " "+string(typ)+" ")
}

// waitFile waits for path to exist and returns its content.
func waitFile(t *testing.T, path string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil {
			return string(b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not appear within %s", path, d)
	return ""
}

// TestRestart: an agent that stops (or is killed) leaves its tasks
// running; the next one adopts them and reports what really happened.
func TestRestart(t *testing.T) {
	tests := []struct {
		name string
		// command runs with $OUT a scratch directory.
		command string
		// whileDown runs between the two agents.
		whileDown func(n *node, out string)
		want      events.Type
		wantCode  int
		wantError string
	}{
		{
			name:    "live task: adopted, completes once",
			command: `touch "$OUT/started"; sleep 1.5; echo x >> "$OUT/runs"`,
			want:    events.TypeCompleted,
		},
		{
			name:    "finished while no agent ran: its real exit code",
			command: `touch "$OUT/started"; while [ ! -f "$OUT/go" ]; do sleep 0.05; done; echo boom >&2; exit 3`,
			whileDown: func(n *node, out string) {
				// It ends only now, with no agent watching.
				if err := os.WriteFile(filepath.Join(out, "go"), nil, 0o644); err != nil {
					n.t.Fatal(err)
				}
				time.Sleep(500 * time.Millisecond)
			},
			want: events.TypeFailed, wantCode: 3, wantError: "exit code 3",
		},
		{
			name:    "supervisor's pid reused: lost, reported failed, the job stopped",
			command: `touch "$OUT/started"; sleep 30`,
			whileDown: func(n *node, out string) {
				var runs []string
				for deadline := time.Now().Add(5 * time.Second); len(runs) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
					// The job runs a moment before its supervisor records it.
					runs, _ = filepath.Glob(filepath.Join(n.dir, "tasks", "t1", "runs", "*", "proc.json"))
				}
				if len(runs) != 1 {
					n.t.Fatalf("runs recorded: %v", runs)
				}
				b, _ := os.ReadFile(runs[0])
				// Another process now has the supervisor's pid: its start
				// time differs.
				s := strings.Replace(string(b), `"start_ticks":`, `"start_ticks":1`, 1)
				if err := os.WriteFile(runs[0], []byte(s), 0o644); err != nil {
					n.t.Fatal(err)
				}
			},
			want: events.TypeFailed, wantCode: -1, wantError: "process lost",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			out := t.TempDir()
			n.start(false)
			n.run("t1", strings.ReplaceAll(tc.command, "$OUT", out), 0, 1)
			n.waitState("t1", domain.Running, 10*time.Second)
			waitFile(t, filepath.Join(out, "started"), 10*time.Second)
			n.stop()
			if tc.whileDown != nil {
				tc.whileDown(n, out)
			}
			n.start(false)
			end := domain.Completed
			if tc.want == events.TypeFailed {
				end = domain.Failed
			}
			task := n.waitState("t1", end, 20*time.Second)
			if got := n.count("t1", tc.want); got != 1 {
				t.Errorf("%s reported %d times: %s", tc.want, got, n.types("t1"))
			}
			if n.count("t1", events.TypeStarted) != 1 {
				t.Errorf("started more than once: %s", n.types("t1"))
			}
			if tc.want == events.TypeFailed {
				if task.ExitCode != tc.wantCode || !strings.Contains(task.Error, tc.wantError) {
					t.Errorf("failed with exit %d %q, want %d %q", task.ExitCode, task.Error, tc.wantCode, tc.wantError)
				}
			}
			if b, _ := os.ReadFile(filepath.Join(out, "runs")); strings.Count(string(b), "x") > 1 {
				t.Errorf("the command ran %d times", strings.Count(string(b), "x"))
			}
		})
	}
}

// TestMovedWhileDown: the log moved the task while its agent was down (the
// node was declared lost); the next agent stops the process without a
// report, and a task dispatched onto the same GPUs starts only after the
// old process is gone.
func TestMovedWhileDown(t *testing.T) {
	n := newNode(t)
	out := t.TempDir()
	n.start(false)
	// The old task ignores SIGTERM for a while: the next must wait for it.
	n.run("old", `trap 'sleep 0.7; date +%s.%N > `+out+`/old.end; exit 143' TERM; touch `+out+`/old.started; while :; do sleep 0.1; done`, 0, 1)
	n.waitState("old", domain.Running, 10*time.Second)
	waitFile(t, filepath.Join(out, "old.started"), 10*time.Second)
	n.stop()
	n.requeue("old")
	// The node comes back (the next agent announces it) and gets new work
	// on the same GPUs.
	n.start(false)
	n.run("new", `date +%s.%N > `+out+`/new.start`, 0, 1)
	n.waitState("new", domain.Completed, 20*time.Second)
	oldEnd, newStart := waitFile(t, filepath.Join(out, "old.end"), 10*time.Second), waitFile(t, filepath.Join(out, "new.start"), time.Second)
	if parse(t, newStart) < parse(t, oldEnd) {
		t.Errorf("the new task started at %s, before the old process ended at %s", newStart, oldEnd)
	}
	if got := n.types("old"); strings.Contains(got, "failed") || strings.Contains(got, "completed") || strings.Contains(got, "preempted") {
		t.Errorf("the moved task was reported by its old node: %s", got)
	}
}

func parse(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestPartition: cut off from NATS for longer than the node timeout, the
// agent stops its tasks with the preemption protocol.
func TestPartition(t *testing.T) {
	n := newNode(t)
	n.timeout = 1500 * time.Millisecond
	out := t.TempDir()
	n.start(false)
	n.run("t1", `exec python3 -c 'import signal, sys, time
def ckpt(*_):
    open("`+out+`/ckpt", "w").write("saved")
    sys.exit(0)
signal.signal(signal.SIGUSR1, ckpt)
open("`+out+`/started", "w").close()
time.sleep(60)'`, 0)
	n.waitState("t1", domain.Running, 10*time.Second)
	waitFile(t, filepath.Join(out, "started"), 10*time.Second)
	n.srv.Shutdown() // heartbeats fail from now on; the log (memlog) stays
	n.natsOff = true
	if got := waitFile(t, filepath.Join(out, "ckpt"), 15*time.Second); got != "saved" {
		t.Errorf("checkpoint = %q", got)
	}
}

// TestStopOnExit: an agent told to stop its tasks on exit preempts them;
// the next agent reports them preempted, so they resume elsewhere.
func TestStopOnExit(t *testing.T) {
	n := newNode(t)
	out := t.TempDir()
	n.start(true)
	n.run("t1", `touch `+out+`/started; sleep 30`, 0)
	n.waitState("t1", domain.Running, 10*time.Second)
	waitFile(t, filepath.Join(out, "started"), 10*time.Second)
	n.stop()
	n.start(false)
	n.waitState("t1", domain.Preempting, 20*time.Second)
	if n.count("t1", events.TypePreempted) != 1 || n.count("t1", events.TypeFailed) != 0 {
		t.Errorf("history: %s", n.types("t1"))
	}
}

// TestGPUTurnsUnhealthy: a GPU marked unhealthy mid-task is reported, and
// the task that dies with it is reported preempted (it resumes elsewhere
// from its checkpoint), not failed.
func TestGPUTurnsUnhealthy(t *testing.T) {
	n := newNode(t)
	inv, err := inventory.Open(inventory.Options{Node: n.name, Mock: true, MockGPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inv.Close() })
	n.inv = inv
	out := t.TempDir()
	n.start(false)
	n.run("t1", `touch `+out+`/started; while [ ! -f `+out+`/crash ]; do sleep 0.05; done; exit 1`, 0)
	n.waitState("t1", domain.Running, 10*time.Second)
	waitFile(t, filepath.Join(out, "started"), 10*time.Second)
	gpu := n.fold().Tasks["t1"].Placements[0].GPUs[0]
	inv.MarkUnhealthy(gpu, "Xid 79 (test)")
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := n.fold()
		if g := st.Nodes[n.name].GPUs[0]; !g.Healthy && g.UUID == gpu && strings.Contains(st.Nodes[n.name].Reason, "Xid 79") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent did not report the GPU unhealthy")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(out, "crash"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	n.waitState("t1", domain.Preempting, 10*time.Second)
	if n.count("t1", events.TypeFailed) != 0 {
		t.Errorf("history: %s", n.types("t1"))
	}
}

// TestSpooledCheckpoint: a ref the job's `gpuq checkpoint` kept because
// NATS was unreachable is reported by the agent, so the task resumes from
// it.
func TestSpooledCheckpoint(t *testing.T) {
	n := newNode(t)
	n.start(false)
	n.run("t1", `echo -n step-42 > "$GPUQ_CHECKPOINT_DIR/.gpuq-pending-ref"; sleep 30`, 0)
	n.waitState("t1", domain.Running, 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for n.fold().Tasks["t1"].Checkpoint != "step-42" {
		if time.Now().After(deadline) {
			t.Fatalf("the spooled checkpoint was not reported: %s", n.types("t1"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(n.dir, "ckpt", "t1", ".gpuq-pending-ref")); !os.IsNotExist(err) {
		t.Errorf("the spool file is still there after the report (%v)", err)
	}
}

// TestBackFromLost: a node the scheduler declared lost while its agent
// kept running (a partition, a long pause) announces itself again and is
// up in the log.
func TestBackFromLost(t *testing.T) {
	n := newNode(t)
	n.start(false)
	n.append(events.Lost{Node: n.name, Reason: "test: silent", BasedOnSeq: n.fold().Seq})
	deadline := time.Now().Add(10 * time.Second)
	for n.fold().Nodes[n.name].State != domain.NodeUp {
		if time.Now().After(deadline) {
			t.Fatalf("the node is %s 10 s after it was declared lost, its agent running", n.fold().Nodes[n.name].State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStartedWithoutRun: the log has a task started on this node, but no
// run of it is recorded under the data directory (the agent was killed
// between appending started and starting the process: `kill -9` of gpuq
// dev in a burst). The next agent gives it back to the queue — preempted,
// not started, nothing lost, not counted as a preemption — instead of
// failing a task that never ran; a live run next to it is adopted as
// before and not given back.
func TestStartedWithoutRun(t *testing.T) {
	const ghost, live = "0194387a-0000-7000-8000-00000000000a", "0194387a-0000-7000-8000-00000000000b"
	n := newNode(t)
	out := t.TempDir()
	n.start(false)
	n.run(live, `touch `+out+`/started; sleep 2`, 1)
	n.waitState(live, domain.Running, 10*time.Second)
	waitFile(t, filepath.Join(out, "started"), 10*time.Second)
	n.stop()
	// What the killed agent left: started in the log, no run.
	st := n.fold()
	gpu := st.Nodes[n.name].GPUs[0].UUID
	n.append(dt.Task().ID(ghost).GPUs(1).Command(`touch ` + out + `/ghost-ran`).Submitted())
	d := dt.Dispatch(ghost, events.Placement{Node: n.name, GPUs: []string{gpu}})
	d.BasedOnSeq = n.fold().Seq
	n.append(d)
	n.append(events.Checkpointed{TaskID: ghost, Ref: "step-427"})
	n.append(events.Started{TaskID: ghost, Node: n.name})
	n.start(false)
	task := n.waitState(ghost, domain.Preempting, 10*time.Second)
	if n.count(ghost, events.TypeFailed) != 0 || n.count(ghost, events.TypePreempted) != 1 {
		t.Errorf("history: %s", n.types(ghost))
	}
	if task.Preemptions != 0 || task.LostGPUSecs != 0 || task.Checkpoint != "step-427" || !task.NotStarted() {
		t.Errorf("task after the report: preemptions %d, lost %g, checkpoint %q, reason %q", task.Preemptions, task.LostGPUSecs, task.Checkpoint, task.Reason)
	}
	n.waitState(live, domain.Completed, 20*time.Second)
	if got := n.types(live); strings.Contains(got, "preempted") || strings.Contains(got, "failed") {
		t.Errorf("the live run's history: %s", got)
	}
	if _, err := os.Stat(filepath.Join(out, "ghost-ran")); err == nil {
		t.Error("the task that never started ran")
	}
}

// TestRunOfAnotherLog: an agent on a data directory that holds a live run
// recorded under another event log (gpuq dev --data D, then the same D
// with --auth: another account, another stream) does not adopt it: the
// run keeps going and keeps its records, and nothing about it reaches
// this log. Before, the agent adopted it, found the log did not place it
// here, stopped it as an orphan and deleted its records, and back on its
// own log the task was failed: "no record of the task's process".
func TestRunOfAnotherLog(t *testing.T) {
	const id = "0194387a-0000-7000-8000-00000000000c"
	n := newNode(t)
	out := t.TempDir()
	n.start(false)
	n.run(id, `while :; do touch `+out+`/beat; sleep 0.1; done`, 0)
	n.waitState(id, domain.Running, 10*time.Second)
	waitFile(t, filepath.Join(out, "beat"), 10*time.Second)
	n.stop()
	runs, _ := filepath.Glob(filepath.Join(n.dir, "tasks", id, "runs", "*", "spec.json"))
	if len(runs) != 1 {
		t.Fatalf("runs recorded: %v", runs)
	}
	own := n.log
	n.log = memlog.New() // another log, the same data directory
	n.start(false)
	time.Sleep(1500 * time.Millisecond) // several passes of the agent
	if _, err := os.Stat(runs[0]); err != nil {
		t.Errorf("the run's records are gone: %v", err)
	}
	if err := os.Remove(filepath.Join(out, "beat")); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(out, "beat"), 5*time.Second) // still running
	if got := n.types(id); got != "" {
		t.Errorf("the other log has events of the run: %s", got)
	}
	n.stop()
	n.log = own // the cleanup stops the run through its own log
	if got := n.types(id); strings.Contains(got, "failed") || strings.Contains(got, "preempted") {
		t.Errorf("its own log: %s", got)
	}
}
