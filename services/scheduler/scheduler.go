package scheduler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/decide"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/metrics"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/service"
)

// Config of a scheduler instance.
type Config struct {
	Log    events.Log
	JS     jetstream.JetStream // for the leader lease bucket
	Policy *policy.Policy
	Logger zerolog.Logger
	// Instance names this instance in the lease (default hostname+pid).
	Instance string
	LeaseTTL time.Duration // default 10 s
	// Tick is how often a pass runs without new events (default 1 s).
	Tick  time.Duration
	Now   func() time.Time
	Ready func() // called once this instance leads and has folded the log
	// NodeTimeout: a node without a heartbeat this long is lost (default
	// 30 s; negative: never).
	NodeTimeout time.Duration
	// SnapshotEvery: applied events between two state snapshots (default
	// DefaultSnapshotEvery; negative: no snapshots written or loaded). See
	// snapshot.go.
	SnapshotEvery int
	// Replicas of the lease and heartbeat buckets and the snapshot store
	// (0: 1; 3 on a 3-node NATS cluster, like the audit stream).
	Replicas int
	// Metrics, when set, gets the instance's metrics (pkg/metrics): its
	// fold while it leads, its passes and decisions, the lease.
	Metrics prometheus.Registerer
}

// Scheduler is one instance.
type Scheduler struct {
	cfg   Config
	mu    sync.Mutex
	fold  *service.Fold // of the current leadership term; nil on standby
	lead  bool
	seen  map[string]time.Time // node heartbeats, on the server's clock, from the term's start
	beats map[string]time.Time // the heartbeats themselves (a node is dispatched to only while fresh)
	// checkedTotal is the healthy GPU count the teams were last checked
	// against.
	checkedTotal int
	clock        serverClock
	pred         *estimate.Predictor // run times learned from the log, for backfill
	snaps        snapshots           // nil inside: no snapshots
	epoch        uint64              // of the lease held or last held
	m            *metrics.Scheduler  // nil: no metrics
}

