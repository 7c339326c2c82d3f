package service_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rs/zerolog"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/embedded/embeddedtest"
	"github.com/gpuq/gpuq/pkg/events"
	evjs "github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/events/memlog"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/service"
)

var t0 = dt.Epoch

// tb is what the helpers need of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
}

// clock is a test clock the memlog stamps appends with.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func appendEvent(t tb, l events.Log, e events.Event) uint64 {
	t.Helper()
	ack, err := events.Append(context.Background(), l, e, events.Meta{Time: t0}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Seq
}

func appendRaw(t tb, l events.Log, subject string, data []byte) {
	t.Helper()
	if _, err := l.Append(context.Background(), events.Msg{Subject: subject, Data: data}); err != nil {
		t.Fatal(err)
	}
}

func rawEnvelope(typ string, v int, data string) []byte {
	return fmt.Appendf(nil, `{"id":"x","type":%q,"v":%d,"time":"2025-01-06T09:00:00Z","data":%s}`, typ, v, data)
}

// badKinds are the bad records a foreign client can publish on a task's
// subjects, by name; each returns the subject and the bytes.
var badKinds = map[string]func(task, node string) (string, []byte){
	"malformed JSON": func(task, _ string) (string, []byte) {
		return events.TaskPrefix + task + ".checkpointed", []byte("{not json")
	},
	"unknown type": func(task, _ string) (string, []byte) {
		return events.TaskPrefix + task + ".exploded", rawEnvelope("exploded", 1, `{"task_id":"`+task+`"}`)
	},
	"unknown version": func(task, _ string) (string, []byte) {
		return events.TaskPrefix + task + ".submitted", rawEnvelope("submitted", 99, `{"task_id":"`+task+`"}`)
	},
	"invalid data": func(task, _ string) (string, []byte) {
		return events.TaskPrefix + task + ".amended", rawEnvelope("amended", 1, `{"task_id":5}`)
	},
	"oversized": func(task, _ string) (string, []byte) {
		return events.TaskPrefix + task + ".checkpointed", rawEnvelope("checkpointed", 1, `{"task_id":"`+task+`","ref":"`+strings.Repeat("x", events.MaxRecordBytes)+`"}`)
	},
	"another task's payload": func(task, _ string) (string, []byte) {
		return events.TaskPrefix + task + ".completed", rawEnvelope("completed", 1, `{"task_id":"other","node":"n0"}`)
	},
	"completion from a stranger": func(task, _ string) (string, []byte) {
		return events.TaskPrefix + task + ".completed", rawEnvelope("completed", 1, `{"task_id":"`+task+`","node":"node-that-does-not-exist"}`)
	},
	"deposed leader's requeue": func(task, _ string) (string, []byte) {
		return events.TaskPrefix + task + ".requeued", rawEnvelope("requeued", 1, `{"task_id":"`+task+`","reason":"x","epoch":1}`)
	},
}

