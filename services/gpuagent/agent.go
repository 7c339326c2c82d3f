// Package gpuagent runs on every GPU host: it discovers the GPUs through
// NVML (inventory), publishes the node's availability and heartbeats, runs
// the tasks dispatched to the node as real processes (runner) with
// CUDA_VISIBLE_DEVICES set, delivers preemption signals with the grace
// period, and appends started / completed / failed / preempted.
//
// The agent folds the event log like every other service. Its only state
// of its own is a run directory per task run under its data directory
// (<data>/tasks/<id>/runs/<dispatch seq>/), kept by the run's supervisor:
// the job's identity (pid, start ticks, boot id) and, once it ends, its
// exit record; on a server with gpuq auth init's roles, also the run's
// own NATS credential (job.creds, minted with the node's job signing
// key). Tasks therefore outlive the agent: a restarted agent
// adopts every live run, reports the real end of a run that finished
// while it was down, and reports a run lost only when its process is
// really gone without an exit record (after a reboot, none is live).
//
// It appends started before it starts a process, guarded by the task's
// last sequence, so a cancel that raced ahead wins and no task runs
// twice. It never starts a task on a GPU a live process of another run
// still holds, nor reports such a GPU free; a run the log no longer
// places here (cancelled, moved after a partition, ended) is stopped
// through the signal protocol. Exit reports are retried until the log
// has them. Cut off from NATS for longer than the node timeout, the agent
// stops its tasks (the scheduler has requeued them by then); an agent
// that is gone that long is fenced by the supervisors themselves.
//
// A task spanning several nodes (a gang) runs its command once, on its first
// placement's node (rank 0), with GPUQ_PLACEMENTS describing every node's
// GPUs for the job's own launcher (torchrun, mpirun); the other nodes hold
// their GPUs for it.
package gpuagent

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	evjs "github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/metrics"
	"github.com/gpuq/gpuq/pkg/service"
	"github.com/gpuq/gpuq/services/gpuagent/inventory"
	"github.com/gpuq/gpuq/services/gpuagent/runner"
	"github.com/gpuq/gpuq/services/gpuagent/tasksock"
)

// Config of one agent.
type Config struct {
	Log  events.Log
	JS   jetstream.JetStream // heartbeat bucket
	Node string
	// DataDir keeps task logs under <DataDir>/tasks/<id>/output.log and
	// each run's records under <DataDir>/tasks/<id>/runs/<dispatch>/.
	DataDir string
	// CheckpointRoot is where tasks save checkpoints, shared by all nodes
	// (GPUQ_CHECKPOINT_DIR = <CheckpointRoot>/<task id>).
	CheckpointRoot string
	// NATSURL is passed to tasks as GPUQ_NATS_URL.
	NATSURL string
	// JobSigner, when set (a server with gpuq auth init's roles), is the
	// node's scoped signing key: each run gets a credential of its own,
	// <run dir>/job.creds (mode 0600, GPUQ_NATS_CREDS), good for that run's
	// checkpoint and history only (pkg/auth JobRole). Without it a job gets
	// no credential (GPUQ_NATS_CREDS is cleared) and reports checkpoints
	// through the spool when NATS refuses it.
	JobSigner *auth.JobSigner
	// JobCredsTTL bounds a job credential's life (default 7 days, or twice
	// the task's estimate when that is longer); the submitter refuses it as
	// soon as the run ends anyway.
	JobCredsTTL time.Duration
	Inventory   inventory.Options
	// Inv, when set, is used instead of opening one from Inventory (tests
	// inject GPU faults through it).
	Inv    *inventory.Inventory
	Logger zerolog.Logger
	Now    func() time.Time
	// Heartbeat interval (default 5 s).
	Heartbeat time.Duration
	// KillAfter is the wait between SIGTERM and SIGKILL (default 10 s).
	KillAfter time.Duration
	// ProgressEvery: a job's progress (its task socket's POST
	// /v1/progress) is recorded in the log when it moved, at most once per
	// ProgressEvery per task (default 10 s; negative: never, kept in
	// memory only).
	ProgressEvery time.Duration
	// NodeTimeout is the scheduler's: cut off from NATS this long, the
	// agent stops its tasks, and gone this long, the supervisors stop
	// them (default 30 s).
	NodeTimeout time.Duration
	// StopOnExit stops the tasks when the agent stops (gpuq dev: one
	// Ctrl-C ends everything; they are reported preempted at the next
	// start and resume from their checkpoints). Without it (gpuq-agent)
	// they keep running for a restarted or upgraded agent to adopt.
	StopOnExit bool
	Ready      func()
	// Replicas of the heartbeat bucket and the agent's snapshot bucket
	// (0: 1; 3 on a 3-node NATS cluster).
	Replicas int
	// SnapshotEvery: applied events between two snapshots of the agent's
	// fold, in its node's own bucket (events.SnapshotBucketOf); 0:
	// snapshot.DefaultEvery; negative: none.
	SnapshotEvery int
	// Metrics, when set, gets the agent's fold figures (pkg/metrics),
	// labelled with its node.
	Metrics prometheus.Registerer
}

// criticalXid lists Xid errors after which a GPU must not get new work:
// uncorrectable ECC, fallen off the bus, row-remap failure, NVLink and
// uncontained errors.
var criticalXid = map[uint64]bool{48: true, 63: true, 64: true, 74: true, 79: true, 92: true, 94: true, 95: true}

