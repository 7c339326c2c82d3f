package submitter

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/metrics"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/service"
)

// Config configures Run.
type Config struct {
	NC       *nats.Conn // for the request/reply API (queue group api.QueueGroup); nil = no NATS API
	Log      events.Log // the audit log
	HTTPAddr string     // "" = no HTTP server
	Limits   domain.Limits
	Logger   zerolog.Logger
	Now      func() time.Time // default time.Now; the only clock read
	Ready    func()           // called once the read model caught up and the API/HTTP listen
	// Health, when set, is asked by GET /healthz once the service is ready:
	// a non-nil error answers 503 (e.g. `gpuq dev` reports its other
	// services still starting).
	Health func() error
	// Tokens, when set, are the HTTP API's bearer tokens: every route but
	// /healthz needs one (401), and a team's token reaches only its team's
	// tasks (403); /metrics needs the admin's. nil: the HTTP API is open.
	Tokens *auth.Tokens
	// HTTPHosts are Host names the HTTP API answers to besides the listen
	// address's own (browser.go); "*" admits any Host (a proxy in front
	// checks it). HTTPOrigins are browser origins (scheme://host[:port])
	// allowed besides the request's own.
	HTTPHosts   []string
	HTTPOrigins []string
	// MetricsAddr, when set, also serves /metrics (and a plain /healthz)
	// there, without a token: a listener the operator keeps off the
	// network on purpose. /metrics on the HTTP API stays, behind the admin
	// token when Tokens are set.
	MetricsAddr string
	// NATSAuth says the NATS server enforces gpuq's roles (`gpuq auth
	// init`): a request on an unscoped API subject is the admin's, one on
	// gpuq.api.v1.team.<team>.> the team's, and a cancel records that
	// credential as its `by`. false: a cancel's by is what the caller said.
	NATSAuth bool
	// TLS, when set, serves the HTTP API over TLS.
	TLS *tls.Config
	// SnapshotEvery: applied events between two snapshots of the read
	// model (0: snapshot.DefaultEvery; negative: none), kept in the
	// submitter's own bucket (events.SnapshotBucketOf("submitter")) when
	// the log is on JetStream. Replicas of that bucket (0: 1).
	SnapshotEvery int
	Replicas      int
	// Metrics, when set, gets the submitter's metrics (pkg/metrics: its
	// fold, the tasks and GPUs as it sees them), and HTTP serves the
	// registry at /metrics, before the fold is ready too.
	Metrics *prometheus.Registry
	// Stream sizes the live stream, GET /v1/events (zero: the defaults).
	Stream StreamConfig
	// Policy is the scheduler's policy (its options: preemption, order,
	// teams): the dashboard's plan, teams and explanations run it (nil:
	// the default policy, as the scheduler's default).
	Policy *policy.Policy
}

const (
	// syncTimeout bounds how long a query waits for the fold to reach the
	// log's last sequence (read-your-writes).
	syncTimeout = 5 * time.Second
	// requestTimeout bounds one NATS request's work.
	requestTimeout = 15 * time.Second
	// shutdownTimeout bounds how long in-flight requests may finish.
	shutdownTimeout = 5 * time.Second
	// maxInFlight bounds concurrently handled NATS requests.
	maxInFlight = 64
	// maxBody bounds request bodies, HTTP and NATS: the log's record
	// limit, as no request needs more than a submission, and a submission
	// larger than a record could not be recorded.
	maxBody = events.MaxRecordBytes
	// appendAttempts bounds retries of a conditional append after conflicts.
	appendAttempts = 5
)

// server holds what the operations share.
type server struct {
	log         events.Log
	reads       events.Log // log, reading by direct gets where it can (reads.go)
	lastSeq     lastSeqFlight
	queueCache  queueCache
	histories   historyCache
	nc          *nats.Conn // asks agents for task output; nil: no logs
	limits      domain.Limits
	now         func() time.Time
	logger      zerolog.Logger
	m           *model
	syncTimeout time.Duration
	health      func() error
	tokens      *auth.Tokens
	ready       atomic.Bool
	snaps       *service.Snapshots // nil: no snapshots
	metrics     *prometheus.Registry
	hosts       *hostPolicy     // the Host names the HTTP API answers to
	origins     map[string]bool // browser origins allowed besides the request's own
	natsAuth    bool
	hub         *hub // the live stream's fan-out (stream.go)
	// The dashboard's reads (dashboard.go).
	pol       *policy.Policy
	plans     planCache
	explains  explainer
	estimates estimateLog
	stats     statsLog
}

