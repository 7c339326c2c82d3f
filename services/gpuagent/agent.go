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
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	view    *view            // the folded log as the last reaction saw it (view.go)
	procs   map[string]*proc // by runKey
	pending map[string]report
	exits   chan exit
	wake    chan struct{} // poked after each exit is queued
	boot    string
	gpus    []inventory.GPU
	// reported remembers runs whose end is in the log (or was found lost).
	reported map[string]bool
	lastOK   atomic.Int64 // unix nanos of the last heartbeat NATS accepted
	// fenced: cut off from NATS for longer than the node timeout (fence);
	// the task sockets read it too.
	fenced   atomic.Bool
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
	a := &Agent{cfg: cfg, inv: inv, view: &view{tasks: map[string]*domain.Task{}, held: map[string]bool{}}, procs: map[string]*proc{}, pending: map[string]report{},
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
	// own bucket) when there is one, and follows it; the agent reacts after
	// each batch, every 200 ms and at each process exit: it takes its view
	// under the fold's lock and acts on it outside (view.go).
	snaps := service.OpenSnapshotsIn(ctx, a.cfg.JS, events.SnapshotBucketOf("agent_"+a.cfg.Node), a.cfg.Replicas, "gpuagent", a.cfg.SnapshotEvery, a.cfg.Logger)
	st, _ := snaps.Restore(ctx, a.cfg.Log, 0)
	f := service.New("gpuagent", a.cfg.Log, a.cfg.Logger, st)
	a.fold.Store(f)
	var lastAnnounce time.Time
	err = f.Run(ctx, service.Hooks{
		CaughtUp: func(ctx context.Context) error {
			a.logID = a.identity(ctx)
			adopted := a.adopt()
			// The view names the adopted runs' tasks: take it after.
			f.Read(func(st *domain.State) { a.view = a.see(st) })
			for _, pr := range adopted {
				a.reopenSocket(pr)
			}
			// Announce the inventory.
			if err := a.announce(ctx, true); err != nil {
				return err
			}
			lastAnnounce = a.cfg.Now()
			close(caught)
			a.lastOK.Store(a.cfg.Now().UnixNano())
			go a.heartbeats(ctx, hb)
			if a.cfg.Ready != nil {
				a.cfg.Ready()
			}
			return nil
		},
		React: func(ctx context.Context) error {
			// Decide under the lock: the view; act outside it.
			f.Read(func(st *domain.State) { a.view = a.see(st) })
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
			if now := a.cfg.Now(); now.Sub(lastAnnounce) >= a.cfg.Heartbeat && !a.fenced.Load() {
				lastAnnounce = now
				// A node the scheduler declared lost (a partition, a
				// long pause) comes back by announcing itself again.
				n := a.view.node
				force := n == nil || n.State == domain.NodeLost
				if force {
					a.cfg.Logger.Info().Msg("gpuagent: the log has this node lost; announcing it again")
				}
				if err := a.announce(ctx, force); err != nil {
					a.cfg.Logger.Warn().Err(err).Msg("gpuagent: announce failed")
				}
			}
			a.reconcile(ctx)
			return nil
		},
		Tick:      200 * time.Millisecond,
		Wake:      a.wake,
		Snapshots: snaps,
	})
	a.stop()
	a.socks.CloseAll()
	return err
}
