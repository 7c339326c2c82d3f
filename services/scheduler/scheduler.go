package scheduler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/decide"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
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
}

// Scheduler is one instance.
type Scheduler struct {
	cfg   Config
	mu    sync.Mutex
	state *domain.State
	lead  bool
	seen  map[string]time.Time // node heartbeats
	pred  *estimate.Predictor  // run times learned from the log, for backfill
	snaps *snapshots           // nil: no snapshots
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
		cfg.Policy = policy.New(policy.Options{})
	}
	if cfg.Instance == "" {
		h, _ := os.Hostname()
		cfg.Instance = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	return &Scheduler{cfg: cfg}
}

// Run blocks until ctx ends: wait for the lease, lead while it holds.
func Run(ctx context.Context, cfg Config) error { return New(cfg).Run(ctx) }

// Run implements the instance's life: standby → leader → standby ...
func (s *Scheduler) Run(ctx context.Context) error {
	lease, err := newLease(ctx, s.cfg.JS, s.cfg.Instance, s.cfg.LeaseTTL)
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
		s.cfg.Logger.Info().Str("instance", s.cfg.Instance).Msg("scheduler: leading")
		err = s.lead_(lctx)
		lease.release()
		if ctx.Err() != nil {
			return nil
		}
		s.cfg.Logger.Warn().Err(err).Msg("scheduler: lost leadership; standing by")
	}
	return nil
}

// Snapshot returns a copy of the live state (nil before the first fold).
func (s *Scheduler) Snapshot() *domain.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == nil {
		return nil
	}
	return s.state.Clone()
}

// Leading reports whether this instance holds the lease.
func (s *Scheduler) Leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lead
}

func (s *Scheduler) lead_(ctx context.Context) error {
	log := s.cfg.Log
	// 1. Fold the whole log, or the snapshot and the log after it.
	st, pred, from := s.snaps.restore(ctx, log)
	s.pred = pred
	if _, err := events.ReadAll(ctx, log, from, "", func(r events.Record) error { s.fold(st, r); return nil }); err != nil {
		return err
	}
	defer s.snaps.final(st, s.pred)
	s.snaps.take(ctx, st, s.pred) // a long fold is worth a snapshot at once
	// Every known node gets a full timeout to show its heartbeat.
	seen := map[string]time.Time{}
	for name := range st.Nodes {
		seen[name] = s.cfg.Now()
	}
	s.mu.Lock()
	s.state, s.lead, s.seen = st, true, seen
	s.mu.Unlock()
	if err := s.watchHeartbeats(ctx); err != nil {
		return err
	}
	defer func() { s.mu.Lock(); s.lead = false; s.mu.Unlock() }()

	// 2. Follow the log from the next sequence.
	f, err := log.Follow(ctx, st.Seq+1, "")
	if err != nil {
		return err
	}
	defer f.Close()
	recs := make(chan events.Stored, 1024)
	ferr := make(chan error, 1)
	go func() {
		for {
			m, err := f.Next(ctx)
			if err != nil {
				ferr <- err
				return
			}
			recs <- m
		}
	}()
	if s.cfg.Ready != nil {
		s.cfg.Ready()
	}
	tick := time.NewTicker(s.cfg.Tick)
	defer tick.Stop()
	var waitFor uint64 // our last append; no pass until folded
	for {
		// 3. Decide and append, unless our own appends are still in flight.
		if st.Seq >= waitFor {
			last, err := s.pass(ctx, st)
			if err != nil {
				return err
			}
			if last > waitFor {
				waitFor = last
			}
		}
		// 4. Wait for new events (or a tick), then apply all that are there.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-ferr:
			return err
		case <-tick.C:
		case m := <-recs:
			if err := s.apply(st, m); err != nil {
				return err
			}
		drain:
			for {
				select {
				case m := <-recs:
					if err := s.apply(st, m); err != nil {
						return err
					}
				default:
					break drain
				}
			}
			s.snaps.take(ctx, st, s.pred)
		}
	}
}

func (s *Scheduler) apply(st *domain.State, m events.Stored) error {
	r, err := events.Decode(m)
	if err != nil {
		s.cfg.Logger.Error().Err(err).Uint64("seq", m.Seq).Msg("scheduler: undecodable event skipped")
		st.Seq = m.Seq
		return nil
	}
	s.mu.Lock()
	s.fold(st, r)
	s.mu.Unlock()
	return nil
}

// fold applies a record and learns run times from completions.
func (s *Scheduler) fold(st *domain.State, r events.Record) {
	st.Apply(r)
	s.snaps.saw(r)
	if c, ok := r.Event.(events.Completed); ok {
		if t := st.Tasks[c.TaskID]; t != nil {
			s.pred.Observe(t)
		}
	}
}

// pass runs the pure policy and the protocol reactions and appends their
// events, all published before any ack is awaited when the log can batch
// (events.AppendAll: each is stored or refused as if appended alone, in
// order); it returns the highest sequence appended.
func (s *Scheduler) pass(ctx context.Context, st *domain.State) (uint64, error) {
	now := s.cfg.Now()
	s.mu.Lock()
	live := decide.Liveness{LastSeen: s.seen, Timeout: s.cfg.NodeTimeout}
	if s.cfg.NodeTimeout < 0 {
		live.Timeout = 0
	}
	cmds := decide.Plan(st, s.cfg.Policy, now, live, s.pred.ForPolicy(now))
	s.mu.Unlock()
	if len(cmds) == 0 {
		return 0, nil
	}
	msgs := make([]events.Msg, 0, len(cmds))
	sent := make([]int, 0, len(cmds)) // msgs[j] is cmds[sent[j]]
	for i, c := range cmds {
		subj, data, _, err := events.Encode(c.Event, events.Meta{Time: now})
		if err != nil {
			s.cfg.Logger.Error().Err(err).Str("event", string(c.Event.EventType())).Msg("scheduler: append failed")
			continue
		}
		msgs = append(msgs, events.Msg{Subject: subj, Data: data, MsgID: c.MsgID, Expect: c.Expect})
		sent = append(sent, i)
	}
	var last uint64
	for j, r := range events.AppendAll(ctx, s.cfg.Log, msgs) {
		c := cmds[sent[j]]
		switch {
		case errors.Is(r.Err, events.ErrConflict):
			s.cfg.Logger.Debug().Str("task", c.Event.Key()).Msg("scheduler: stale decision refused; will re-decide")
			continue
		case r.Err != nil:
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			s.cfg.Logger.Error().Err(r.Err).Str("event", string(c.Event.EventType())).Msg("scheduler: append failed")
			continue
		}
		if !r.Ack.Duplicate && r.Ack.Seq > last {
			last = r.Ack.Seq
		}
		s.cfg.Logger.Info().Str("event", string(c.Event.EventType())).Str("task", c.Event.Key()).Uint64("seq", r.Ack.Seq).Msg("scheduler: decided")
	}
	return last, nil
}

// watchHeartbeats follows the agents' heartbeat bucket into s.seen.
func (s *Scheduler) watchHeartbeats(ctx context.Context) error {
	kv, err := s.cfg.JS.CreateOrUpdateKeyValue(ctx, events.HeartbeatKV(0))
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil || e.Operation() != jetstream.KeyValuePut {
					continue
				}
				s.mu.Lock()
				// The server's time of the heartbeat, or ours if it is older
				// than our start (a standby taking over must not declare
				// nodes lost from heartbeats it never waited for).
				at := e.Created()
				if prev, ok := s.seen[e.Key()]; !ok || at.After(prev) {
					s.seen[e.Key()] = at
				}
				s.mu.Unlock()
			}
		}
	}()
	return nil
}