// New returns an instance; Run starts it.
func New(cfg Config) *Scheduler {
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = 30 * time.Second
	}
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = DefaultSnapshotEvery
	}
	if cfg.Tick == 0 {
		cfg.Tick = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Policy == nil {
		cfg.Policy = policy.New(policy.DefaultOptions())
	}
	if cfg.Instance == "" {
		h, _ := os.Hostname()
		cfg.Instance = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	s := &Scheduler{cfg: cfg, clock: serverClock{local: cfg.Now}}
	if cfg.Metrics != nil {
		s.m = metrics.NewScheduler(cfg.Metrics, cfg.Instance, s.Lease)
		metrics.Fold(cfg.Metrics, "scheduler", s.leadingFold, cfg.Log.LastSeq)
	}
	return s
}

// Lease reports whether this instance leads, and the epoch of the lease
// it holds or last held.
func (s *Scheduler) Lease() (leading bool, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lead, s.epoch
}

// leadingFold is the fold of the current term (nil on standby).
func (s *Scheduler) leadingFold() *service.Fold {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fold
}

// Run blocks until ctx ends: wait for the lease, lead while it holds.
func Run(ctx context.Context, cfg Config) error { return New(cfg).Run(ctx) }

// Run implements the instance's life: standby → leader → standby ...
func (s *Scheduler) Run(ctx context.Context) error {
	lease, err := newLease(ctx, s.cfg.JS, s.cfg.Instance, s.cfg.LeaseTTL, s.cfg.Replicas)
	if err != nil {
		return err
	}
	s.snaps = s.openSnapshots(ctx)
	for ctx.Err() == nil {
		lctx, err := lease.acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		s.mu.Lock()
		s.epoch = lease.epoch
		s.mu.Unlock()
		s.cfg.Logger.Info().Str("instance", s.cfg.Instance).Uint64("epoch", lease.epoch).Msg("scheduler: leading")
		err = s.lead_(lctx, lease)
		lease.release()
		if ctx.Err() != nil {
			return nil
		}
		s.cfg.Logger.Warn().Err(err).Uint64("epoch", lease.epoch).Msg("scheduler: stepped down; standing by")
	}
	return nil
}

// Snapshot returns a copy of the live state (nil before the first fold).
func (s *Scheduler) Snapshot() *domain.State {
	s.mu.Lock()
	f, lead := s.fold, s.lead
	s.mu.Unlock()
	if f == nil || !lead {
		return nil
	}
	var c *domain.State
	f.Read(func(st *domain.State) { c = st.Clone() })
	return c
}

// Errors that end a leadership term.
var (
	errLeaseExpired = errors.New("scheduler: the lease may have expired (renewal overdue)")
	errHeartbeats   = errors.New("scheduler: the heartbeat watcher ended")
)

// lead_ is one leadership term: the runtime folds the log (from the
// newest snapshot) and follows it; after each batch and each tick the
// scheduler decides. It steps down — returns — as soon as the lease's
// renewal is overdue or fails, or the heartbeat watcher ends, so it
// never decides on a lease that may be someone else's or on a frozen view
// of the nodes.
func (s *Scheduler) lead_(ctx context.Context, lease *lease) error {
	st, pred := s.snaps.restore(ctx, s.cfg.Log)
	s.pred = pred
	fold := service.New("scheduler", s.cfg.Log, s.cfg.Logger, st)
	s.mu.Lock()
	s.fold = fold
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.fold, s.lead = nil, false
		s.mu.Unlock()
	}()
	hbDone := make(chan struct{})
	dg := newLiveDigest(lease.kv, s.cfg.Instance, lease.epoch, lease.ttl)
	defer dg.clear()
	// The decisions are appended in the background, one pass at a time
	// (act), so that the fold goes on while their acks are awaited; the
	// next pass is decided once the last one's outcome is known and the
	// fold holds every append of it that is in the log (waitFor).
	wake := make(chan struct{}, 1)
	actx, stopActing := context.WithCancel(ctx)
	ap := service.NewAppender(s.cfg.Log, wake)
	ap.Retry, ap.Hold = unknownOutcome, lease.valid
	defer func() {
		stopActing()
		ap.Wait(context.Background()) // nothing is appended after the term
	}()
	var (
		waitFor uint64 // the highest sequence of our appends; no pass until folded
		acting  plan   // the pass whose appends are in flight
	)
	err := fold.Run(ctx, service.Hooks{
		Applied: func(st *domain.State, r events.Record, skipped string) {
			s.clock.observe(r.Time)
			if skipped == "" {
				s.pred.Learn(st, r)
			}
		},
		CaughtUp: func(ctx context.Context) error {
			fold.Read(func(st *domain.State) {
				// Every known node gets a full timeout to show its heartbeat.
				seen := map[string]time.Time{}
				for name := range st.Nodes {
					seen[name] = s.clock.now()
				}
				s.mu.Lock()
				s.seen, s.beats, s.lead = seen, map[string]time.Time{}, true
				s.mu.Unlock()
			})
			if err := s.watchHeartbeats(ctx, hbDone); err != nil {
				return err
			}
			if s.cfg.Ready != nil {
				s.cfg.Ready()
			}
			return nil
		},
		React: func(ctx context.Context) error {
			select {
			case <-hbDone:
				return errHeartbeats
			default:
			}
			if !lease.valid() {
				return errLeaseExpired
			}
			if ap.Busy() {
				if out, done := ap.Take(); done {
					last, err := s.acted(ctx, acting, out)
					if err != nil {
						return err
					}
					waitFor = max(waitFor, last)
				}
			}
			// Decide under the fold's lock (pure: commands), act outside
			// it (appends and their acks, in the background), so readers
			// of the state (metrics, the digest) never wait on NATS. The
			// fold advances only between reactions, so nothing is
			// applied in between: the digest, computed once the appends
			// are out, is of the state decided on.
			var p plan
			fold.Read(func(st *domain.State) {
				if ap.Busy() || st.Seq < waitFor {
					return
				}
				p = s.decide(st)
			})
			if len(p.cmds) > 0 {
				p, msgs, err := s.act(p, lease)
				if err != nil {
					return err
				}
				if len(msgs) > 0 {
					acting = p
					ap.Start(actx, msgs)
				}
			}
			fold.Read(dg.update)
			dg.publish(ctx)
			return nil
		},
		Tick:      s.cfg.Tick,
		Wake:      wake,
		Snapshots: s.snaps.Snapshots,
		Own:       own(s.pred),
	})
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// A pass decides (decide: the pure policy and the protocol reactions,
// under the fold's lock), then acts (act: its events encoded, stamped
// with the lease's epoch, handed to the Appender, which publishes them
// all before it awaits any ack — events.AppendAll: each stored or
// refused as if appended alone, in order — and retries those whose
// outcome stays unknown), then takes the outcome (acted).
//
// Its clock is the server's (serverClock): node ages and the policy's
// "now" are judged on the log's and the heartbeats' own timestamps.
// Every decision carries the lease's epoch; if the lease is no longer
// certainly held when the pass is ready to append, or when an append is
// to be retried, nothing (more) is appended.

// plan is one decision step's outcome: the commands decided on the state
// at seq, at now.
type plan struct {
	cmds  []decide.Command
	seq   uint64
	now   time.Time
	start time.Time // when the step began (the pass metric)
}

// decide is the scheduler's step under the fold's lock: its heartbeats
// laid over the state as folded (decide.Liveness.Overlay, the one thing
// it marks in st), then decide.Plan, which only reads; it appends nothing
// and keeps no pointer into st.
func (s *Scheduler) decide(st *domain.State) plan {
	start := time.Now()
	now := s.clock.now()
	if total := st.Totals().Healthy; total != s.checkedTotal {
		s.checkedTotal = total
		if err := s.cfg.Policy.Options().Teams.CheckCluster(total); err != nil {
			s.cfg.Logger.Warn().Err(err).Msg("scheduler: the teams file promises more than the cluster has")
		}
	}
	s.mu.Lock()
	live := decide.Liveness{LastSeen: s.seen, Beats: s.beats, Timeout: s.cfg.NodeTimeout}
	if s.cfg.NodeTimeout < 0 {
		live.Timeout = 0
	}
	live.Overlay(st, now) // the scheduler's view over the fold: no work for a silent node
	cmds := decide.Plan(st, s.cfg.Policy, now, live, s.pred.ForPolicy(now))
	s.mu.Unlock()
	return plan{cmds: cmds, seq: st.Seq, now: now, start: start}
}

// act turns a plan's commands into appends, outside the fold's lock,
// under the lease: each with the leader's epoch and its expected-sequence
// guard (a stale one is refused and decided again). It returns the plan
// with the stamped events of the commands sent, and their appends:
// msgs[i] is cmds[i]'s (a command whose event does not encode is logged
// and left out).
func (s *Scheduler) act(p plan, lease *lease) (plan, []events.Msg, error) {
	if !lease.valid() {
		return p, nil, errLeaseExpired
	}
	msgs := make([]events.Msg, 0, len(p.cmds))
	sent := p.cmds[:0]
	for _, c := range p.cmds {
		c.Event = withEpoch(c.Event, lease.epoch, p.seq)
		subj, data, _, err := events.Encode(c.Event, events.Meta{Time: p.now})
		if err != nil {
			s.cfg.Logger.Error().Err(err).Str("event", string(c.Event.EventType())).Msg("scheduler: append failed")
			continue
		}
		msgs = append(msgs, events.Msg{Subject: subj, Data: data, MsgID: c.MsgID, Expect: c.Expect})
		sent = append(sent, c)
	}
	p.cmds = sent
	return p, msgs, nil
}

// acted takes the outcome of a plan's appends (out.Results[i] is
// p.cmds[i]'s): it returns the highest sequence the log holds of them,
// duplicates included — the fold must reach it before the next pass, so
// that a decision that landed is never decided again on a state without
// it. An append whose outcome stayed unknown (the term ended, the lease
// went while it was retried) ends the term: the next one folds the log
// afresh.
func (s *Scheduler) acted(ctx context.Context, p plan, out service.Appended) (uint64, error) {
	defer func() { s.m.Pass(time.Since(p.start)) }()
	for i, r := range out.Results {
		c := p.cmds[i]
		switch {
		case errors.Is(r.Err, events.ErrConflict):
			s.cfg.Logger.Debug().Str(keyField(c.Event), c.Event.Key()).Msg("scheduler: stale decision refused; will re-decide")
			s.m.Refused()
			continue
		case r.Err != nil:
			if ctx.Err() == nil {
				s.cfg.Logger.Error().Err(r.Err).Str("event", string(c.Event.EventType())).Msg("scheduler: append failed")
			}
			continue
		}
		if r.Ack.Duplicate {
			continue
		}
		s.m.Decided(c.Event)
		if l := s.cfg.Logger.Info(); l.Enabled() {
			l = l.Str("event", string(c.Event.EventType())).Str(keyField(c.Event), c.Event.Key())
			if d, ok := c.Event.(events.Dispatched); ok && len(d.Placements) > 0 {
				nodes := make([]string, len(d.Placements))
				for i, p := range d.Placements {
					nodes[i] = p.Node
				}
				l = l.Str("node", strings.Join(nodes, ","))
			}
			l.Uint64("seq", r.Ack.Seq).Msg("scheduler: decided")
		}
	}
	if out.Retries > 0 {
		s.cfg.Logger.Warn().Int("retried", out.Retries).Int("unknown", out.Unknown).Msg("scheduler: appends retried after an unknown outcome")
	}
	if out.Unknown > 0 {
		if ctx.Err() != nil {
			return out.Last, ctx.Err()
		}
		return out.Last, errLeaseExpired
	}
	return out.Last, nil
}

// unknownOutcome reports whether an append's error leaves its outcome
// unknown (an ack that timed out, a connection lost, no responder): the
// append is retried with the same message id and guard. An error the
// server answered (JetStream's API error) or the client refused before
// sending is final.
func unknownOutcome(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr), errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, nats.ErrHeadersNotSupported), errors.Is(err, nats.ErrInvalidMsg):
		return false
	}
	return true
}