func newServer(cfg Config) *server {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	origins, _ := originSet(cfg.HTTPOrigins) // Run refuses a bad one
	s := &server{
		hosts:       newHostPolicy(cfg.HTTPAddr, cfg.HTTPHosts),
		origins:     origins,
		natsAuth:    cfg.NATSAuth,
		log:         cfg.Log,
		reads:       directReads(cfg.Log),
		nc:          cfg.NC,
		limits:      cfg.Limits,
		now:         now,
		logger:      cfg.Logger,
		m:           newModel(cfg.Log, cfg.Logger),
		syncTimeout: syncTimeout,
		health:      cfg.Health,
		tokens:      cfg.Tokens,
		metrics:     cfg.Metrics,
	}
	s.hub = newHub(s, cfg.Stream)
	s.pol = cfg.Policy
	if s.pol == nil {
		s.pol = policy.New(policy.Options{})
	}
	s.explains.sem = make(chan struct{}, 1)
	return s
}

// Run serves the submitter until ctx ends. It returns nil on a clean
// shutdown, or the error that kept it from starting or serving (the initial
// read of the log, subscribing, listening). Losing the log's follow is not
// fatal: it is retried with backoff while queries answer 503 if they cannot
// catch up.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Log == nil {
		return errors.New("submitter: Config.Log is required")
	}
	if _, err := originSet(cfg.HTTPOrigins); err != nil {
		return fmt.Errorf("submitter: %w", err)
	}
	s := newServer(cfg)
	lg := s.logger
	if cfg.Metrics != nil {
		src := func() *service.Fold { return s.m.f }
		metrics.Fold(cfg.Metrics, "submitter", src, cfg.Log.LastSeq)
		metrics.State(cfg.Metrics, "submitter", src)
		s.hub.registerMetrics(cfg.Metrics)
	}

	// 0. The read model starts from its snapshot, if there is a usable
	// one (the whole log is folded otherwise).
	if j, ok := cfg.Log.(interface{ JetStream() jetstream.JetStream }); ok {
		s.snaps = service.OpenSnapshotsIn(ctx, j.JetStream(), events.SnapshotBucketOf("submitter"), cfg.Replicas, "submitter", cfg.SnapshotEvery, lg)
		st, parts := s.snaps.Restore(ctx, cfg.Log, 1)
		pred := estimate.NewPredictor(0)
		if parts != nil && pred.UnmarshalBinary(parts[0]) != nil {
			// The state is good, the predictor is not: fold from the
			// start so that the predictor learns again.
			st, pred = domain.NewState(), estimate.NewPredictor(0)
		}
		s.m = &model{f: service.New("submitter", cfg.Log, lg, st), pred: pred}
	}
	// The queue and cluster metrics read a summary published once a
	// second, never the fold's lock.
	s.m.f.SummaryEvery = time.Second

	// 1. Listen for HTTP first, so /healthz answers 503 while catching up;
	// the operator's own metrics listener likewise.
	if cfg.MetricsAddr != "" && cfg.Metrics != nil {
		addr, err := metrics.Serve(ctx, cfg.MetricsAddr, cfg.Metrics, nil)
		if err != nil {
			return fmt.Errorf("submitter: metrics listen %s: %w", cfg.MetricsAddr, err)
		}
		lg.Info().Str("addr", addr).Msg("metrics listening")
	}
	var (
		srv     *http.Server
		httpErr = make(chan error, 1)
	)
	if cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("submitter: http listen %s: %w", cfg.HTTPAddr, err)
		}
		if cfg.TLS != nil {
			ln = tls.NewListener(ln, cfg.TLS)
		}
		srv = &http.Server{
			Handler:           s.handler(),
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
		}
		srv.RegisterOnShutdown(s.hub.shutdown) // streams end at once, not at the shutdown's bound
		go func() { httpErr <- srv.Serve(ln) }()
		lg.Info().Str("addr", ln.Addr().String()).Msg("http listening")
	}
	stopHTTP := func() {
		if srv == nil {
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			lg.Warn().Err(err).Msg("http shutdown")
		}
	}

	// 2. Fold the whole log, then 3. follow it from the next sequence
	// (pkg/service: a failed read or follow is retried with backoff). The
	// fold outlives ctx until in-flight requests are done, so they can
	// still catch up.
	followCtx, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	followDone, caughtUp := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(followDone)
		s.follow(followCtx, caughtUp)
	}()
	defer func() {
		stopFollow()
		<-followDone
	}()
	select {
	case <-caughtUp:
	case <-ctx.Done():
		stopHTTP()
		return nil
	}

	// 4. Serve the NATS API.
	// Each op is its own subscription: other services may answer other
	// ops under the same prefix (a wildcard here would race their replies).
	var (
		subs     []*nats.Subscription
		inflight sync.WaitGroup
	)
	if cfg.NC != nil {
		reqCtx := context.WithoutCancel(ctx)
		sem := make(chan struct{}, maxInFlight)
		serve := func(msg *nats.Msg) {
			sem <- struct{}{} // back-pressure: the subscription's pending queue absorbs bursts
			inflight.Add(1)
			go func() {
				defer func() { <-sem; inflight.Done() }()
				s.serveNATS(reqCtx, msg)
			}()
		}
		var err error
		// Each op on its unscoped subject and on the team-scoped ones
		// (gpuq.api.v1.team.*.<op>, see caller.go).
	subscribe:
		for _, op := range ops {
			subjects := []string{api.SubjectPrefix + op, api.TeamPrefix + "*." + op}
			if slices.Contains(api.JobOps, op) {
				subjects = append(subjects, api.JobPrefix+"*.*.*."+op) // a job's own run (caller.go)
			}
			for _, subj := range subjects {
				var sub *nats.Subscription
				if sub, err = cfg.NC.QueueSubscribe(subj, api.QueueGroup, serve); err != nil {
					break subscribe
				}
				subs = append(subs, sub)
			}
		}
		// Ops answered for teams only (teamOps).
		for _, op := range teamOps {
			if err != nil {
				break
			}
			var sub *nats.Subscription
			if sub, err = cfg.NC.QueueSubscribe(api.TeamPrefix+"*."+op, api.QueueGroup, serve); err == nil {
				subs = append(subs, sub)
			}
		}
		if err == nil {
			err = cfg.NC.Flush()
		}
		if err != nil {
			for _, sub := range subs {
				_ = sub.Unsubscribe()
			}
			stopHTTP()
			return fmt.Errorf("submitter: subscribing to the API: %w", err)
		}
	}

	// 5. The advice the stream passes on (stream.go), when there is NATS,
	// and the advisor's statistics for the dashboard (dashboard.go).
	if cfg.NC != nil {
		stopAdvice := s.followAdvice(ctx, cfg.NC)
		defer stopAdvice()
		go s.sampleStatsEvery(ctx, cfg.NC)
	}

	// 6. Ready.
	s.ready.Store(true)
	lg.Info().Uint64("seq", s.m.seq()).Msg("submitter ready")
	if cfg.Ready != nil {
		cfg.Ready()
	}

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-httpErr:
		runErr = fmt.Errorf("submitter: http: %w", err)
	}

	// 7. Shut down: stop taking requests, let in-flight ones finish.
	s.ready.Store(false)
	for _, sub := range subs {
		if err := sub.Drain(); err != nil {
			lg.Warn().Err(err).Str("subject", sub.Subject).Msg("draining an API subscription")
		}
	}
	waitUntil(func() bool {
		for _, sub := range subs {
			if sub.IsValid() {
				return false
			}
		}
		return true
	}, shutdownTimeout)
	stopHTTP()
	waitGroup(&inflight, shutdownTimeout)
	lg.Info().Msg("submitter stopped")
	return runErr
}

