package advisor

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/metrics"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/service"
)

// Config of the advisor.
type Config struct {
	Log    events.Log
	JS     jetstream.JetStream // publishes to the advice stream
	NC     *nats.Conn          // answers estimate and stats requests (optional)
	Policy *policy.Policy      // the scheduler's policy: estimates run it
	Logger zerolog.Logger
	Now    func() time.Time
	Tick   time.Duration // re-advise without events (default 5 s)
	Ready  func()
	// Replicas of the advice stream (0: 1; 3 on a 3-node NATS cluster).
	Replicas int
	// Metrics, when set, gets the advisor's metrics (pkg/metrics): its
	// fold and the estimates' self-measurement.
	Metrics prometheus.Registerer
	// SnapshotEvery: applied events between two snapshots of the fold and
	// the estimator (its calibration residuals, its estimates at
	// submission, its recent arrivals, its predictor), in the advisor's
	// own bucket (events.SnapshotBucketOf("advisor")); 0:
	// DefaultSnapshotEvery, negative: none written or loaded.
	SnapshotEvery int
	// AdviseEvery: full re-estimates of every queued task's advice at most
	// this often (a burst of events is coalesced into one; the advice
	// follows at most this long after the event plus one re-estimate);
	// 0: estimate.DefaultLiveInterval, and re-estimates take at most
	// estimate.DefaultLiveShare of the wall clock (a queue whose
	// re-estimate takes seconds is re-estimated less often); negative:
	// after every batch.
	AdviseEvery time.Duration
	// EstimateWorkers: goroutines that run the forward simulations of the
	// estimates at submission (estimate.Estimator.Workers, the same
	// estimates), so that folding a submission does not wait for its
	// simulation — the advice after it does not need it (Estimator.Late
	// reads it only once the task waited AlertMinWait); 0: 2, negative:
	// none (each simulated in the fold, as before).
	EstimateWorkers int
	// SnapshotBudget: a snapshot is also due once the estimator has spent
	// this long folding the records since the last one (its forward
	// simulations), however few they were; 0: DefaultSnapshotBudget,
	// negative: by count only.
	SnapshotBudget time.Duration
}

// DefaultSnapshotBudget bounds what a restart's tail costs the advisor:
// its records' cost grows with the queue (a forward simulation of the
// whole queue per submission: 3 ms each with 1M events in the log), so a
// count alone bounds the tail's length, not its time. A snapshot is due
// after 1 s of folding (or DefaultSnapshotEvery records), so a restart
// folds at most about 1 s of tail after its snapshot's restore
// (docs/performance.md, restart_advisor_1m_s); encoding is throttled as
// every service's (service.Snapshots.Take).
const DefaultSnapshotBudget = time.Second

// DefaultSnapshotEvery is the advisor's snapshot interval: a tenth of
// the other services' (snapshot.DefaultEvery), because its fold costs far
// more per event — a forward simulation for each submission — so the tail
// a restart after a crash folds must be shorter for the same restart
// time (docs/performance.md, restart_advisor_1m_s). A snapshot's encoding
// is throttled as every service's (service.Snapshots.Take).
const DefaultSnapshotEvery = 1_000

// SnapshotName is the advisor's object in its snapshot bucket.
const SnapshotName = "advisor"

// SnapshotBucket is the advisor's snapshot bucket.
var SnapshotBucket = events.SnapshotBucketOf(SnapshotName)

// Advisor is one running advisor: the runtime's fold of the log (which
// also guards the estimator and the advice last published) and its
// reactions.
type Advisor struct {
	cfg    Config
	fold   *service.Fold
	est    *estimate.Estimator
	live   *estimate.Live // every queued task's advice, kept current
	wake   chan struct{}  // React again: a coalesced re-estimate is due
	timer  *time.Timer
	last   map[string]estimate.Advice
	alerts map[alarm.Cause]int // alerts raised (transitions into alert) by cause, for operators
	// stats is what /metrics reads (the estimator's figures and the alerts
	// by cause), published from the fold's lock at most once a second so
	// that a scrape never waits for a re-estimate holding the lock.
	stats atomic.Pointer[published]
}

