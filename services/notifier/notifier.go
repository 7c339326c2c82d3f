package notifier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/metrics"
	"github.com/gpuq/gpuq/pkg/service"
)

// Config of the notifier.
type Config struct {
	Log events.Log
	// JS follows the advice stream and, without Store, keeps the
	// notifier's buckets. Without JS there is no advice: only the
	// notices decided from the log.
	JS       jetstream.JetStream
	Replicas int // of the buckets (0: 1)
	// Store overrides the KV buckets (tests).
	Store        Store
	Destinations []Destination
	Rules        Rules
	Logger       zerolog.Logger
	Now          func() time.Time
	Tick         time.Duration   // re-evaluate the advice without news (default 5 s)
	Backoff      []time.Duration // DefaultBackoff
	Horizon      time.Duration   // DefaultHorizon
	Timeout      time.Duration   // DefaultTimeout, per attempt
	Queue        int             // DefaultQueue, per destination
	Client       *http.Client    // default: no redirects, Timeout
	// Allow limits where team destinations (gpuq notify add, kept in
	// DestBucket and followed while running) are delivered; the
	// Destinations above, the operator's, are not limited.
	Allow Allow
	// TeamClient overrides the team destinations' client (tests).
	TeamClient *http.Client
	Metrics    prometheus.Registerer
	Ready      func()

	crash func(Delivery) bool // tests: see sender.crash
}

// Notifier is one running notifier.
type Notifier struct {
	cfg     Config
	store   Store
	fold    *service.Fold
	dec     *Decider
	metrics *metrics.Notifier
	sender  *sender
	wctx    context.Context
	wg      sync.WaitGroup

	wmu     sync.Mutex
	workers map[string]*worker
	order   []string // destination ids: the operator's, then the teams' as added

	cursor    uint64 // notices of records up to here were recorded before this run
	saved     uint64 // the cursor last saved
	savedAt   time.Time
	evaluated time.Time // the last Evaluate of every task
	decided   []Notice  // decided, not yet recorded (the fold's lock guards it)

	amu    sync.Mutex
	advice map[string]estimate.Advice // received, not yet given to the decider
	wake   chan struct{}
}

// orderSeq orders deliveries recorded at the same time.
var orderSeq atomic.Uint64