// waitGroup waits for wg at most d.
func waitGroup(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// waitUntil polls done until it holds or d passes.
func waitUntil(done func() bool, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		select {
		case <-t.C:
			return
		case <-tick.C:
		}
	}
}

// follow runs the runtime's fold (catch-up, then follow, re-opened with
// backoff when it fails) until ctx ends; caughtUp (may be nil) is closed
// once the log present at the start has been folded.
func (s *server) follow(ctx context.Context, caughtUp chan<- struct{}) {
	hubDone := make(chan struct{})
	go func() { defer close(hubDone); s.hub.run(ctx) }()
	defer func() { <-hubDone }()
	_ = s.m.f.Run(ctx, service.Hooks{
		Applied: func(st *domain.State, r events.Record, skipped string) {
			s.m.saw(st, r, skipped)
			s.hub.applied(st, r)
		},
		CaughtUp: func(ctx context.Context) error {
			s.hub.start(s.m.seq())
			if caughtUp != nil {
				close(caughtUp)
			}
			return nil
		},
		// React does nothing of the submitter's own: it makes the runtime
		// offer a snapshot after each batch and each second.
		React:     func(context.Context) error { return nil },
		Tick:      time.Second,
		Snapshots: s.snaps,
		Own:       s.m.own,
	})
}