// proc is one run of a task on this node (this agent's or adopted).
type proc struct {
	key       string // runKey(task, dispatch)
	p         *runner.Proc
	task      string
	dispatch  uint64
	gpus      []string
	adopted   bool
	orphan    bool // the log no longer places the run here: stop, report nothing
	signalled bool
	termAt    time.Time // when to send SIGTERM (grace over)
	killAt    time.Time // when to send SIGKILL
	forced    bool
	cancelled bool
	preempt   bool
	fenced    bool         // stopped because the agent lost NATS
	progress  progressMark // the job's progress last recorded (socket.go)
}

// live reports whether the run's process still holds its GPUs.
func (pr *proc) live() bool { return pr.p != nil && !pr.p.Exited() }

type exit struct {
	key string
	res runner.Result
}

// report is an exit report not yet in the log; it is retried.
type report struct {
	ev       events.Event
	msgID    string
	task     string
	runDir   string
	dispatch uint64
}

// Agent is one running agent.
type Agent struct {
	cfg     Config
	inv     *inventory.Inventory
	st      *domain.State
	procs   map[string]*proc // by runKey
	pending map[string]report
	exits   chan exit
	wake    chan struct{} // poked after each exit is queued
	boot    string
	gpus    []inventory.GPU
	// reported remembers runs whose end is in the log (or was found lost).
	reported map[string]bool
	lastOK   atomic.Int64 // unix nanos of the last heartbeat NATS accepted
	fenced   bool
	procMu   sync.Mutex
	liveRuns []bool         // what countLive saw, for the heartbeat
	util     map[string]int // GPU UUID → utilization %, for the heartbeat
	fold     atomic.Pointer[service.Fold]
	socks    *tasksock.Server // the runs' task sockets (socket.go)
	// logID is the log's identity (events.Identifier; "" unknown),
	// recorded in every run started; others are the runs under the data
	// directory recorded under another log, left alone.
	logID  string
	others []*runner.Proc
}

func runKey(task string, dispatch uint64) string { return fmt.Sprintf("%s/%d", task, dispatch) }

// Run blocks until ctx ends. Every way out goes through stop: the tasks
// keep running under their supervisors for the next agent to adopt, or
// with StopOnExit they are stopped.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 5 * time.Second
	}
	if cfg.KillAfter == 0 {
		cfg.KillAfter = 10 * time.Second
	}
	if cfg.ProgressEvery == 0 {
		cfg.ProgressEvery = 10 * time.Second
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = 30 * time.Second
	}
	if !events.ValidKey(cfg.Node) {
		return fmt.Errorf("gpuagent: invalid node name %q", cfg.Node)
	}
	if cfg.DataDir == "" {
		return errors.New("gpuagent: no data directory")
	}
	if cfg.JobSigner != nil && cfg.JobSigner.Node != cfg.Node {
		return fmt.Errorf("gpuagent: the job signing key is node %s's, not %s's", cfg.JobSigner.Node, cfg.Node)
	}
	if cfg.JobCredsTTL == 0 {
		cfg.JobCredsTTL = DefaultJobCredsTTL
	}
	// An agent reads the log by direct gets and creates no consumer: its
	// credential (which its jobs' user can read) may create none
	// (auth.Roles).
	if d, ok := cfg.Log.(interface{ Direct() *evjs.Log }); ok {
		cfg.Log = d.Direct()
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	inv := cfg.Inv
	if inv == nil {
		cfg.Inventory.Node = cfg.Node
		var err error
		if inv, err = inventory.Open(cfg.Inventory); err != nil {
			return err
		}
		defer inv.Close()
	}
	if r := inv.FallbackReason(); r != "" {
		cfg.Logger.Warn().Str("backend", inv.Backend()).Str("why", r).Msg("gpuagent: no NVIDIA driver; using mock GPUs")
	}
	// Critical Xid errors mark a GPU unhealthy; the next announce reports it.
	go func() {
		_ = inv.WatchXid(ctx, func(uuid string, xid uint64) {
			if criticalXid[xid] {
				inv.MarkUnhealthy(uuid, fmt.Sprintf("Xid %d", xid))
			}
		})
	}()
	a := &Agent{cfg: cfg, inv: inv, st: domain.NewState(), procs: map[string]*proc{}, pending: map[string]report{},
		exits: make(chan exit, 64), wake: make(chan struct{}, 1), boot: uuid.NewString(), reported: map[string]bool{}}
	a.socks = tasksock.NewServer(socketBackend{a})
	if cfg.Metrics != nil {
		metrics.NodeFold(cfg.Metrics, "gpuagent", cfg.Node, a.fold.Load, cfg.Log.LastSeq)
	}
	return a.run(ctx)
}

// lockDataDir takes an exclusive lock on the data directory: two agents
// adopting the same runs would report them twice.
func lockDataDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("gpuagent: data directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "agent.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("gpuagent: data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("gpuagent: another agent uses the data directory %s", dir)
	}
	return func() { f.Close() }, nil
}

// agentFile holds the live agent's identity; supervisors fence their
// jobs when it names no live process for the node timeout.
func (a *Agent) agentFile() string { return filepath.Join(a.cfg.DataDir, "agent.json") }