// published is the advisor's figures as of its last publication.
type published struct {
	at     time.Time
	stats  estimate.Stats
	alerts map[alarm.Cause]int
}

// publishStats refreshes the figures /metrics reads (the fold's lock held)
// when they are older than a second or an alert was raised since.
func (a *Advisor) publishStats(now time.Time) {
	if p := a.stats.Load(); p != nil && now.Sub(p.at) < time.Second && now.After(p.at) && maps.Equal(p.alerts, a.alerts) {
		return
	}
	a.stats.Store(&published{at: now, stats: a.est.Stats(), alerts: maps.Clone(a.alerts)})
}

// Run blocks until ctx ends.
func Run(ctx context.Context, cfg Config) error { return newAdvisor(cfg).run(ctx) }

func newAdvisor(cfg Config) *Advisor {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Tick == 0 {
		cfg.Tick = 5 * time.Second
	}
	if cfg.Policy == nil {
		cfg.Policy = policy.New(policy.DefaultOptions())
	}
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = DefaultSnapshotEvery
	}
	if cfg.SnapshotBudget == 0 {
		cfg.SnapshotBudget = DefaultSnapshotBudget
	}
	a := &Advisor{cfg: cfg, est: estimate.NewEstimator(cfg.Policy), last: map[string]estimate.Advice{}, wake: make(chan struct{}, 1),
		alerts: map[alarm.Cause]int{}}
	// An estimate over its budget is capped (a lower bound) and listed:
	// once per task in the log, every time in Stats and the metric
	// gpuq_estimate_capped_total.
	var logged sync.Map
	a.est.OnCapped = func(id string, simulated time.Duration) {
		if _, seen := logged.LoadOrStore(id, true); !seen {
			cfg.Logger.Warn().Str("task_id", id).Str("simulated", simulated.Round(time.Second).String()).
				Msg("advisor: the forward simulation spent its budget before the task started; its estimate is capped there (a lower bound)")
		}
	}
	a.live = estimate.NewLive(a.est)
	switch {
	case cfg.AdviseEvery > 0:
		a.live.MinInterval = cfg.AdviseEvery
	case cfg.AdviseEvery < 0:
		a.live.MinInterval, a.live.Share = 0, 0
	}
	switch {
	case cfg.EstimateWorkers == 0:
		a.est.Workers = 2
	case cfg.EstimateWorkers > 0:
		a.est.Workers = cfg.EstimateWorkers
	}
	return a
}

func (a *Advisor) run(ctx context.Context) error {
	cfg := a.cfg
	defer a.est.Close()
	var snaps *service.Snapshots
	if cfg.JS != nil {
		snaps = service.OpenSnapshotsIn(ctx, cfg.JS, SnapshotBucket, cfg.Replicas, SnapshotName, cfg.SnapshotEvery, cfg.Logger)
		if cfg.SnapshotBudget > 0 {
			snaps = snaps.WithBudget(cfg.SnapshotBudget)
		}
	}
	a.fold = service.New("advisor", cfg.Log, cfg.Logger, a.restore(ctx, snaps))
	own := func() [][]byte {
		b, err := a.est.MarshalBinary()
		if err != nil {
			cfg.Logger.Warn().Err(err).Msg("advisor: estimator not snapshotted")
		}
		return [][]byte{b}
	}
	if cfg.Metrics != nil {
		metrics.Fold(cfg.Metrics, "advisor", func() *service.Fold { return a.fold }, cfg.Log.LastSeq)
		metrics.Advisor(cfg.Metrics, func() (estimate.Stats, map[alarm.Cause]int) {
			p := a.stats.Load()
			if p == nil {
				return estimate.Stats{}, nil
			}
			return p.stats, p.alerts
		})
	}
	if _, err := events.EnsureStream(ctx, cfg.JS, events.AdviceStream(cfg.Replicas)); err != nil {
		return err
	}
	var subs []*nats.Subscription
	defer func() {
		for _, sub := range subs {
			_ = sub.Drain()
		}
	}()
	return a.fold.Run(ctx, service.Hooks{
		// The estimator replays its own history with the fold.
		Applied: func(st *domain.State, r events.Record, skipped string) {
			if skipped == "" {
				start := time.Now()
				a.est.Observe(st, r)
				snaps.Spent(time.Since(start))
				a.live.Saw(st, r)
			}
		},
		// Answer estimate and stats requests once the log is folded.
		CaughtUp: func(ctx context.Context) error {
			if cfg.NC != nil {
				// Unscoped and team-scoped (api.TeamPrefix): estimates
				// and stats hold nothing secret, so both answer alike.
				for op, h := range map[string]nats.MsgHandler{api.OpEstimate: a.onEstimate, api.OpStats: a.onStats} {
					for _, subj := range []string{api.SubjectPrefix + op, api.TeamPrefix + "*." + op} {
						sub, err := cfg.NC.QueueSubscribe(subj, api.AdvisorQueueGroup, h)
						if err != nil {
							return err
						}
						subs = append(subs, sub)
					}
				}
			}
			if cfg.Ready != nil {
				cfg.Ready()
			}
			return nil
		},
		// Publish what changed materially.
		React: func(ctx context.Context) error {
			a.publish(ctx)
			return nil
		},
		Tick:      cfg.Tick,
		Wake:      a.wake,
		Snapshots: snaps,
		Own:       own,
	})
}