// keyField is the log field of e's key: "node" for a node's event,
// "task_id" for a task's (the names of the API's JSON).
func keyField(e events.Event) string {
	if strings.HasPrefix(events.Subject(e), events.NodePrefix) {
		return "node"
	}
	return "task_id"
}

// withEpoch stamps a decision with the leader's epoch and, where the
// decision does not say it, the sequence it was based on.
func withEpoch(e events.Event, epoch, based uint64) events.Event {
	switch v := e.(type) {
	case events.Dispatched:
		v.Epoch = epoch
		return v
	case events.PreemptRequested:
		v.Epoch = epoch
		return v
	case events.Requeued:
		v.Epoch = epoch
		if v.BasedOnSeq == 0 {
			v.BasedOnSeq = based
		}
		return v
	case events.Lost:
		v.Epoch = epoch
		if v.BasedOnSeq == 0 {
			v.BasedOnSeq = based
		}
		return v
	}
	return e
}

// watchHeartbeats follows the agents' heartbeat bucket into s.seen, on
// the server's clock (the entries' own timestamps); done is closed when
// the watch ends before ctx, which ends the leadership term.
func (s *Scheduler) watchHeartbeats(ctx context.Context, done chan<- struct{}) error {
	kv, err := events.EnsureKV(ctx, s.cfg.JS, events.HeartbeatKV(s.cfg.Replicas))
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	go func() {
		defer close(done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					if ctx.Err() == nil {
						s.cfg.Logger.Error().Msg("scheduler: heartbeat watch ended; stepping down")
					}
					return
				}
				if e == nil || e.Operation() != jetstream.KeyValuePut {
					continue
				}
				at := e.Created()
				s.clock.observe(at)
				s.mu.Lock()
				// A standby taking over must not declare nodes lost from
				// heartbeats it never waited for: an older beat than the
				// start of the term leaves the term's start.
				if prev, ok := s.seen[e.Key()]; !ok || at.After(prev) {
					s.seen[e.Key()] = at
				}
				if prev, ok := s.beats[e.Key()]; !ok || at.After(prev) {
					s.beats[e.Key()] = at
				}
				s.mu.Unlock()
			}
		}
	}()
	return nil
}

// serverClock is the server's time as this process last saw it (a
// record's stored time, a heartbeat's), advanced by the local monotonic
// clock since: it never depends on the local wall clock being right.
// Before anything is observed it is the local clock.
type serverClock struct {
	local func() time.Time
	mu    sync.Mutex
	at    time.Time // a server timestamp
	seen  time.Time // local time when it was observed
}

func (c *serverClock) observe(at time.Time) {
	if at.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || at.After(c.estimate()) {
		c.at, c.seen = at, c.local()
	}
}

func (c *serverClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.estimate()
}

func (c *serverClock) estimate() time.Time {
	if c.at.IsZero() {
		return c.local()
	}
	return c.at.Add(c.local().Sub(c.seen))
}