// Run blocks until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Tick == 0 {
		cfg.Tick = 5 * time.Second
	}
	if cfg.Backoff == nil {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Horizon == 0 {
		cfg.Horizon = DefaultHorizon
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Queue == 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.Client == nil {
		cfg.Client = newClient(cfg.Timeout)
	}
	if cfg.TeamClient == nil {
		cfg.TeamClient = restrictedClient(cfg.Timeout, cfg.Allow)
	}
	n := &Notifier{cfg: cfg, dec: NewDecider(cfg.Rules), workers: map[string]*worker{}, advice: map[string]estimate.Advice{}, wake: make(chan struct{}, 1)}
	return n.run(ctx)
}

func (n *Notifier) run(ctx context.Context) error {
	cfg := n.cfg
	// 1. The store, and the cursor: a first run starts at the log's end
	// (no notices about the past).
	n.store = cfg.Store
	if n.store == nil {
		kv, err := OpenKV(ctx, cfg.JS, cfg.Replicas)
		if err != nil {
			return err
		}
		n.store = kv
	}
	cur, found, err := n.store.Cursor(ctx)
	if err != nil {
		return err
	}
	if !found {
		if cur, err = cfg.Log.LastSeq(ctx); err != nil {
			return err
		}
		if err := n.store.SetCursor(ctx, cur); err != nil {
			return err
		}
	}
	n.cursor, n.saved = cur, cur

	// 2. A worker per destination, with what was pending.
	if cfg.Metrics != nil {
		n.metrics = metrics.NewNotifier(cfg.Metrics, n.pending)
	}
	n.sender = &sender{client: cfg.Client, team: cfg.TeamClient, store: n.store, backoff: cfg.Backoff, horizon: cfg.Horizon, timeout: cfg.Timeout, cap: cfg.Queue,
		now: cfg.Now, logger: cfg.Logger, metrics: n.metrics, crash: cfg.crash}
	wctx, stop := context.WithCancel(ctx)
	defer n.wg.Wait()
	defer stop()
	n.wctx = wctx
	for _, d := range cfg.Destinations {
		n.setDest(d)
	}
	var teams *Destinations
	if cfg.JS != nil {
		// The teams' destinations as they are now, before the pending
		// deliveries are handed out; then followed.
		if teams, err = OpenDestinations(ctx, cfg.JS, cfg.Replicas); err != nil {
			return err
		}
		ds, err := teams.List(ctx)
		if err != nil {
			return err
		}
		for _, d := range ds {
			n.setDest(d.Destination())
		}
	}
	pending, err := n.store.Pending(ctx)
	if err != nil {
		return err
	}
	for _, d := range pending {
		d.order = orderSeq.Add(1)
		if isTaskDest(d.Dest) {
			n.addTask(TaskDestination(d.URL), d)
			continue
		}
		w := n.worker(d.Dest)
		if w == nil {
			d.LastError = "destination no longer configured"
			if err := n.store.Dead(ctx, d); err != nil {
				return err
			}
			n.metrics.Count(d.Type, "dead")
			continue
		}
		w.add(d)
	}
	if len(pending) > 0 {
		cfg.Logger.Info().Int("pending", len(pending)).Msg("notifier: resuming deliveries")
	}
	if teams != nil {
		go n.followDests(wctx, teams)
	}

	// 3. Fold and follow the log; decide on each record, on advice and
	// at each tick; record what was decided; deliver.
	n.fold = service.New("notifier", cfg.Log, cfg.Logger, nil)
	if cfg.Metrics != nil {
		metrics.Fold(cfg.Metrics, "notifier", func() *service.Fold { return n.fold }, cfg.Log.LastSeq)
	}
	return n.fold.Run(ctx, service.Hooks{
		Applied: func(st *domain.State, r events.Record, skipped string) {
			if skipped != "" {
				return
			}
			ns := n.dec.Record(st, r)
			if r.Seq > n.cursor { // else recorded before this run
				n.decided = append(n.decided, ns...)
			}
		},
		CaughtUp: func(ctx context.Context) error {
			if cfg.JS != nil {
				go n.followAdvice(ctx)
			}
			if cfg.Ready != nil {
				cfg.Ready()
			}
			return nil
		},
		React: n.react,
		Tick:  cfg.Tick,
		Wake:  n.wake,
	})
}

func (n *Notifier) pending() int {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	total := 0
	for _, w := range n.workers {
		total += w.len()
	}
	return total
}

// worker is destination id's worker, or nil.
func (n *Notifier) worker(id string) *worker {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	return n.workers[id]
}

// setDest starts delivering to d, or replaces its settings (a new secret
// or events: its queue starts over from the store).
func (n *Notifier) setDest(d Destination) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	w := newWorker(n.sender, d)
	if old := n.workers[d.ID]; old != nil {
		old.stop()
		// What was pending for it comes back from the store at the new
		// worker's first refill.
		w.overflow = true
	} else {
		n.order = append(n.order, d.ID)
	}
	ctx, stop := context.WithCancel(n.wctx)
	w.stop = stop
	n.workers[d.ID] = w
	n.wg.Add(1)
	go func() { defer n.wg.Done(); w.run(ctx) }()
}

// removeDest stops delivering to destination id; what was pending for
// it stays recorded and goes to the dead letters at the next start.
func (n *Notifier) removeDest(id string) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	if w := n.workers[id]; w != nil {
		w.stop()
		delete(n.workers, id)
		n.order = slices.DeleteFunc(n.order, func(s string) bool { return s == id })
	}
}

