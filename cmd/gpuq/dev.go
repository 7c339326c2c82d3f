package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/embedded"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/metrics"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/services/advisor"
	"github.com/gpuq/gpuq/services/gpuagent"
	"github.com/gpuq/gpuq/services/gpuagent/inventory"
	"github.com/gpuq/gpuq/services/notifier"
	"github.com/gpuq/gpuq/services/scheduler"
	"github.com/gpuq/gpuq/services/submitter"
)

type devFlags struct {
	data       string
	port       int
	http       string
	gpus       int
	nodes      int
	model      string
	realNVML   bool
	dedupe     time.Duration
	maxGPUs    int
	maxHours   float64
	heartbeat  time.Duration
	verbose    bool
	pol        policyFlags
	nodeTO     time.Duration
	injectXid  []string
	auth       string
	natsTLS    auth.TLSFiles
	httpTLS    auth.TLSFiles
	httpHosts  []string
	origins    []string
	webhooks   []string
	hookSecret string
}

func newDev() *cobra.Command {
	var f devFlags
	c := &cobra.Command{
		Use:   "dev",
		Short: "Run everything in one process: embedded NATS (JetStream on disk), every service, mock GPUs",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			switch {
			case f.gpus < 1:
				return invalid("gpus", "must be ≥ 1")
			case f.nodes < 0:
				return invalid("nodes", "must be ≥ 0 (0: no agent, e.g. to import a log)")
			case f.port < 0 || f.port > 65535:
				return invalid("nats-port", "must be between 0 and 65535")
			}
			opts, err := f.pol.options()
			if err != nil {
				return err
			}
			if opts.Teams != nil && f.nodes > 0 {
				if err := opts.Teams.CheckCluster(f.nodes * f.gpus); err != nil {
					return &exitError{exitInvalid, fmt.Errorf("teams file %s: %w", f.pol.v.TeamsFile(), err)}
				}
			}
			if _, err := parseXids(f.injectXid, f.nodes, f.gpus); err != nil {
				return err
			}
			for _, u := range f.webhooks {
				if err := notifier.CheckURL(u); err != nil {
					return invalid("webhook", err.Error())
				}
			}
			if f.hookSecret != "" && len(f.webhooks) == 0 {
				return invalid("webhook-secret", "needs --webhook")
			}
			if err := checkDevAuth(f); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runDev(ctx, f, opts)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.data, "data", "./.gpuq", "data directory (JetStream store, task logs, checkpoints)")
	fl.IntVar(&f.port, "nats-port", 4222, "NATS client port")
	fl.StringVar(&f.http, "http", "127.0.0.1:8080", "HTTP API address")
	fl.IntVar(&f.gpus, "gpus", 8, "mock GPUs per node")
	fl.IntVar(&f.nodes, "nodes", 1, "mock nodes (0: no agent and no scheduler, nothing writes to the log, for gpuq audit import)")
	fl.StringVar(&f.model, "gpu-model", "a100", "mock GPU model: a100, h100, h200, a30, b200")
	fl.BoolVar(&f.realNVML, "nvml", false, "use the real NVML library when a driver exists (one node)")
	fl.DurationVar(&f.dedupe, "dedupe-window", 24*time.Hour, "how long an idempotency key de-duplicates in the stream")
	fl.IntVar(&f.maxGPUs, "max-gpus", domain.DefaultLimits.MaxGPUs, "largest GPU count a task may ask for")
	fl.Float64Var(&f.maxHours, "max-hours", domain.DefaultLimits.MaxHours, "largest estimate a task may give")
	fl.DurationVar(&f.heartbeat, "heartbeat", 5*time.Second, "agent heartbeat interval")
	fl.BoolVar(&f.verbose, "verbose", false, "debug logging")
	fl.DurationVar(&f.nodeTO, "node-timeout", 30*time.Second, "a node without heartbeat this long is lost")
	f.pol.add(c)
	fl.StringVar(&f.auth, "auth", "", "auth directory of gpuq auth init: NATS users and permissions per role, each service as its own role, HTTP tokens per team")
	fl.StringVar(&f.natsTLS.Cert, "nats-cert", "", "PEM certificate of the NATS server: clients must use TLS (with --nats-key)")
	fl.StringVar(&f.natsTLS.Key, "nats-key", "", "PEM key of --nats-cert")
	fl.StringVar(&f.httpTLS.Cert, "http-cert", "", "PEM certificate of the HTTP API: HTTPS (with --http-key)")
	fl.StringVar(&f.httpTLS.Key, "http-key", "", "PEM key of --http-cert")
	fl.StringSliceVar(&f.httpHosts, "http-host", nil, `more Host names the HTTP API answers to besides --http's own (e.g. a machine name for --http 0.0.0.0:8080; "*": any); repeatable or comma-separated`)
	fl.StringSliceVar(&f.origins, "http-origin", nil, "browser origins (scheme://host[:port]) allowed to call the HTTP API besides its own; repeatable or comma-separated")
	fl.StringArrayVar(&f.webhooks, "webhook", nil, "URL that gets every notification (starts_soon, eta_changed, alert, suggestion, preempt_requested, started, completed, failed) as a signed JSON POST; repeatable")
	fl.StringVar(&f.hookSecret, "webhook-secret", "", "secret that signs the POSTs to --webhook (X-Gpuq-Signature: t=UNIX,v1=HEX HMAC-SHA256 of \"UNIX.BODY\")")
	fl.StringArrayVar(&f.injectXid, "inject-xid", nil, "NODE:GPU_INDEX:AFTER — a critical Xid (79) on that mock GPU AFTER the start (e.g. node-1:0:30s); repeatable")
	return c
}