func (a *Agent) run(ctx context.Context) error {
	// The runs' supervisors see a live agent from now on, so a long first
	// fold does not get its tasks fenced; but if the fold is not done
	// within the node timeout (NATS out of reach), the agent withdraws
	// and the supervisors fence as if it were gone.
	self, _ := json.Marshal(runner.Self())
	if err := os.WriteFile(a.agentFile(), self, 0o644); err != nil {
		return fmt.Errorf("gpuagent: %w", err)
	}
	caught := make(chan struct{})
	go func() {
		select {
		case <-caught:
		case <-ctx.Done():
		case <-time.After(a.cfg.NodeTimeout):
			a.cfg.Logger.Warn().Str("node_timeout", a.cfg.NodeTimeout.String()).
				Msg("gpuagent: the log is not folded within the node timeout; leaving the running tasks to their supervisors' fence")
			_ = os.Remove(a.agentFile())
			select {
			case <-caught:
				_ = os.WriteFile(a.agentFile(), self, 0o644)
			case <-ctx.Done():
			}
		}
	}()
	hb, err := events.EnsureKV(ctx, a.cfg.JS, events.HeartbeatKV(a.cfg.Replicas))
	if err != nil {
		return err
	}
	// The runtime folds the log, from the agent's snapshot (in its node's
	// own bucket) when there is one, and follows it; the agent's reaction
	// runs with the fold's lock held, after each batch, every 200 ms and
	// at each process exit.
	snaps := service.OpenSnapshotsIn(ctx, a.cfg.JS, events.SnapshotBucketOf("agent_"+a.cfg.Node), a.cfg.Replicas, "gpuagent", a.cfg.SnapshotEvery, a.cfg.Logger)
	st, _ := snaps.Restore(ctx, a.cfg.Log, 0)
	f := service.New("gpuagent", a.cfg.Log, a.cfg.Logger, st)
	a.fold.Store(f)
	var lastAnnounce time.Time
	err = f.Run(ctx, service.Hooks{
		CaughtUp: func(ctx context.Context) error {
			var err error
			f.Read(func(st *domain.State) {
				a.st = st
				a.logID = a.identity(ctx)
				a.adopt()
				// Announce the inventory.
				if err = a.announce(ctx, true); err != nil {
					return
				}
				lastAnnounce = a.cfg.Now()
			})
			if err != nil {
				return err
			}
			close(caught)
			a.lastOK.Store(a.cfg.Now().UnixNano())
			go a.heartbeats(ctx, hb)
			if a.cfg.Ready != nil {
				a.cfg.Ready()
			}
			return nil
		},
		React: func(ctx context.Context) error {
			f.Read(func(st *domain.State) {
				a.st = st
				for drained := false; !drained; {
					select {
					case x := <-a.exits:
						a.exited(x)
					default:
						drained = true
					}
				}
				a.flush(ctx)
				a.recordProgress(ctx)
				a.fence()
				a.escalate()
				if now := a.cfg.Now(); now.Sub(lastAnnounce) >= a.cfg.Heartbeat && !a.fenced {
					lastAnnounce = now
					// A node the scheduler declared lost (a partition, a
					// long pause) comes back by announcing itself again.
					n := a.st.Nodes[a.cfg.Node]
					force := n == nil || n.State == domain.NodeLost
					if force {
						a.cfg.Logger.Info().Msg("gpuagent: the log has this node lost; announcing it again")
					}
					if err := a.announce(ctx, force); err != nil {
						a.cfg.Logger.Warn().Err(err).Msg("gpuagent: announce failed")
					}
				}
				a.reconcile(ctx)
			})
			return nil
		},
		Tick:      200 * time.Millisecond,
		Wake:      a.wake,
		Snapshots: snaps,
	})
	f.Read(func(*domain.State) { a.stop() })
	a.socks.CloseAll()
	return err
}