// restore is the state to fold the log onto, with the estimator as the
// snapshot left it: the snapshot's when both its parts are usable, else
// an empty state and the estimator as it is (the whole log is folded).
func (a *Advisor) restore(ctx context.Context, snaps *service.Snapshots) *domain.State {
	st, parts := snaps.Restore(ctx, a.cfg.Log, 1)
	if parts == nil {
		return st
	}
	if err := a.est.UnmarshalBinary(parts[0]); err != nil {
		// The state is good, the estimator's part is not: fold from the
		// start so that the estimator learns again.
		a.cfg.Logger.Warn().Err(err).Msg("advisor: snapshot's estimator ignored; folding the whole log")
		return domain.NewState()
	}
	return st
}

func (a *Advisor) publish(ctx context.Context) {
	var out []estimate.Advice
	var due time.Time
	a.fold.Read(func(st *domain.State) {
		now := a.cfg.Now()
		out = a.changed(st, now)
		a.publishStats(now)
		if a.live.Pending() {
			due = a.live.Due()
		}
	})
	if !due.IsZero() {
		// A re-estimate was coalesced: advise again when it is due, not at
		// the next tick.
		if a.timer != nil {
			a.timer.Stop()
		}
		a.timer = time.AfterFunc(max(time.Until(due), time.Millisecond), func() {
			select {
			case a.wake <- struct{}{}:
			default:
			}
		})
	}
	for _, v := range out {
		b, _ := json.Marshal(v)
		if _, err := a.cfg.JS.Publish(ctx, events.AdviceSubject(v.TaskID), b); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn().Err(err).Str("task_id", v.TaskID).Msg("advisor: publish failed")
		}
	}
}

// changed is the advice that changed materially since it was last
// published (the fold's lock held).
func (a *Advisor) changed(st *domain.State, now time.Time) []estimate.Advice {
	adv := a.live.Advise(st, now)
	var out []estimate.Advice
	seen := map[string]bool{}
	for _, v := range adv {
		seen[v.TaskID] = true
		old, ok := a.last[v.TaskID]
		if ok && !estimate.Material(old, v) {
			continue
		}
		if v.Late != nil && v.Late.Alarm && (old.Late == nil || !old.Late.Alarm) {
			// Scheduling is broken: counted by cause and logged for the
			// operators (the metric gpuq_advisor_alerts_total{cause}).
			a.alerts[v.Late.Cause]++
			a.cfg.Logger.Warn().Str("task_id", v.TaskID).Str("cause", string(v.Late.Cause)).Str("tell", v.Late.Tell).Str("alert", v.Alert).
				Msg("advisor: wait beyond 2× the estimate and scheduling is broken")
		}
		a.last[v.TaskID] = v
		out = append(out, v)
	}
	// Tasks that left the queue get a last advice with their state. A
	// dispatched task is followed until it starts (or ends, or is
	// requeued), so the last advice does not depend on whether dispatched
	// and started were folded in one batch or two.
	var gone []string
	for id := range a.last {
		if !seen[id] {
			gone = append(gone, id)
		}
	}
	sort.Strings(gone)
	for _, id := range gone {
		v, ok := a.est.AdviseOne(st, id, now)
		if !ok {
			delete(a.last, id)
			continue
		}
		if a.last[id].State == v.State {
			continue // published already
		}
		if v.State == string(domain.Dispatched) {
			a.last[id] = v
		} else {
			delete(a.last, id)
		}
		out = append(out, v)
	}
	return out
}