func runDev(ctx context.Context, f devFlags, opts policy.Options) error {
	lvl := zerolog.InfoLevel
	if f.verbose {
		lvl = zerolog.DebugLevel
	}
	// Real milliseconds (zerolog's default time field has whole seconds),
	// colour only on a terminal.
	zerolog.TimeFieldFormat = logTimeFormat
	logger := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000", NoColor: !isTerminal(os.Stderr)}).Level(lvl).With().Timestamp().Logger()
	data, err := filepath.Abs(f.data)
	if err != nil {
		return err
	}
	release, err := lockData(data)
	if err != nil {
		return err
	}
	defer release()
	// The data directory holds one log: refuse another auth mode's.
	want, err := wantIdentity(f)
	if err != nil {
		return err
	}
	rec, err := checkDataIdentity(data, want)
	if err != nil {
		return err
	}
	if err := checkPort(f.port); err != nil {
		return err
	}
	if err := checkHTTP(f.http); err != nil {
		return err
	}
	if err := submitter.CheckOrigins(f.origins); err != nil {
		return invalid("http-origin", err.Error())
	}
	// 1. Embedded NATS with JetStream on disk.
	eo := embedded.Options{StoreDir: filepath.Join(data, "jetstream"), Port: f.port, TLS: f.natsTLS}
	if f.auth != "" {
		eo.AuthConfig = filepath.Join(f.auth, auth.ConfigFile)
		// What a role's permissions refuse is worth a line in the log.
		eo.Warn = func(msg string) {
			if strings.Contains(msg, "Violation") {
				logger.Warn().Str("svc", "nats").Msg(msg)
			}
		}
	}
	srv, err := embedded.Start(eo)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	if f.auth != "" {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go reloadOnHangup(ctx, srv, hup, logger)
	}
	url := srv.URL() // nats:// or tls://, at the port it listens on
	logger.Info().Str("nats", url).Str("data", data).Bool("auth", f.auth != "").Msg("gpuq dev: NATS with JetStream ready")

	// Every service gets its own connection as its own role with --auth
	// (the server enforces the role's permissions); without, they share
	// this one.
	conns := &devConns{srv: srv, dir: f.auth, cfg: jetstream.StreamConfig{DedupeWindow: f.dedupe}}
	defer conns.close()
	adminNC, adminLog, err := conns.open(ctx, "admin") // creates the audit stream
	if err != nil {
		return err
	}
	if err := recordIdentity(ctx, data, want, rec, adminLog, logger); err != nil {
		return err
	}
	var tokens *auth.Tokens
	if f.auth != "" {
		if tokens, err = auth.LoadTokens(filepath.Join(f.auth, auth.TokensDir)); err != nil {
			return &exitError{exitInvalid, fmt.Errorf("auth: %w", err)}
		}
	}
	// Every service's metrics on one registry, served at --http's /metrics.
	reg := metrics.New()
	metrics.NATS(reg, "dev", adminNC)

	// 2. The four services, each as it would run on its own.
	// --nodes 0 runs no agent and no scheduler: nothing writes to the log,
	// so that a log can be imported (gpuq audit import) without another
	// writer's decision landing between its records.
	withScheduler := f.nodes > 0
	names := []string{"submitter", "advisor"}
	if withScheduler {
		names = append(names, "scheduler")
		for i := 1; i <= f.nodes; i++ {
			names = append(names, fmt.Sprintf("gpuagent node-%d", i))
		}
	}
	names = append(names, "notifier") // last: Ready is readyFn(services - 1)
	services := len(names)
	rd := newReadiness(names)
	readyFn := rd.done
	allReady := rd.all
	health := rd.health

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, services+f.nodes)
	var wg sync.WaitGroup
	spawn := func(name string, run func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	var httpTLS *tls.Config
	if !f.httpTLS.Empty() {
		if httpTLS, err = f.httpTLS.ServerConfig(); err != nil {
			return invalid("http-cert", err.Error())
		}
	}
	subNC, subLog, err := conns.open(ctx, "submitter")
	if err != nil {
		return err
	}
	spawn("submitter", func() error {
		return submitter.Run(ctx, submitter.Config{NC: subNC, Log: subLog, HTTPAddr: f.http, Logger: logger.With().Str("svc", "submitter").Logger(),
			Limits: domain.Limits{MaxGPUs: f.maxGPUs, MaxHours: f.maxHours, NotifyLocal: true}, Ready: readyFn(0), Health: health,
			Tokens: tokens, TLS: httpTLS, Metrics: reg,
			HTTPHosts: f.httpHosts, HTTPOrigins: f.origins, NATSAuth: f.auth != "", Policy: policy.New(opts)})
	})
	if withScheduler {
		_, schedLog, err := conns.open(ctx, "scheduler")
		if err != nil {
			return err
		}
		spawn("scheduler", func() error {
			return scheduler.Run(ctx, scheduler.Config{Log: schedLog, JS: schedLog.JetStream(), Policy: policy.New(opts), NodeTimeout: f.nodeTO,
				Logger: logger.With().Str("svc", "scheduler").Logger(), LeaseTTL: 5 * time.Second, Ready: readyFn(2), Metrics: reg})
		})
	}
	advNC, advLog, err := conns.open(ctx, "advisor")
	if err != nil {
		return err
	}
	spawn("advisor", func() error {
		return advisor.Run(ctx, advisor.Config{Log: advLog, JS: advLog.JetStream(), NC: advNC, Policy: policy.New(opts), Logger: logger.With().Str("svc", "advisor").Logger(), Ready: readyFn(1),
			Metrics: reg})
	})
	// The notifier, as its own role with --auth (notifierRole): to every
	// --webhook, and to the teams' destinations of gpuq notify add (on
	// loopback too, which only gpuq dev allows by default).
	_, notLog, err := conns.open(ctx, notifierRole(f))
	if err != nil {
		return err
	}
	var dests []notifier.Destination
	for _, u := range f.webhooks {
		dests = append(dests, notifier.NewDestination("", u, []byte(f.hookSecret), nil))
	}
	spawn("notifier", func() error {
		return notifier.Run(ctx, notifier.Config{Log: notLog, JS: notLog.JetStream(), Destinations: dests, Allow: notifier.Allow{Local: true},
			Logger: logger.With().Str("svc", "notifier").Logger(), Ready: readyFn(services - 1), Metrics: reg})
	})
	xids, _ := parseXids(f.injectXid, f.nodes, f.gpus)
	for i := 1; i <= f.nodes; i++ {
		node := fmt.Sprintf("node-%d", i)
		i := i
		agentData := filepath.Join(data, "agents", node)
		agentNC, agentLog, err := conns.open(ctx, "agent-"+node)
		if err != nil {
			return err
		}
		spawn("gpuagent logs "+node, func() error {
			return gpuagent.ServeLogs(ctx, gpuagent.LogsConfig{NC: agentNC, Node: node, DataDir: agentData, Logger: logger})
		})
		invOpts := inventory.Options{Node: node, Mock: !f.realNVML, MockGPUs: f.gpus, MockModel: f.model}
		inv, err := inventory.Open(invOpts)
		if err != nil {
			return err
		}
		defer inv.Close()
		for _, x := range xids[node] {
			go injectXid(ctx, inv, x, logger)
		}
		var signer *auth.JobSigner // each run's own credential (--auth)
		if f.auth != "" {
			if signer, err = auth.LoadJobSigner(auth.JobSignerPath(f.auth, node)); err != nil {
				return invalid("auth", err.Error())
			}
		}
		spawn("gpuagent "+node, func() error {
			return gpuagent.Run(ctx, gpuagent.Config{Log: agentLog, JS: agentLog.JetStream(), Node: node, NATSURL: url, JobSigner: signer,
				DataDir: agentData, CheckpointRoot: filepath.Join(data, "checkpoints"),
				Inventory: invOpts, Inv: inv,
				Heartbeat: f.heartbeat, NodeTimeout: f.nodeTO, StopOnExit: true,
				Logger: logger.With().Str("svc", "gpuagent").Str("node", node).Logger(), Ready: readyFn(2 + i), Metrics: reg})
		})
	}
	go func() {
		select {
		case <-allReady:
			scheme := "http://"
			if httpTLS != nil {
				scheme = "https://"
			}
			ev := logger.Info().Str("http", scheme+f.http).Str("nats", url)
			if f.auth != "" {
				ev = ev.Str("creds", filepath.Join(f.auth, auth.CredsDir, "ci-<team>.creds or admin.creds"))
			}
			ev.Msg("gpuq dev: ready — try `gpuq submit ...` or `gpuq queue`")
		case <-ctx.Done():
		}
	}()

	// 3. Run until a signal or a service fails.
	var runErr error
	select {
	case <-ctx.Done():
		logger.Info().Msg("gpuq dev: stopping")
	case runErr = <-errc:
		logger.Error().Err(runErr).Msg("gpuq dev: a service failed; stopping")
	}
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		logger.Warn().Msg("gpuq dev: services did not stop in 10 s")
	}
	return runErr
}