// react decides on the advice received and the time, records every
// notice decided, hands them to the workers and moves the cursor. A
// failed record keeps the notices for the next reaction and the cursor
// where it is.
func (n *Notifier) react(ctx context.Context) error {
	n.amu.Lock()
	adv := n.advice
	n.advice = map[string]estimate.Advice{}
	n.amu.Unlock()
	now := n.cfg.Now()
	var (
		ns  []Notice
		seq uint64
	)
	n.fold.Read(func(st *domain.State) {
		for _, a := range adv {
			n.dec.Advice(a)
		}
		// Everything at each tick (time moves starts_soon closer), the
		// news after each batch.
		if now.Sub(n.evaluated) >= n.cfg.Tick {
			n.decided = append(n.decided, n.dec.Evaluate(st, now)...)
			n.evaluated = now
		} else {
			n.decided = append(n.decided, n.dec.EvaluateFresh(st, now)...)
		}
		ns, n.decided, seq = n.decided, nil, st.Seq
	})
	for i, x := range ns {
		if err := n.record(ctx, x, now); err != nil {
			if ctx.Err() == nil {
				n.cfg.Logger.Warn().Err(err).Str("notice", x.ID).Msg("notifier: recording a notice failed; will retry")
			}
			n.fold.Read(func(*domain.State) { n.decided = append(ns[i:], n.decided...) })
			return nil
		}
	}
	// The cursor at most once a second: a restart decides again what
	// came since and finds it recorded (Store.Recorded).
	if seq > n.saved && now.Sub(n.savedAt) >= time.Second {
		if err := n.store.SetCursor(ctx, seq); err != nil {
			if ctx.Err() == nil {
				n.cfg.Logger.Warn().Err(err).Msg("notifier: saving the cursor failed")
			}
			return nil
		}
		n.saved, n.savedAt = seq, now
	}
	return nil
}

// record records notice x for every destination that wants it, once,
// and queues it there: the operator's and the teams' destinations, then
// the task's own (gpuq submit --notify).
func (n *Notifier) record(ctx context.Context, x Notice, now time.Time) error {
	var to []Destination
	for _, w := range n.destinations() {
		if w.dest.Wants(x) {
			to = append(to, w.dest)
		}
	}
	for _, u := range x.notify {
		to = append(to, TaskDestination(u))
	}
	if len(to) == 0 {
		return nil
	}
	done, err := n.store.Recorded(ctx, x.ID)
	if err != nil {
		return err
	}
	if done {
		n.metrics.Count(x.Type, "duplicate")
		return nil
	}
	body, err := json.Marshal(x)
	if err != nil {
		return err
	}
	ds := make([]Delivery, 0, len(to))
	for _, d := range to {
		ds = append(ds, Delivery{NoticeID: x.ID, Type: x.Type, TaskID: x.TaskID, Dest: d.ID, URL: d.URL, Body: body, Created: now, Next: now})
	}
	if err := n.store.Record(ctx, x.ID, ds); err != nil {
		return err
	}
	for i, d := range ds {
		d.order = orderSeq.Add(1)
		n.metrics.Count(d.Type, "recorded")
		if to[i].task {
			n.addTask(to[i], d)
		} else if w := n.worker(d.Dest); w != nil {
			w.add(d)
		}
	}
	return nil
}

// addTask queues d at task destination dest's worker, starting one when
// there is none (none is kept for a destination idle for a while).
func (n *Notifier) addTask(dest Destination, d Delivery) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	w := n.workers[dest.ID]
	if w == nil {
		w = newWorker(n.sender, dest)
		// A new worker reads back what the store holds for it (deliveries
		// of an earlier worker of the same URL that stopped idle cannot
		// exist: it stops only when it has none).
		w.idle = n.dropIdle
		ctx, stop := context.WithCancel(n.wctx)
		w.stop = stop
		n.workers[dest.ID] = w
		n.wg.Add(1)
		go func() { defer n.wg.Done(); w.run(ctx) }()
	}
	w.add(d)
}