// TestRunSkipsBadRecords: every kind of bad record, at start-up and live,
// is skipped, counted and logged once, the fold goes on past it, and the
// task it names still counts it for its expected sequence.
func TestRunSkipsBadRecords(t *testing.T) {
	logs := map[string]func(t *testing.T) events.Log{
		"memlog": func(*testing.T) events.Log { return memlog.New() },
		"jetstream": func(t *testing.T) events.Log {
			srv := embeddedtest.Server(t)
			l, err := evjs.Open(context.Background(), embeddedtest.Connect(t, srv, "test"), evjs.StreamConfig{MemoryStorage: true})
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
	}
	for logName, newLog := range logs {
		for name, bad := range badKinds {
			for _, when := range []string{"at start-up", "live"} {
				t.Run(logName+"/"+name+" "+when, func(t *testing.T) {
					runBadRecord(t, newLog(t), bad, when)
				})
			}
		}
	}
}

func runBadRecord(t *testing.T, l events.Log, bad func(task, node string) (string, []byte), when string) {
	appendEvent(t, l, dt.Node("n0").GPUs(2).Available())
	appendEvent(t, l, dt.Task().ID("t1").GPUs(1).Submitted())
	appendEvent(t, l, events.Dispatched{TaskID: "t1", Placements: []events.Placement{dt.On("n0", 0)}, Epoch: 5})
	appendEvent(t, l, events.Started{TaskID: "t1", Node: "n0", PID: 1})
	var logs strings.Builder
	var mu sync.Mutex
	f := service.New("test", l, zerolog.New(syncWriter{&mu, &logs}), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	publish := func() uint64 {
		subj, data := bad("t1", "n0")
		appendRaw(t, l, subj, data)
		return appendEvent(t, l, events.Checkpointed{TaskID: "t1", Ref: "after"}) // a good record after it
	}
	var last uint64
	if when == "at start-up" {
		last = publish()
	}
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, service.Hooks{Tick: 10 * time.Millisecond}) }()
	if when == "live" {
		waitReady(t, f)
		last = publish()
	}
	if err := f.WaitFor(ctx, last, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := f.Counters.Skipped.Load(); got != 1 {
		t.Errorf("skipped %d, want 1", got)
	}
	f.Read(func(st *domain.State) {
		tk := st.Tasks["t1"]
		if tk.State != domain.Running || tk.Checkpoint != "after" || tk.LastSeq != last {
			t.Errorf("t1 %s, checkpoint %q, last seq %d; want running, after, %d", tk.State, tk.Checkpoint, tk.LastSeq, last)
		}
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "record skipped"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs.String())
	}
}

type syncWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func waitReady(t *testing.T, f *service.Fold) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !f.Ready(); {
		if time.Now().After(deadline) {
			t.Fatal("not ready in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// flakyLog fails every follow after a few messages and fails the first
// reads, as a NATS connection that comes and goes.
type flakyLog struct {
	*memlog.Log
	failReads atomic.Int32
	follows   atomic.Int32
}

var errGone = errors.New("nats: connection closed")

func (l *flakyLog) Read(ctx context.Context, from uint64, filter string, fn func(events.Stored) error) (uint64, error) {
	if l.failReads.Add(-1) >= 0 {
		return 0, errGone
	}
	return l.Log.Read(ctx, from, filter, fn)
}

func (l *flakyLog) Follow(ctx context.Context, from uint64, filter string) (events.Follower, error) {
	l.follows.Add(1)
	f, err := l.Log.Follow(ctx, from, filter)
	return &flakyFollower{Follower: f}, err
}

type flakyFollower struct {
	events.Follower
	n int
}

func (f *flakyFollower) Next(ctx context.Context) (events.Stored, error) {
	if f.n++; f.n > 3 {
		return events.Stored{}, errGone
	}
	return f.Follower.Next(ctx)
}

// TestRunReconnects: failed reads are retried, a follow that fails is
// re-opened from the next unfolded sequence, nothing is lost or applied
// twice, and cancelling ends Run promptly with nil.
func TestRunReconnects(t *testing.T) {
	l := &flakyLog{Log: memlog.New()}
	l.failReads.Store(2)
	appendEvent(t, l, dt.Node("n0").GPUs(8).Available())
	f := service.New("test", l, zerolog.Nop(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	var applied atomic.Int32
	reacted := make(chan struct{}, 1000)
	done := make(chan error, 1)
	go func() {
		done <- f.Run(ctx, service.Hooks{
			Applied: func(_ *domain.State, _ events.Record, _ string) { applied.Add(1) },
			React: func(context.Context) error {
				select {
				case reacted <- struct{}{}:
				default:
				}
				return nil
			},
		})
	}()
	waitReady(t, f)
	const n = 20
	var last uint64
	for i := range n {
		last = appendEvent(t, l, dt.Task().ID(fmt.Sprintf("t%02d", i)).Submitted())
	}
	if err := f.WaitFor(ctx, last, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := applied.Load(); got != n+1 {
		t.Errorf("applied %d records, want %d (each once)", got, n+1)
	}
	f.Read(func(st *domain.State) {
		if len(st.Tasks) != n {
			t.Errorf("%d tasks, want %d", len(st.Tasks), n)
		}
	})
	if f.Counters.Reconnects.Load() == 0 || l.follows.Load() < 2 {
		t.Errorf("reconnects %d, follows %d: the follow was never re-opened", f.Counters.Reconnects.Load(), l.follows.Load())
	}
	if len(reacted) == 0 {
		t.Error("React never ran")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end 5 s after cancel")
	}
	if f.Ready() {
		t.Error("still ready after Run ended")
	}
}

// stallLog's follows go silent after a few records, without an error,
// until closed: an ordered consumer that lost its server and never
// noticed.
type stallLog struct {
	*memlog.Log
	after   int
	follows atomic.Int32
}

func (l *stallLog) Follow(ctx context.Context, from uint64, filter string) (events.Follower, error) {
	l.follows.Add(1)
	f, err := l.Log.Follow(ctx, from, filter)
	return &stallFollower{Follower: f, after: l.after, closed: make(chan struct{})}, err
}

type stallFollower struct {
	events.Follower
	after, n int
	once     sync.Once
	closed   chan struct{}
}

func (f *stallFollower) Next(ctx context.Context) (events.Stored, error) {
	if f.n++; f.n > f.after {
		select {
		case <-f.closed:
			return events.Stored{}, events.ErrClosed
		case <-ctx.Done():
			return events.Stored{}, ctx.Err()
		}
	}
	return f.Follower.Next(ctx)
}

func (f *stallFollower) Close() { f.once.Do(func() { close(f.closed) }); f.Follower.Close() }

// TestRunStalledFollow: a follow that stops delivering while the log
// moves on is re-opened by the watchdog, and the fold reaches the end of
// the log; a follow on an idle log is left alone.
func TestRunStalledFollow(t *testing.T) {
	for _, tc := range []struct {
		name       string
		appends    int  // records appended after the fold is ready
		wantStalls bool // the watchdog re-opened the follow
	}{
		{name: "log moves past a silent follow", appends: 12, wantStalls: true},
		{name: "idle log, the follow just waits", appends: 2, wantStalls: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &stallLog{Log: memlog.New(), after: 2}
			appendEvent(t, l, dt.Node("n0").GPUs(8).Available())
			f := service.New("test", l, zerolog.Nop(), nil)
			f.StallAfter = 200 * time.Millisecond
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- f.Run(ctx, service.Hooks{}) }()
			waitReady(t, f)
			var last uint64
			for i := range tc.appends {
				last = appendEvent(t, l, dt.Task().ID(fmt.Sprintf("t%02d", i)).Submitted())
			}
			if err := f.WaitFor(ctx, last, 20*time.Second); err != nil {
				t.Fatalf("%v (stalls %d, follows %d)", err, f.Counters.Stalls.Load(), l.follows.Load())
			}
			time.Sleep(4 * f.StallAfter) // an idle log must not look like a stall
			stalls := f.Counters.Stalls.Load()
			if got := stalls > 0; got != tc.wantStalls {
				t.Errorf("stalls %d (follows %d), want stalls: %v", stalls, l.follows.Load(), tc.wantStalls)
			}
			if tc.wantStalls && f.Counters.Reconnects.Load() < stalls {
				t.Errorf("reconnects %d < stalls %d: a stall is a reconnect too", f.Counters.Reconnects.Load(), stalls)
			}
			f.Read(func(st *domain.State) {
				if len(st.Tasks) != tc.appends {
					t.Errorf("%d tasks, want %d", len(st.Tasks), tc.appends)
				}
			})
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run after cancel: %v", err)
			}
		})
	}
}

// TestRunPausedConsumer: on JetStream, a follow whose consumer the
// server pauses keeps receiving heartbeats and nothing else, and reports
// no error: the watchdog re-opens it on a fresh consumer and the fold
// reaches the end of the log.
func TestRunPausedConsumer(t *testing.T) {
	srv := embeddedtest.Server(t)
	l, err := evjs.Open(context.Background(), embeddedtest.Connect(t, srv, "test"), evjs.StreamConfig{MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	appendEvent(t, l, dt.Node("n0").GPUs(8).Available())
	f := service.New("test", l, zerolog.Nop(), nil)
	f.StallAfter = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, service.Hooks{}) }()
	waitReady(t, f)
	// A record through the follow first: its consumer exists when paused.
	if err := f.WaitFor(ctx, appendEvent(t, l, dt.Node("n1").GPUs(8).Available()), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	st, err := l.JetStream().Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	paused := 0
	for name := range st.ConsumerNames(ctx).Name() {
		if _, err := l.JetStream().PauseConsumer(ctx, events.StreamName, name, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		paused++
	}
	if paused == 0 {
		t.Fatal("no consumer to pause: the fold does not follow")
	}
	var last uint64
	for i := range 5 {
		last = appendEvent(t, l, dt.Task().ID(fmt.Sprintf("t%02d", i)).Submitted())
	}
	if err := f.WaitFor(ctx, last, 30*time.Second); err != nil {
		t.Fatalf("%v (stalls %d)", err, f.Counters.Stalls.Load())
	}
	if f.Counters.Stalls.Load() == 0 {
		t.Error("caught up without a stall: the pause did not silence the follow, the test tests nothing")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
}

// TestRunHookError: only a hook's own error ends Run, with that error.
func TestRunHookError(t *testing.T) {
	l := memlog.New()
	appendEvent(t, l, dt.Node("n0").GPUs(1).Available())
	errStop := errors.New("lease lost")
	f := service.New("test", l, zerolog.Nop(), nil)
	err := f.Run(context.Background(), service.Hooks{React: func(context.Context) error { return errStop }})
	if !errors.Is(err, errStop) {
		t.Fatalf("Run = %v, want the hook's error", err)
	}
}

// TestWaitForBehind: a fold that cannot reach a sequence says so.
func TestWaitForBehind(t *testing.T) {
	f := service.New("test", memlog.New(), zerolog.Nop(), nil)
	if err := f.WaitFor(context.Background(), 3, 20*time.Millisecond); !errors.Is(err, service.ErrBehind) {
		t.Fatalf("WaitFor = %v, want ErrBehind", err)
	}
}

// TestPropBadRecordsChangeNothing: a log of a real run (the policy's
// dispatches, the agents' starts and completions) folds to the same
// tasks, nodes and owners with bad records interleaved anywhere as
// without them, and every task's expected sequence is the last message on
// its subjects, bad ones included (JetStream's rule).
func TestPropBadRecordsChangeNothing(t *testing.T) {
	kinds := slices.Sorted(maps.Keys(badKinds)) // sorted: rapid's draws reproduce
	rapid.Check(t, func(rt *rapid.T) {
		good := realRun(rt)
		clean, dirty := memlog.New(), memlog.New()
		clk := &clock{t: t0}
		clean.Now, dirty.Now = clk.now, clk.now
		var tasks []string
		for i, e := range good {
			clk.set(t0.Add(time.Duration(i) * time.Second))
			if s, ok := e.(events.Submitted); ok {
				tasks = append(tasks, s.TaskID)
			}
			for len(tasks) > 0 && rapid.IntRange(0, 3).Draw(rt, "bad here") == 0 {
				task := rapid.SampledFrom(tasks).Draw(rt, "task")
				subj, data := badKinds[rapid.SampledFrom(kinds).Draw(rt, "kind")](task, "n0")
				appendRaw(rt, dirty, subj, data)
			}
			appendEvent(rt, clean, e)
			appendEvent(rt, dirty, e)
		}
		a, b := foldAll(rt, clean), foldAll(rt, dirty)
		opts := cmp.Options{cmpopts.IgnoreUnexported(domain.State{}, domain.Task{}, domain.Node{}),
			cmpopts.IgnoreFields(domain.State{}, "Seq", "Skipped", "Ignored", "EpochSeq"),
			cmpopts.IgnoreFields(domain.Task{}, "LastSeq", "SubmitSeq", "DispatchSeq"), cmpopts.EquateEmpty()}
		if diff := cmp.Diff(a, b, opts); diff != "" {
			rt.Fatalf("with bad records (-clean +dirty):\n%s", diff)
		}
		lastOn := map[string]uint64{}
		if _, err := dirty.Read(context.Background(), 1, "", func(m events.Stored) error {
			if rest, ok := strings.CutPrefix(m.Subject, events.TaskPrefix); ok {
				id, _, _ := strings.Cut(rest, ".")
				lastOn[id] = m.Seq
			}
			return nil
		}); err != nil {
			rt.Fatal(err)
		}
		for id, tk := range b.Tasks {
			if tk.LastSeq != lastOn[id] {
				rt.Fatalf("task %s: LastSeq %d, the last message on its subjects is %d", id, tk.LastSeq, lastOn[id])
			}
		}
	})
}

func foldAll(t tb, l events.Log) *domain.State {
	f := service.New("test", l, zerolog.Nop(), nil)
	if err := f.CatchUp(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	var st *domain.State
	f.Read(func(s *domain.State) { st = s.Clone() })
	return st
}

// realRun is the events of a small cluster's life: submissions, the
// policy's dispatches, starts and completions reported by the right node,
// a cancellation now and then.
func realRun(rt *rapid.T) []events.Event {
	st := domain.NewState()
	pol := policy.New(policy.Options{})
	var out []events.Event
	seq := uint64(0)
	add := func(e events.Event) {
		seq++
		out = append(out, e)
		st.Apply(events.Record{Seq: seq, Envelope: events.Envelope{Type: e.EventType(), Time: t0.Add(time.Duration(seq) * time.Second)}, Event: e})
	}
	add(dt.Node("n0").GPUs(4).Available())
	add(dt.Node("n1").GPUs(4).Available())
	steps := rapid.IntRange(1, 30).Draw(rt, "steps")
	for i := range steps {
		switch rapid.IntRange(0, 3).Draw(rt, "action") {
		case 0, 1:
			prio := rapid.SampledFrom([]domain.Priority{domain.Critical, domain.High, domain.Medium, domain.Low}).Draw(rt, "priority")
			add(dt.Task().ID(fmt.Sprintf("t%02d", i)).GPUs(rapid.IntRange(1, 4).Draw(rt, "gpus")).Priority(prio).Submitted())
		case 2:
			for _, tk := range st.Active() {
				if tk.State == domain.Running {
					add(events.Completed{TaskID: tk.ID, Node: tk.Node})
					break
				}
			}
		case 3:
			if q := st.Queued(); len(q) > 0 {
				add(events.Cancelled{TaskID: q[0].ID})
			}
		}
		for _, d := range pol.Plan(policy.Input{State: st, Now: t0.Add(time.Duration(seq) * time.Second)}).Decisions {
			if d.Kind == policy.Dispatch {
				add(events.Dispatched{TaskID: d.TaskID, Placements: d.Placements, Epoch: 7, BasedOnSeq: seq})
				add(events.Started{TaskID: d.TaskID, Node: d.Placements[0].Node, PID: 1})
			}
		}
	}
	return out
}