// checkDevAuth checks --auth and the TLS flags before anything starts.
func checkDevAuth(f devFlags) error {
	switch {
	case (f.natsTLS.Cert == "") != (f.natsTLS.Key == ""):
		return invalid("nats-cert", "--nats-cert and --nats-key go together")
	case (f.httpTLS.Cert == "") != (f.httpTLS.Key == ""):
		return invalid("http-cert", "--http-cert and --http-key go together")
	}
	if f.auth == "" {
		return nil
	}
	roles := []string{"admin", "submitter", "scheduler", "advisor"}
	for i := 1; i <= f.nodes; i++ {
		roles = append(roles, fmt.Sprintf("agent-node-%d", i))
	}
	if _, err := os.Stat(filepath.Join(f.auth, auth.ConfigFile)); err != nil {
		return invalid("auth", fmt.Sprintf("%v (write it with `gpuq auth init %s`)", err, f.auth))
	}
	for _, r := range roles {
		if _, err := auth.LoadCreds(auth.CredsPath(f.auth, r)); err != nil {
			if _, old := os.Stat(filepath.Join(f.auth, auth.CredsDir, r+".nk")); old == nil {
				return invalid("auth", fmt.Sprintf("%s holds nkey users (creds/*.nk) of an older gpuq auth init; gpuq now uses NATS JWTs (creds/*.creds): write a new directory with `gpuq auth init`", f.auth))
			}
			return invalid("auth", fmt.Sprintf("%v (gpuq dev --nodes %d needs `gpuq auth init --nodes node-1,…,node-%d`)", err, f.nodes, f.nodes))
		}
	}
	for i := 1; i <= f.nodes; i++ {
		if _, err := auth.LoadJobSigner(auth.JobSignerPath(f.auth, fmt.Sprintf("node-%d", i))); err != nil {
			return invalid("auth", fmt.Sprintf("%v (gpuq dev --nodes %d needs `gpuq auth init --nodes node-1,…,node-%d`)", err, f.nodes, f.nodes))
		}
	}
	return nil
}