// dropIdle drops task destination worker w when it has nothing to do;
// true: dropped. Under wmu, so that addTask never adds to a worker that
// has stopped.
func (n *Notifier) dropIdle(w *worker) bool {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	if !w.empty() || n.workers[w.dest.ID] != w {
		return false
	}
	delete(n.workers, w.dest.ID)
	w.stop()
	return true
}

// destinations are the workers in configuration order.
func (n *Notifier) destinations() []*worker {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	out := make([]*worker, 0, len(n.order))
	for _, id := range n.order {
		out = append(out, n.workers[id])
	}
	return out
}

// followDests follows the teams' destinations bucket until ctx ends:
// added, changed and removed destinations, and test requests.
func (n *Notifier) followDests(ctx context.Context, teams *Destinations) {
	for ctx.Err() == nil {
		w, err := teams.kv.WatchAll(ctx)
		if err != nil {
			n.cfg.Logger.Warn().Err(err).Msg("notifier: watching the destinations failed; retrying")
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
			continue
		}
		for e := range w.Updates() {
			if e != nil {
				n.destUpdate(ctx, teams, e)
			}
		}
		_ = w.Stop()
	}
}

func (n *Notifier) destUpdate(ctx context.Context, teams *Destinations, e jetstream.KeyValueEntry) {
	key, del := e.Key(), e.Operation() != jetstream.KeyValuePut
	switch {
	case strings.HasPrefix(key, "d."):
		id := strings.TrimPrefix(key, "d.")
		if del {
			n.removeDest(id)
			n.cfg.Logger.Info().Str("dest", id).Msg("notifier: destination removed")
			return
		}
		var d TeamDest
		if json.Unmarshal(e.Value(), &d) != nil || d.ID != id {
			return
		}
		if w := n.worker(id); w != nil && string(w.dest.Secret) == d.Secret && slices.Equal(w.dest.Events, d.Events) && w.dest.URL == d.URL {
			return // as it is (the watch's initial values)
		}
		n.setDest(d.Destination())
		n.cfg.Logger.Info().Str("dest", id).Str("team", d.Team).Str("url", d.URL).Msg("notifier: destination set")
	case strings.HasPrefix(key, "t.") && !del:
		id, nonce, _ := strings.Cut(strings.TrimPrefix(key, "t."), ".")
		w := n.worker(id)
		if w == nil {
			return
		}
		now := n.cfg.Now()
		x := Notice{ID: testID(id, nonce), Type: Test, Team: w.dest.Team, Time: now, only: id,
			Text: sentence(fmt.Sprintf("A test of gpuq's notifications for team %s: this destination receives them", w.dest.Team))}
		if err := n.record(ctx, x, now); err != nil {
			n.cfg.Logger.Warn().Err(err).Msg("notifier: a test notice was not recorded")
			return
		}
		_ = teams.kv.Delete(ctx, key)
	}
}

// followAdvice receives the latest advice of every task, then each new
// one, until ctx ends; an ordered consumer re-creates itself after a
// failure, and a consumer that cannot be created is retried.
func (n *Notifier) followAdvice(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := n.consumeAdvice(ctx)
		if ctx.Err() != nil {
			return
		}
		n.cfg.Logger.Warn().Err(err).Str("retry_in", backoff.String()).Msg("notifier: following the advice failed")
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (n *Notifier) consumeAdvice(ctx context.Context) error {
	if _, err := events.EnsureStream(ctx, n.cfg.JS, events.AdviceStream(n.cfg.Replicas)); err != nil {
		return err
	}
	c, err := n.cfg.JS.OrderedConsumer(ctx, events.AdviceStreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.AdvicePrefix + ">"}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy})
	if err != nil {
		return err
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		var a estimate.Advice
		if json.Unmarshal(m.Data(), &a) != nil || a.TaskID == "" {
			return // not advice: skipped
		}
		n.amu.Lock()
		n.advice[a.TaskID] = a
		n.amu.Unlock()
		select {
		case n.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Stop()
	return errors.New("stopped")
}
