// Package metrics is gpuq's Prometheus instrumentation: one registry per
// process, the collectors every service registers on it, and the
// /metrics handler.
//
// Most figures are read at scrape time from what the services keep
// anyway — the fold's state and counters (pkg/service), the NATS
// connection's statistics, the estimator's self-measurement — so a
// service only says where they are. The scheduler alone counts events
// as they happen (its passes and the decisions it appended): nothing
// else holds them.
//
// Every metric carries the label service (submitter, scheduler, advisor,
// gpuagent) so that `gpuq dev`, which runs every service on one
// registry, exposes each once. Names follow Prometheus conventions:
// gpuq_ prefix, _total for counters, base units (_seconds).
package metrics

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpuq/gpuq/pkg/service"
)

// Path is where every service serves its metrics.
const Path = "/metrics"

// New returns a registry with the Go runtime's and the process's
// collectors.
func New() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Handler serves g in the Prometheus text (or OpenMetrics) format; a
// collector that fails is reported in the answer, not by failing it.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Serve serves /metrics and /healthz on addr until ctx ends. It returns
// once listening, or the listen error. /healthz is healthz when given;
// otherwise 200 while the process is up and no fold in it reports a
// problem (service.HealthzProcess: a follow the server refused, with the
// reason, 503).
func Serve(ctx context.Context, addr string, g prometheus.Gatherer, healthz http.HandlerFunc) (string, error) {
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, Handler(g))
	if healthz == nil {
		healthz = service.HealthzProcess
	}
	mux.HandleFunc("GET /healthz", healthz)
	return serve(ctx, addr, mux)
}

// with labels every metric registered through it with the service.
func with(reg prometheus.Registerer, svc string) prometheus.Registerer {
	return prometheus.WrapRegistererWith(prometheus.Labels{"service": svc}, reg)
}

// register registers c on r; a collector registered already (a service
// restarted in the same process on the same registry) is kept, and the
// one registered first is returned.
func register[C prometheus.Collector](r prometheus.Registerer, c C) C {
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(C); ok {
				return old
			}
			return c
		}
		panic(err) // a descriptor clash: a bug in this package
	}
	return c
}

// scrapeTimeout bounds what a scrape asks NATS (the log's last sequence).
const scrapeTimeout = 2 * time.Second

// FoldSource gives the fold a collector reads: the current one, or nil
// when there is none (a standby scheduler).
type FoldSource func() *service.Fold

// Fold registers the figures of one service's fold of the log:
// records applied and skipped, re-opened follows, whether it has caught
// up, the sequence folded, and its lag behind the log in sequences and
// seconds. lastSeq asks the log for its last sequence at scrape time (nil:
// the last the fold itself saw).
//
// Its series carry the labels service and node (an agent's node; empty,
// which Prometheus reads as absent, for the other services), so that one
// registry can hold the folds of every service and agent (`gpuq dev`).
func Fold(reg prometheus.Registerer, svc string, fold FoldSource, lastSeq func(context.Context) (uint64, error)) {
	NodeFold(reg, svc, "", fold, lastSeq)
}

// NodeFold is Fold for an agent's fold, labelled with its node.
func NodeFold(reg prometheus.Registerer, svc, node string, fold FoldSource, lastSeq func(context.Context) (uint64, error)) {
	r := prometheus.WrapRegistererWith(prometheus.Labels{"service": svc, "node": node}, reg)
	register(r, prometheus.Collector(&foldCollector{fold: fold, lastSeq: lastSeq}))
}

var (
	descApplied    = prometheus.NewDesc("gpuq_fold_records_applied_total", "Records of the log folded and applied (of the current term, for the scheduler).", nil, nil)
	descSkipped    = prometheus.NewDesc("gpuq_fold_records_skipped_total", "Records of the log folded and skipped (undecodable, unknown, invalid or impossible; see gpuq audit skipped).", nil, nil)
	descReconnects = prometheus.NewDesc("gpuq_fold_reconnects_total", "Follows of the log re-opened after a failure (NATS reconnect, server restart).", nil, nil)
	descStalls     = prometheus.NewDesc("gpuq_fold_stalls_total", "Follows of the log re-opened by the watchdog: the log had moved past them and they had delivered nothing (also counted in gpuq_fold_reconnects_total).", nil, nil)
	descReady      = prometheus.NewDesc("gpuq_fold_ready", "1 once the fold has caught up with the log, 0 before (or without a fold).", nil, nil)
	descFoldSeq    = prometheus.NewDesc("gpuq_fold_sequence", "Sequence of the last record folded.", nil, nil)
	descLagSeqs    = prometheus.NewDesc("gpuq_fold_lag_records", "Records in the log not yet folded.", nil, nil)
	descLagSecs    = prometheus.NewDesc("gpuq_fold_lag_seconds", "Log time between the last record folded and now, while records are not yet folded (0 when caught up).", nil, nil)
)