// devConns opens the services' connections and logs: one shared pair
// without --auth, one per role with it.
type devConns struct {
	srv    *embedded.Server
	dir    string // --auth; "" = no auth
	cfg    jetstream.StreamConfig
	shared *jetstream.Log
	nc     *nats.Conn
	opened []*nats.Conn
}

func (d *devConns) open(ctx context.Context, role string) (*nats.Conn, *jetstream.Log, error) {
	if d.dir == "" && d.shared != nil {
		return d.nc, d.shared, nil
	}
	var creds *auth.Creds
	if d.dir != "" {
		var err error
		if creds, err = auth.LoadCreds(auth.CredsPath(d.dir, role)); err != nil {
			return nil, nil, err
		}
	}
	nc, err := d.srv.ConnectAs("gpuq-dev-"+role, creds)
	if err != nil {
		return nil, nil, fmt.Errorf("connect as %s: %w", role, err)
	}
	d.opened = append(d.opened, nc)
	log, err := jetstream.Open(ctx, nc, d.cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", role, err)
	}
	if d.shared == nil {
		d.shared, d.nc = log, nc
	}
	return nc, log, nil
}

func (d *devConns) close() {
	for _, nc := range d.opened {
		nc.Close()
	}
}

// xid is one --inject-xid: a critical Xid on a mock GPU after a delay.
type xid struct {
	gpu   int
	after time.Duration
}