// reply answers m with result or err (api.ReplyOf, the services' one
// reply).
func reply(m *nats.Msg, result any, err *api.Error) {
	if err != nil {
		_ = api.Respond(m, api.ReplyOf(nil, err))
		return
	}
	_ = api.Respond(m, api.ReplyOf(result, nil))
}

func (a *Advisor) onEstimate(m *nats.Msg) {
	var req api.EstimateRequest
	doc, derr := api.Decode(m.Data, &req)
	if derr != nil {
		reply(m, nil, derr)
		return
	}
	// what_if_gpus is omitted when not asked for; given, it must be ≥ 1
	// (an explicit 0 is not "unchanged").
	if doc != nil && doc.Has("what_if_gpus") && req.WhatIfGPUs < 1 {
		reply(m, nil, &api.Error{Msg: "must be ≥ 1", Field: "what_if_gpus", Status: http.StatusBadRequest})
		return
	}
	v, err := a.Estimate(req, a.cfg.Now())
	reply(m, v, err)
}

// Estimate answers one estimate request (what-ifs included).
func (a *Advisor) Estimate(req api.EstimateRequest, now time.Time) (estimate.Advice, *api.Error) {
	if req.TaskID == "" {
		return estimate.Advice{}, &api.Error{Msg: "required", Field: "task_id"}
	}
	var prio domain.Priority
	if req.WhatIfPriority != "" {
		p, err := domain.ParsePriority(req.WhatIfPriority)
		if err != nil {
			return estimate.Advice{}, &api.Error{Msg: "must be one of critical, high, medium, low", Field: "what_if_priority"}
		}
		prio = p
	}
	if req.WhatIfGPUs < 0 {
		return estimate.Advice{}, &api.Error{Msg: "must be ≥ 1", Field: "what_if_gpus"}
	}
	var (
		v    estimate.Advice
		aerr *api.Error
	)
	a.fold.Read(func(st *domain.State) { v, aerr = a.estimate(st, req, prio, now) })
	return v, aerr
}

func (a *Advisor) estimate(st *domain.State, req api.EstimateRequest, prio domain.Priority, now time.Time) (estimate.Advice, *api.Error) {
	t := st.Tasks[req.TaskID]
	if t == nil {
		return estimate.Advice{}, &api.Error{Msg: fmt.Sprintf("task %s not found", req.TaskID), NotFound: true}
	}
	if req.WhatIfGPUs == 0 && prio == 0 {
		v, _ := a.est.AdviseOne(st, req.TaskID, now)
		return v, nil
	}
	// The hypothetical task: the change applied to a copy, advised there.
	v, ok := a.est.AdviseWhatIf(st, t.ID, req.WhatIfGPUs, prio, now)
	if !ok {
		return estimate.Advice{}, &api.Error{Msg: "what-ifs are for queued tasks; this one is " + string(t.State), Field: "task_id"}
	}
	return v, nil
}

// StatsReply is the advisor's self-measurement.
type StatsReply struct {
	estimate.Stats
	AlertsRaised int `json:"alerts_raised"`
	// AlertsByCause: AlertsRaised by the alarm's cause (pkg/alarm).
	AlertsByCause map[alarm.Cause]int `json:"alerts_by_cause"`
	Queued        int                 `json:"queued"`
}

func (a *Advisor) onStats(m *nats.Msg) {
	var s StatsReply
	a.fold.Read(func(st *domain.State) {
		n := 0
		for _, c := range a.alerts {
			n += c
		}
		s = StatsReply{Stats: a.est.Stats(), AlertsRaised: n, AlertsByCause: maps.Clone(a.alerts), Queued: len(st.Queued())}
	})
	reply(m, s, nil)
}