// heartbeats puts the node's heartbeat every interval; lastOK is when
// NATS last accepted one.
func (a *Agent) heartbeats(ctx context.Context, kv jetstream.KeyValue) {
	t := time.NewTicker(a.cfg.Heartbeat)
	defer t.Stop()
	for {
		running := 0
		for _, pr := range a.snapshotProcs() {
			if pr {
				running++
			}
		}
		a.procMu.Lock()
		util := a.util
		a.procMu.Unlock()
		v, _ := json.Marshal(map[string]any{"node": a.cfg.Node, "boot_id": a.boot, "time": a.cfg.Now().UTC(), "running": running, "utilization": util})
		pctx, cancel := context.WithTimeout(ctx, a.cfg.Heartbeat)
		_, err := kv.Put(pctx, a.cfg.Node, v)
		cancel()
		switch {
		case err == nil:
			a.lastOK.Store(a.cfg.Now().UnixNano())
		case ctx.Err() == nil:
			a.cfg.Logger.Warn().Err(err).Msg("gpuagent: heartbeat failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// snapshotProcs is, without the fold's lock, whether each run is live
// (for the heartbeat's count only).
func (a *Agent) snapshotProcs() []bool {
	a.procMu.Lock()
	defer a.procMu.Unlock()
	return append([]bool(nil), a.liveRuns...)
}

// identity is the log's (events.Identifier), "" when the log cannot name
// itself (then every run is adopted, as before run records had it).
func (a *Agent) identity(ctx context.Context) string {
	idr, ok := a.cfg.Log.(events.Identifier)
	if !ok {
		return ""
	}
	var err error
	for try := 0; try < 5 && ctx.Err() == nil; try++ {
		var id string
		if id, err = idr.Identity(ctx); err == nil {
			return id
		}
		time.Sleep(200 * time.Millisecond)
	}
	a.cfg.Logger.Warn().Err(err).Msg("gpuagent: the log does not say which it is; adopting every run under the data directory")
	return ""
}

// foreign tells whether a run was recorded under another log than the
// agent's: never adopted (its task ids mean nothing in this log; adopting
// it would stop a live task of the other log as an orphan and delete its
// records).
func (a *Agent) foreign(s runner.Spec) bool {
	return s.Log != "" && a.logID != "" && s.Log != a.logID
}

// adopt takes over the runs an earlier agent left under the data
// directory (once, when the log is folded); a run recorded under another
// log is left alone, and logged.
func (a *Agent) adopt() {
	dirs, _ := filepath.Glob(filepath.Join(a.cfg.DataDir, "tasks", "*", "runs", "*"))
	sort.Strings(dirs)
	for _, dir := range dirs {
		p, err := runner.Adopt(dir)
		if err != nil {
			a.cfg.Logger.Warn().Err(err).Str("run", dir).Msg("gpuagent: not a run; removing it")
			_ = os.RemoveAll(dir)
			continue
		}
		s := p.Spec()
		if a.foreign(s) {
			a.cfg.Logger.Warn().Str("run", dir).Str("run_log", s.Log).Str("log", a.logID).Bool("live", !p.Exited()).
				Msg("gpuagent: a run recorded under another event log; not adopted, left alone (its GPUs count as busy while it lives)")
			a.others = append(a.others, p)
			continue
		}
		pr := &proc{key: runKey(s.TaskID, s.Dispatch), p: p, task: s.TaskID, dispatch: s.Dispatch, gpus: s.GPUs, adopted: true}
		if _, dup := a.procs[pr.key]; dup || s.TaskID == "" {
			continue
		}
		a.procs[pr.key] = pr
		a.watch(pr)
		a.reopenSocket(pr)
		a.cfg.Logger.Info().Str("task_id", s.TaskID).Uint64("dispatch", s.Dispatch).Int("pid", p.PID()).Bool("live", !p.Exited()).
			Msg("gpuagent: adopted a run of an earlier agent")
	}
	a.countLive()
}

// watch queues the run's end for the reaction.
func (a *Agent) watch(pr *proc) {
	go func() {
		a.exits <- exit{key: pr.key, res: <-pr.p.Wait()}
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}()
}

// busy is the GPUs live processes of this node hold, by UUID → run.
func (a *Agent) busy() map[string]string {
	out := map[string]string{}
	for _, pr := range a.procs {
		if pr.live() {
			for _, g := range pr.gpus {
				out[g] = pr.key
			}
		}
	}
	for _, p := range a.others {
		if !p.Exited() {
			for _, g := range p.Spec().GPUs {
				out[g] = "a run of another log (" + p.RunDir() + ")"
			}
		}
	}
	return out
}

// announce publishes available on start and whenever the inventory or
// health changed; health changes also publish unhealthy.
func (a *Agent) announce(ctx context.Context, force bool) error {
	gpus, err := a.inv.GPUs()
	if err != nil {
		return err
	}
	a.setUtil(gpus)
	if !force && sameInventory(gpus, a.gpus) {
		return nil
	}
	var bad []string
	for _, g := range gpus {
		if !g.Healthy {
			bad = append(bad, g.UUID)
		}
	}
	prevBad := map[string]bool{}
	for _, g := range a.gpus {
		if !g.Healthy {
			prevBad[g.UUID] = true
		}
	}
	a.gpus = gpus
	busy := a.busy()
	ev := events.Available{Node: a.cfg.Node, BootID: a.boot, Driver: a.inv.Driver()}
	for _, g := range gpus {
		ev.GPUs = append(ev.GPUs, events.GPU{UUID: g.UUID, Index: g.Index, Model: g.Model, MemoryMiB: g.MemoryMiB, Healthy: g.Healthy})
		if g.Healthy && a.st.Owner[g.UUID] == "" && busy[g.UUID] == "" {
			ev.FreeGPUs++
		}
	}
	if _, err := events.Append(ctx, a.cfg.Log, ev, events.Meta{Time: a.cfg.Now()}, "", nil); err != nil {
		return err
	}
	var newBad []string
	for _, u := range bad {
		if !prevBad[u] {
			newBad = append(newBad, u)
		}
	}
	if len(newBad) > 0 {
		reason := "NVML reports the GPU unhealthy"
		if r, ok := a.inv.UnhealthyReason(newBad[0]); ok && r != "" {
			reason = r
		}
		_, err = events.Append(ctx, a.cfg.Log, events.Unhealthy{Node: a.cfg.Node, GPUs: newBad, Reason: reason}, events.Meta{Time: a.cfg.Now()}, "", nil)
	}
	return err
}

// sameInventory compares two reads of the GPUs, utilization aside (it
// travels with the heartbeat, not in the log).
func sameInventory(a, b []inventory.GPU) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.Utilization, y.Utilization = 0, 0
		if x != y {
			return false
		}
	}
	return true
}

// setUtil keeps the GPUs' utilization for the next heartbeat.
func (a *Agent) setUtil(gpus []inventory.GPU) {
	util := map[string]int{}
	for _, g := range gpus {
		if g.Utilization >= 0 && g.UUID != "" {
			util[g.UUID] = g.Utilization
		}
	}
	a.procMu.Lock()
	a.util = util
	a.procMu.Unlock()
}

// mine returns this node's placement of t (ok false if none); rank0 is
// true when this node runs the command.
func (a *Agent) mine(t *domain.Task) (p events.Placement, rank0, ok bool) {
	for i, pl := range t.Placements {
		if pl.Node == a.cfg.Node {
			return pl, i == 0, true
		}
	}
	return events.Placement{}, false, false
}

// placedHere reports whether the log places the run (task, dispatch) on
// this node now and the task is not over.
func (a *Agent) placedHere(task string, dispatch uint64) (*domain.Task, bool) {
	t := a.st.Tasks[task]
	if t == nil || t.DispatchSeq != dispatch || !t.HoldsGPUs() {
		return t, false
	}
	_, rank0, ok := a.mine(t)
	return t, ok && rank0
}

// reconcile compares the folded log with the runs of this node.
func (a *Agent) reconcile(ctx context.Context) {
	// Runs the log no longer places here (requeued after this node was
	// declared lost, moved, ended) are stopped without a report.
	for _, pr := range a.procs {
		if !pr.live() || pr.signalled {
			continue
		}
		t, placed := a.placedHere(pr.task, pr.dispatch)
		if placed && t.State == domain.Cancelled {
			continue // handled below: a cancelled task is reported
		}
		if !placed {
			pr.orphan, pr.signalled, pr.termAt = true, true, a.cfg.Now()
			pr.p.MarkStopped(false)
			a.cfg.Logger.Warn().Str("task_id", pr.task).Uint64("dispatch", pr.dispatch).Msg("gpuagent: the log no longer places this run here; stopping its process")
		}
	}
	if a.fenced {
		return // no new work while cut off from NATS
	}
	for _, t := range a.st.Active() {
		pl, rank0, ok := a.mine(t)
		if !ok || !rank0 {
			continue
		}
		key := runKey(t.ID, t.DispatchSeq)
		pr := a.procs[key]
		_, waiting := a.pending[key]
		switch {
		case t.State == domain.Dispatched && pr == nil && !waiting && !a.reported[key]:
			a.start(ctx, t, pl)
		case (t.State == domain.Running || t.State == domain.Preempting || t.State == domain.Cancelled) && pr == nil && !waiting && !a.reported[key]:
			// The log says it started here, yet no run of it is recorded:
			// the process never started (its agent died in between) or
			// its records are gone. A running one goes back to the queue
			// (it never ran), a preempting one is preempted, a cancelled
			// one ends.
			a.reported[key] = true
			if t.State == domain.Preempting {
				a.append(ctx, events.Preempted{TaskID: t.ID, Node: a.cfg.Node, Checkpoint: t.Checkpoint, Forced: true, ExitCode: -1,
					LostGPUSeconds: a.lost(t)}, fmt.Sprintf("preempted:%s:%d", t.ID, t.DispatchSeq))
				continue
			}
			if t.State == domain.Running {
				// Nothing ran: its GPUs go back and it goes back to the
				// queue at its place (the scheduler requeues it, with
				// domain.NotStartedReason). Guarded by the task's last
				// sequence, and only after the runs under the data
				// directory were adopted (adopt, at CaughtUp), so no
				// real run is requeued under it.
				_, err := events.Append(ctx, a.cfg.Log, events.Preempted{TaskID: t.ID, Node: a.cfg.Node, Checkpoint: t.Checkpoint, ExitCode: -1, NotStarted: true},
					events.Meta{Time: a.cfg.Now()}, fmt.Sprintf("preempted:%s:%d", t.ID, t.DispatchSeq), &events.Expect{Filter: events.TaskSubjects(t.ID), LastSeq: t.LastSeq})
				switch {
				case errors.Is(err, events.ErrConflict):
					a.reported[key] = false // the task changed: the next pass looks again
				case err != nil:
					a.reported[key] = false
					if ctx.Err() == nil {
						a.cfg.Logger.Warn().Err(err).Str("task_id", t.ID).Msg("gpuagent: could not give back a task that never started; will retry")
					}
				default:
					a.cfg.Logger.Warn().Str("task_id", t.ID).Uint64("dispatch", t.DispatchSeq).
						Msg("gpuagent: the log has this task started here but no run of it is recorded (the agent stopped in between): nothing ran; giving it back to the queue")
				}
				continue
			}
			a.append(ctx, events.Failed{TaskID: t.ID, Node: a.cfg.Node, ExitCode: -1, Error: "no record of the task's process on its node (the agent stopped before starting it)"},
				fmt.Sprintf("exit:%s:%d", t.ID, t.DispatchSeq))
		case t.State == domain.Preempting && pr != nil && pr.live() && !pr.signalled:
			a.signalPreempt(pr, t, time.Duration(t.GraceS*float64(time.Second)))
			a.cfg.Logger.Info().Str("task_id", t.ID).Str("signal", t.PreemptSignal).Float64("grace_s", t.GraceS).Msg("gpuagent: preempting")
		case t.State == domain.Cancelled && pr != nil && pr.live() && !pr.signalled:
			pr.signalled, pr.cancelled = true, true
			pr.termAt = a.cfg.Now() // SIGTERM at once
		}
	}
}

// signalPreempt starts the preemption protocol on a run: the task's
// signal now, SIGTERM after grace, SIGKILL KillAfter later (escalate).
func (a *Agent) signalPreempt(pr *proc, t *domain.Task, grace time.Duration) {
	sig := syscall.SIGUSR1
	if t != nil {
		if s := domain.Signals[t.PreemptSignal]; s != 0 {
			sig = s
		}
	}
	pr.signalled, pr.preempt, pr.termAt = true, true, a.cfg.Now().Add(grace)
	_ = pr.p.Preempt(sig)
	a.notePreempt(pr, t, grace)
}

// fence stops every run when NATS has not taken a heartbeat for the node
// timeout: the scheduler has declared the node lost and requeued its
// tasks, so they must not hold these GPUs any longer. The ends are kept
// and reported (or dropped, if the log moved the task) on reconnection.
func (a *Agent) fence() {
	since := a.cfg.Now().Sub(time.Unix(0, a.lastOK.Load()))
	if since <= a.cfg.NodeTimeout {
		if a.fenced {
			a.cfg.Logger.Info().Msg("gpuagent: NATS reachable again; taking work")
			a.fenced = false
		}
		return
	}
	if a.fenced {
		return
	}
	a.fenced = true
	a.cfg.Logger.Warn().Str("offline", since.Round(time.Second).String()).Str("node_timeout", a.cfg.NodeTimeout.String()).
		Msg("gpuagent: cut off from NATS for longer than the node timeout; stopping every task")
	for _, pr := range a.procs {
		if !pr.live() || pr.signalled {
			continue
		}
		pr.fenced = true
		pr.p.MarkStopped(false)
		t := a.st.Tasks[pr.task]
		grace := 10 * time.Second
		if t != nil {
			grace = time.Duration(t.GraceS * float64(time.Second))
		}
		a.signalPreempt(pr, t, grace)
	}
}

// stop is the one way out: with StopOnExit every live run is stopped by
// the preemption protocol (grace and SIGTERM wait capped at 5 s each, a
// shutdown must not hang) and recorded as stopped, so the next agent
// reports it preempted; otherwise the runs keep going under their
// supervisors for the next agent to adopt.
func (a *Agent) stop() {
	live := 0
	for _, pr := range a.procs {
		if pr.live() {
			live++
		}
	}
	if live == 0 {
		return
	}
	if !a.cfg.StopOnExit {
		a.cfg.Logger.Info().Int("tasks", live).Str("node_timeout", a.cfg.NodeTimeout.String()).
			Msg("gpuagent: stopping; the tasks keep running for the next agent to adopt (they stop themselves if none comes back within the node timeout)")
		return
	}
	a.cfg.Logger.Info().Int("tasks", live).Msg("gpuagent: stopping the tasks")
	capped := func(d time.Duration) time.Duration { return min(d, 5*time.Second) }
	var wg sync.WaitGroup
	for _, pr := range a.procs {
		if !pr.live() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := a.st.Tasks[pr.task]
			sig, grace := syscall.SIGUSR1, 5*time.Second
			if t != nil {
				if s := domain.Signals[t.PreemptSignal]; s != 0 {
					sig = s
				}
				grace = capped(time.Duration(t.GraceS * float64(time.Second)))
			}
			pr.p.MarkStopped(false)
			if pr.signalled && !pr.preempt {
				sig, grace = syscall.SIGTERM, 0 // cancelled or orphaned: no checkpoint wanted
			}
			wait := func(d time.Duration) bool {
				select {
				case <-pr.p.Wait():
					return true
				case <-time.After(d):
					return false
				}
			}
			_ = pr.p.Preempt(sig)
			if wait(grace) {
				return
			}
			pr.p.MarkStopped(true)
			_ = pr.p.Signal(syscall.SIGTERM)
			if wait(capped(a.cfg.KillAfter)) {
				return
			}
			_ = pr.p.Signal(syscall.SIGKILL)
			<-pr.p.Wait()
		}()
	}
	wg.Wait()
}

// escalate sends SIGTERM after the grace period and SIGKILL after that.
func (a *Agent) escalate() {
	now := a.cfg.Now()
	for _, pr := range a.procs {
		if !pr.live() {
			continue
		}
		switch {
		case pr.signalled && pr.killAt.IsZero() && !pr.termAt.IsZero() && !now.Before(pr.termAt):
			pr.forced = pr.preempt
			if pr.forced {
				pr.p.MarkStopped(true)
			}
			pr.killAt = now.Add(a.cfg.KillAfter)
			_ = pr.p.Signal(syscall.SIGTERM)
		case !pr.killAt.IsZero() && !now.Before(pr.killAt):
			_ = pr.p.Signal(syscall.SIGKILL)
			pr.killAt = now.Add(time.Hour)
		}
	}
}

func (a *Agent) start(ctx context.Context, t *domain.Task, pl events.Placement) {
	key := runKey(t.ID, t.DispatchSeq)
	// 0. Never on a GPU a live process of another run still holds (an
	//    orphan being stopped, say): the task waits until it is free.
	busy := a.busy()
	for _, g := range pl.GPUs {
		if other := busy[g]; other != "" && other != key {
			a.cfg.Logger.Warn().Str("task_id", t.ID).Str("gpu", g).Str("held_by", other).Msg("gpuagent: a GPU of the placement is still held by a live process; waiting")
			return
		}
	}
	taskDir := filepath.Join(a.cfg.DataDir, "tasks", t.ID)
	runDir := filepath.Join(taskDir, "runs", fmt.Sprint(t.DispatchSeq))
	ckpt := filepath.Join(a.cfg.CheckpointRoot, t.ID)
	// 1. The exported environment is in the task's submitted event only.
	sub, err := events.ReadSubmitted(ctx, a.cfg.Log, t.ID, t.SubmitSeq)
	if errors.Is(err, events.ErrNotSubmitted) {
		a.reported[key] = true
		a.append(ctx, events.Failed{TaskID: t.ID, Node: a.cfg.Node, ExitCode: -1, Error: "could not start: " + err.Error()},
			fmt.Sprintf("exit:%s:%d", t.ID, t.DispatchSeq))
		return
	}
	if err != nil {
		a.cfg.Logger.Warn().Err(err).Str("task_id", t.ID).Msg("gpuagent: could not read the task's submission; retrying")
		return // the next pass tries again
	}
	// 2. Claim the start in the log, guarded: a cancel that came first wins.
	_, err = events.Append(ctx, a.cfg.Log, events.Started{TaskID: t.ID, Node: a.cfg.Node, LogDir: taskDir}, events.Meta{Time: a.cfg.Now()},
		fmt.Sprintf("started:%s:%d", t.ID, t.DispatchSeq), &events.Expect{Filter: events.TaskSubjects(t.ID), LastSeq: t.LastSeq})
	if errors.Is(err, events.ErrConflict) {
		return // the task changed; the next pass sees why
	}
	if err != nil {
		a.cfg.Logger.Error().Err(err).Str("task_id", t.ID).Msg("gpuagent: could not record start")
		return
	}
	// 3. Start the process under its supervisor, with a credential of its
	//    own when the node has a job signing key.
	creds := a.jobCreds(t, runDir)
	sock, bindSocket := a.openSocket(key, a.socketTask(t, t.DispatchSeq, pl.GPUs), runDir)
	placements, _ := json.Marshal(t.Placements)
	var env []string
	for _, k := range sortedKeys(sub.Env) {
		env = append(env, k+"="+sub.Env[k])
	}
	env = append(env,
		"CUDA_VISIBLE_DEVICES="+strings.Join(pl.GPUs, ","),
		"GPUQ_TASK_ID="+t.ID,
		"GPUQ_CHECKPOINT_DIR="+ckpt,
		"GPUQ_NATS_URL="+a.cfg.NATSURL,
		"GPUQ_NODE="+a.cfg.Node,
		"GPUQ_PLACEMENTS="+string(placements),
		// Never the agent's own credentials (issue 15): the run's own
		// (jobCreds), or none.
		"GPUQ_NATS_CREDS="+creds, "GPUQ_NATS_KEY=",
		"GPUQ_TASK_SOCKET="+sock,
	)
	if t.ResumeFrom != "" {
		env = append(env, "GPUQ_RESUME_FROM="+t.ResumeFrom)
	}
	_ = os.MkdirAll(ckpt, 0o755)
	dir := taskDir
	if st, err := os.Stat(t.Dir); t.Dir != "" && err == nil && st.IsDir() {
		dir = t.Dir // the submitter's working directory, when this node has it
	}
	_ = os.MkdirAll(taskDir, 0o755)
	sig := syscall.SIGUSR1
	if s := domain.Signals[t.PreemptSignal]; s != 0 {
		sig = s
	}
	spec := runner.Spec{TaskID: t.ID, Command: t.Command, Env: env, LogPath: filepath.Join(taskDir, "output.log"), Dir: dir,
		RunDir: runDir, GPUs: pl.GPUs, Dispatch: t.DispatchSeq, Log: a.logID,
		Fence: &runner.Fence{AgentFile: a.agentFile(), After: a.cfg.NodeTimeout, Signal: int(sig),
			Grace: time.Duration(t.GraceS * float64(time.Second)), KillAfter: a.cfg.KillAfter}}
	p, err := runner.Start(spec)
	if err != nil {
		a.socks.Close(key)
		a.reported[key] = true
		a.append(ctx, events.Failed{TaskID: t.ID, Node: a.cfg.Node, ExitCode: -1, Error: "could not start: " + err.Error()},
			fmt.Sprintf("exit:%s:%d", t.ID, t.DispatchSeq))
		_ = os.RemoveAll(runDir)
		return
	}
	bindSocket(p)
	a.cfg.Logger.Info().Str("task_id", t.ID).Str("run", runDir).Str("gpus", strings.Join(pl.GPUs, ",")).Msg("gpuagent: started")
	pr := &proc{key: key, p: p, task: t.ID, dispatch: t.DispatchSeq, gpus: pl.GPUs}
	a.procs[key] = pr
	a.watch(pr)
	a.countLive()
}

// DefaultJobCredsTTL is Config.JobCredsTTL's default.
const DefaultJobCredsTTL = 7 * 24 * time.Hour

// jobCreds mints the run's own credential into its run directory and
// answers its path; "" without a job signing key, or when minting failed
// (the job then has none, as without auth, and its checkpoints go
// through the spool).
func (a *Agent) jobCreds(t *domain.Task, runDir string) string {
	if a.cfg.JobSigner == nil {
		return ""
	}
	ttl := a.cfg.JobCredsTTL
	if est := time.Duration(2 * t.Hours * float64(time.Hour)); est > ttl {
		ttl = est
	}
	// The run directory alone is the job's (0700); the task's stays as the
	// runner makes it.
	_ = os.MkdirAll(filepath.Dir(runDir), 0o755)
	path := filepath.Join(runDir, auth.JobCredsFile)
	if err := a.cfg.JobSigner.MintJob(path, t.ID, t.DispatchSeq, a.cfg.Now().Add(ttl)); err != nil {
		a.cfg.Logger.Warn().Err(err).Str("task_id", t.ID).Msg("gpuagent: could not mint the job's credential; it runs without one")
		return ""
	}
	return path
}

// exited turns a run's end into its report, according to what the log
// says of the task; the report is appended by flush, retried until the
// log has it.
func (a *Agent) exited(x exit) {
	pr := a.procs[x.key]
	delete(a.procs, x.key)
	a.socks.Close(x.key)
	a.countLive()
	if pr == nil {
		return
	}
	t, placed := a.placedHere(pr.task, pr.dispatch)
	if pr.orphan || !placed {
		// Not this node's to report (moved, ended, or already reported).
		a.reported[x.key] = true
		_ = os.RemoveAll(pr.p.RunDir())
		return
	}
	res := x.res
	msgID := fmt.Sprintf("exit:%s:%d", pr.task, pr.dispatch)
	forced := pr.forced || res.Forced
	var ev events.Event
	preempted, why := preemptedOutcome(t, pr, res, a.gpuDied(pr))
	switch {
	case preempted:
		ev = events.Preempted{TaskID: pr.task, Node: a.cfg.Node, Checkpoint: t.Checkpoint, Forced: forced,
			LostGPUSeconds: map[bool]float64{true: a.lost(t), false: 0}[forced], ExitCode: res.ExitCode, Reason: why}
		msgID = fmt.Sprintf("preempted:%s:%d", pr.task, pr.dispatch)
	case res.ExitCode == 0 && !pr.cancelled && !res.Lost:
		ev = events.Completed{TaskID: pr.task, Node: a.cfg.Node}
	default:
		msg := fmt.Sprintf("exit code %d", res.ExitCode)
		switch {
		case pr.cancelled || t.State == domain.Cancelled:
			msg = "stopped: task cancelled"
		case res.Lost:
			msg = "process lost"
		}
		if res.Err != nil {
			msg += ": " + res.Err.Error()
		}
		ev = events.Failed{TaskID: pr.task, Node: a.cfg.Node, ExitCode: res.ExitCode, Error: msg, StderrTail: res.StderrTail}
	}
	a.pending[x.key] = report{ev: ev, msgID: msgID, task: pr.task, runDir: pr.p.RunDir(), dispatch: pr.dispatch}
	l := a.cfg.Logger.Info()
	if f, ok := ev.(events.Failed); ok {
		l = a.cfg.Logger.Warn().Str("error", f.Error)
	}
	l.Str("task_id", pr.task).Str("event", string(ev.EventType())).Int("exit_code", res.ExitCode).Bool("adopted", pr.adopted).Msg("gpuagent: task ended")
}

// gpuDied reports whether a GPU the run held is unhealthy now: a job that
// ends then (crashed with its GPU, typically) is preempted, not failed,
// and resumes elsewhere from its checkpoint.
func (a *Agent) gpuDied(pr *proc) bool {
	for _, g := range a.gpus {
		if !g.Healthy && slices.Contains(pr.gpus, g.UUID) {
			return true
		}
	}
	return false
}

// flush appends the pending exit reports; one that fails stays pending
// (the message id makes a retry of a stored one a no-op). A report the
// log has overtaken (the task moved meanwhile) is dropped.
func (a *Agent) flush(ctx context.Context) {
	if !a.fenced {
		a.spooled(ctx)
	}
	for key, r := range a.pending {
		if _, placed := a.placedHere(r.task, r.dispatch); !placed {
			delete(a.pending, key)
			a.reported[key] = true
			_ = os.RemoveAll(r.runDir)
			continue
		}
		if a.fenced {
			continue
		}
		if _, err := events.Append(ctx, a.cfg.Log, r.ev, events.Meta{Time: a.cfg.Now()}, r.msgID, nil); err != nil {
			if ctx.Err() == nil {
				a.cfg.Logger.Warn().Err(err).Str("task_id", r.task).Str("event", string(r.ev.EventType())).Msg("gpuagent: report failed; will retry")
			}
			continue
		}
		delete(a.pending, key)
		a.reported[key] = true
		_ = os.RemoveAll(r.runDir)
	}
}

// pendingRefFile is where a job's `gpuq checkpoint` keeps its ref when
// NATS is unreachable (cmd/gpuq writes the same name).
const pendingRefFile = ".gpuq-pending-ref"

// spooled reports the checkpoint refs jobs kept while NATS was
// unreachable, before any exit report of theirs, so that a preempted task
// resumes from the checkpoint it saved during a partition.
func (a *Agent) spooled(ctx context.Context) {
	tasks := map[string]bool{}
	for _, pr := range a.procs {
		tasks[pr.task] = true
	}
	for _, r := range a.pending {
		tasks[r.task] = true
	}
	for task := range tasks {
		path := filepath.Join(a.cfg.CheckpointRoot, task, pendingRefFile)
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		ref, step := readSpool(b)
		t := a.st.Tasks[task]
		if ref == "" || t == nil || !t.HoldsGPUs() || t.Checkpoint == ref {
			_ = os.Remove(path)
			continue
		}
		sum := sha256.Sum256([]byte(ref))
		_, err = events.Append(ctx, a.cfg.Log, events.Checkpointed{TaskID: task, Ref: ref, Step: step}, events.Meta{Time: a.cfg.Now()},
			fmt.Sprintf("ckpt:%s:%x", task, sum[:8]), nil)
		if err != nil {
			continue
		}
		_ = os.Remove(path)
		a.cfg.Logger.Info().Str("task_id", task).Str("ref", ref).Msg("gpuagent: reported a checkpoint kept while NATS was unreachable")
		// A report not yet in the log carries it too.
		for key, r := range a.pending {
			if p, ok := r.ev.(events.Preempted); ok && r.task == task {
				p.Checkpoint = ref
				r.ev = p
				a.pending[key] = r
			}
		}
	}
}

// countLive refreshes the heartbeat's count of live runs.
func (a *Agent) countLive() {
	var live []bool
	for _, pr := range a.procs {
		live = append(live, pr.live())
	}
	a.procMu.Lock()
	a.liveRuns = live
	a.procMu.Unlock()
}

// lost is the GPU-seconds of work since the task's last checkpoint.
func (a *Agent) lost(t *domain.Task) float64 {
	from := t.StartedAt
	if t.CheckpointAt.After(from) {
		from = t.CheckpointAt
	}
	if from.IsZero() {
		return 0
	}
	return a.cfg.Now().Sub(from).Seconds() * float64(len(t.GPUUUIDs()))
}

func (a *Agent) append(ctx context.Context, e events.Event, msgID string) {
	if _, err := events.Append(ctx, a.cfg.Log, e, events.Meta{Time: a.cfg.Now()}, msgID, nil); err != nil && ctx.Err() == nil {
		a.cfg.Logger.Error().Err(err).Str("event", string(e.EventType())).Str("task_id", e.Key()).Msg("gpuagent: append failed")
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