// parseXids reads the --inject-xid values (NODE:GPU_INDEX:AFTER) by node.
func parseXids(specs []string, nodes, gpus int) (map[string][]xid, error) {
	out := map[string][]xid{}
	for _, s := range specs {
		parts := strings.Split(s, ":")
		if len(parts) != 3 {
			return nil, invalid("inject-xid", fmt.Sprintf("%q: must be NODE:GPU_INDEX:AFTER, e.g. node-1:0:30s", s))
		}
		var n int
		if _, err := fmt.Sscanf(parts[0], "node-%d", &n); err != nil || n < 1 || n > nodes || parts[0] != fmt.Sprintf("node-%d", n) {
			return nil, invalid("inject-xid", fmt.Sprintf("%q: the node must be one of node-1 … node-%d", s, nodes))
		}
		idx, err := strconv.Atoi(parts[1])
		if err != nil || idx < 0 || idx >= gpus {
			return nil, invalid("inject-xid", fmt.Sprintf("%q: the GPU index must be 0 … %d", s, gpus-1))
		}
		after, err := time.ParseDuration(parts[2])
		if err != nil || after < 0 {
			return nil, invalid("inject-xid", fmt.Sprintf("%q: AFTER must be a duration ≥ 0, e.g. 30s", s))
		}
		out[parts[0]] = append(out[parts[0]], xid{gpu: idx, after: after})
	}
	return out, nil
}

// injectXid marks the GPU unhealthy after the delay, as a critical Xid
// (79, fallen off the bus) would; the agent reports it at its next
// heartbeat and the scheduler moves the task holding it.
func injectXid(ctx context.Context, inv *inventory.Inventory, x xid, logger zerolog.Logger) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(x.after):
	}
	gpus, err := inv.GPUs()
	if err != nil || x.gpu >= len(gpus) {
		return
	}
	inv.MarkUnhealthy(gpus[x.gpu].UUID, "Xid 79 (injected)")
	logger.Warn().Str("gpu", gpus[x.gpu].UUID).Int("index", x.gpu).Msg("gpuq dev: injected a critical Xid")
}

// logTimeFormat is RFC 3339 with milliseconds.
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// isTerminal reports whether f is a character device (a terminal), not a
// file or a pipe.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// readiness is which of gpuq dev's services are ready: /healthz names
// those still catching up with the log (issue 22: after a restart it said
// "starting" for two minutes while the advisor replayed, and nothing said
// which).
type readiness struct {
	names []string
	ready []atomic.Bool
	once  []sync.Once
	left  atomic.Int32
	all   chan struct{} // closed once every service is ready
}

func newReadiness(names []string) *readiness {
	r := &readiness{names: names, ready: make([]atomic.Bool, len(names)), once: make([]sync.Once, len(names)), all: make(chan struct{})}
	r.left.Store(int32(len(names)))
	if len(names) == 0 {
		close(r.all)
	}
	return r
}

// done is service i's Ready.
func (r *readiness) done(i int) func() {
	return func() {
		r.once[i].Do(func() {
			r.ready[i].Store(true)
			if r.left.Add(-1) == 0 {
				close(r.all)
			}
		})
	}
}

// health is nil once every service is ready, else names the others.
func (r *readiness) health() error {
	var waiting []string
	for i, n := range r.names {
		if !r.ready[i].Load() {
			waiting = append(waiting, n)
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	verb := "is"
	if len(waiting) > 1 {
		verb = "are"
	}
	return fmt.Errorf("starting: %s %s still catching up with the log", strings.Join(waiting, ", "), verb)
}

// notifierRole is the role the notifier connects as: its own when the
// auth directory has it, else the admin's (an auth directory made before
// the notifier existed).
func notifierRole(f devFlags) string {
	if f.auth == "" {
		return "notifier"
	}
	if _, err := os.Stat(auth.CredsPath(f.auth, "notifier")); err == nil {
		return "notifier"
	}
	return "admin"
}

// reloadOnHangup reloads the server's auth configuration at each signal
// on hup (SIGHUP), as nats-server does: after gpuq auth rotate, the
// revoked users' connections close and their files stop working without
// a restart of gpuq dev.
func reloadOnHangup(ctx context.Context, srv *embedded.Server, hup <-chan os.Signal, logger zerolog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := srv.Reload(); err != nil {
				logger.Error().Err(err).Msg("gpuq dev: reloading the auth configuration")
				continue
			}
			logger.Info().Msg("gpuq dev: auth configuration reloaded")
		}
	}
}