type foldCollector struct {
	fold    FoldSource
	lastSeq func(context.Context) (uint64, error)
}

func (c *foldCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descApplied, descSkipped, descReconnects, descStalls, descReady, descFoldSeq, descLagSeqs, descLagSecs} {
		ch <- d
	}
}

func (c *foldCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.fold()
	if f == nil {
		ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, 0)
		return
	}
	if c.lastSeq != nil {
		ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
		if n, err := c.lastSeq(ctx); err == nil && n > f.Counters.StreamLast.Load() {
			f.Counters.StreamLast.Store(n)
		}
		cancel()
	}
	seqs, behind := f.Lag(time.Now())
	ready := 0.0
	if f.Ready() {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.CounterValue, float64(f.Counters.Applied.Load()))
	ch <- prometheus.MustNewConstMetric(descSkipped, prometheus.CounterValue, float64(f.Counters.Skipped.Load()))
	ch <- prometheus.MustNewConstMetric(descReconnects, prometheus.CounterValue, float64(f.Counters.Reconnects.Load()))
	ch <- prometheus.MustNewConstMetric(descStalls, prometheus.CounterValue, float64(f.Counters.Stalls.Load()))
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready)
	ch <- prometheus.MustNewConstMetric(descFoldSeq, prometheus.GaugeValue, float64(f.Counters.Folded.Load()))
	ch <- prometheus.MustNewConstMetric(descLagSeqs, prometheus.GaugeValue, float64(seqs))
	ch <- prometheus.MustNewConstMetric(descLagSecs, prometheus.GaugeValue, max(behind.Seconds(), 0))
}

// NATS registers the connection's figures: reconnects and whether it is
// connected now.
func NATS(reg prometheus.Registerer, svc string, nc *nats.Conn) {
	r := with(reg, svc)
	register(r, prometheus.Collector(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gpuq_nats_reconnects_total",
		Help: "Reconnections of the service's NATS connection."}, func() float64 { return float64(nc.Stats().Reconnects) })))
	register(r, prometheus.Collector(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpuq_nats_connected",
		Help: "1 while the service's NATS connection is connected."}, func() float64 {
		if nc.IsConnected() {
			return 1
		}
		return 0
	})))
}

// State registers the queue and the cluster as a fold sees them: tasks
// by state, class and team; GPUs in all, healthy on schedulable nodes,
// and free; nodes by state; the newest scheduler epoch in the log. One
// service per process registers it (the submitter, whose fold every
// query reads).
func State(reg prometheus.Registerer, svc string, fold FoldSource) {
	register(with(reg, svc), prometheus.Collector(&stateCollector{fold: fold}))
}

var (
	descTasks      = prometheus.NewDesc("gpuq_tasks", "Tasks in the log by state, priority class and team.", []string{"state", "priority", "team"}, nil)
	descGPUs       = prometheus.NewDesc("gpuq_gpus", "GPUs of every known node.", nil, nil)
	descGPUsHealth = prometheus.NewDesc("gpuq_gpus_healthy", "Healthy GPUs on schedulable (up, not drained or lost) nodes.", nil, nil)
	descGPUsFree   = prometheus.NewDesc("gpuq_gpus_free", "Healthy GPUs on schedulable nodes that no task holds.", nil, nil)
	descNodes      = prometheus.NewDesc("gpuq_nodes", "Nodes by state.", []string{"state"}, nil)
	descEpoch      = prometheus.NewDesc("gpuq_log_leader_epoch", "The newest scheduler leader epoch among the decisions in the log.", nil, nil)
)

type stateCollector struct{ fold FoldSource }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTasks, descGPUs, descGPUsHealth, descGPUsFree, descNodes, descEpoch} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.fold()
	if f == nil {
		return
	}
	// The summary the fold published (service.Fold.SummaryEvery): a
	// scrape never takes the fold's lock.
	sum := f.Summary()
	if sum == nil {
		return
	}
	tasks, nodes := sum.Tasks, sum.Nodes
	gpus, healthy, free, epoch := sum.GPUs, sum.Healthy, sum.Free, sum.Epoch
	for k, n := range tasks {
		ch <- prometheus.MustNewConstMetric(descTasks, prometheus.GaugeValue, float64(n), string(k.State), k.Priority.String(), k.Team)
	}
	for s, n := range nodes {
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(n), string(s))
	}
	ch <- prometheus.MustNewConstMetric(descGPUs, prometheus.GaugeValue, float64(gpus))
	ch <- prometheus.MustNewConstMetric(descGPUsHealth, prometheus.GaugeValue, float64(healthy))
	ch <- prometheus.MustNewConstMetric(descGPUsFree, prometheus.GaugeValue, float64(free))
	ch <- prometheus.MustNewConstMetric(descEpoch, prometheus.GaugeValue, float64(epoch))
}
