package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
)

// Scheduler is what a scheduler instance counts as it decides. A nil
// *Scheduler counts nothing, so the scheduler calls it unconditionally.
type Scheduler struct {
	pass      prometheus.Histogram
	decisions *prometheus.CounterVec
	preempts  *prometheus.CounterVec
	refused   prometheus.Counter
}

// PassBuckets are the scheduling pass duration histogram's buckets, in
// seconds: 100 µs to 10 s (docs/performance.md: a pass on 10,000 queued
// tasks takes milliseconds).
var PassBuckets = prometheus.ExponentialBuckets(0.0001, 2.5, 13)

// NewScheduler registers a scheduler instance's metrics: the passes'
// durations, the decisions appended by type and reason, the preemptions
// requested by policy, decisions refused by the log (stale, re-decided),
// and whether this instance leads with which epoch (lease() is read at
// scrape time).
func NewScheduler(reg prometheus.Registerer, instance string, lease func() (leading bool, epoch uint64)) *Scheduler {
	r := with(reg, "scheduler")
	m := &Scheduler{
		pass: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpuq_scheduler_pass_duration_seconds",
			Help: "Duration of a scheduling pass that decided something: the policy, and the appends of its decisions.", Buckets: PassBuckets}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuq_scheduler_decisions_total",
			Help: "Decisions appended to the log by type (dispatched, preempt_requested, requeued, lost) and reason."}, []string{"type", "reason"}),
		preempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuq_scheduler_preemptions_total",
			Help: "Preemptions requested by reason: the policy under which (critical-only, ladder), gpu-unhealthy or drain."}, []string{"reason"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpuq_scheduler_decisions_refused_total",
			Help: "Decisions the log refused because the task changed meanwhile (re-decided on the next pass)."}),
	}
	m.pass = register(r, m.pass)
	m.decisions = register(r, m.decisions)
	m.preempts = register(r, m.preempts)
	m.refused = register(r, m.refused)
	il := prometheus.Labels{"instance_name": instance}
	register(r, prometheus.Collector(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpuq_scheduler_leader", ConstLabels: il,
		Help: "1 while this scheduler instance holds the leader lease."}, func() float64 {
		if l, _ := lease(); l {
			return 1
		}
		return 0
	})))
	register(r, prometheus.Collector(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpuq_scheduler_lease_epoch", ConstLabels: il,
		Help: "Epoch of the lease this instance holds or last held (0: never led)."}, func() float64 {
		_, e := lease()
		return float64(e)
	})))
	return m
}

// Pass records the duration of one pass.
func (m *Scheduler) Pass(d time.Duration) {
	if m != nil {
		m.pass.Observe(d.Seconds())
	}
}

// Refused counts a decision the log refused.
func (m *Scheduler) Refused() {
	if m != nil {
		m.refused.Inc()
	}
}

// Decided counts a decision the log took.
func (m *Scheduler) Decided(e events.Event) {
	if m == nil {
		return
	}
	typ, reason := DecisionReason(e)
	m.decisions.WithLabelValues(typ, reason).Inc()
	if p, ok := e.(events.PreemptRequested); ok {
		m.preempts.WithLabelValues(p.Policy).Inc()
	}
}

// DecisionReason is a decision's type and a reason of few values (the
// events' own reasons are sentences naming tasks): dispatched
// queue/backfill; preempt_requested by its policy; requeued node-lost or
// preempted; lost heartbeat.
func DecisionReason(e events.Event) (typ, reason string) {
	typ = string(e.EventType())
	switch v := e.(type) {
	case events.Dispatched:
		if v.Backfill {
			return typ, "backfill"
		}
		return typ, "queue"
	case events.PreemptRequested:
		return typ, v.Policy
	case events.Requeued:
		if v.Cause() == events.RequeueNodeLost {
			return typ, "node-lost"
		}
		return typ, "preempted"
	case events.Lost:
		return typ, "heartbeat"
	}
	return typ, "other"
}

// Advisor registers the advisor's self-measurement, read at scrape time:
// how many estimates were judged, the share of tasks started by their
// P90 (coverage), the median absolute error of the P50, and the alerts
// raised by cause (alarm.Causes, each reported, zero included). stats must
// be safe to call from the scrape's goroutine.
func Advisor(reg prometheus.Registerer, stats func() (s estimate.Stats, alertsRaised map[alarm.Cause]int)) {
	r := with(reg, "advisor")
	get := func(pick func(estimate.Stats, map[alarm.Cause]int) float64) func() float64 {
		return func() float64 { s, a := stats(); return pick(s, a) }
	}
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpuq_estimate_judged_tasks",
			Help: "Tasks whose start estimate made at submission has been judged (waits of at least 60 s)."},
			get(func(s estimate.Stats, _ map[alarm.Cause]int) float64 { return float64(s.N) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpuq_estimate_p90_coverage_ratio",
			Help: "Share of judged tasks that started by the P90 estimated at their submission (goal 0.9)."},
			get(func(s estimate.Stats, _ map[alarm.Cause]int) float64 { return s.P90Coverage })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpuq_estimate_p50_abs_error_seconds",
			Help: "Median absolute error of the P50 start estimated at submission, over the judged tasks."},
			get(func(s estimate.Stats, _ map[alarm.Cause]int) float64 { return s.MedianAbsS })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gpuq_estimate_late_total",
			Help: "Judged tasks that waited beyond twice the P50 estimated at their submission."},
			get(func(s estimate.Stats, _ map[alarm.Cause]int) float64 { return float64(s.Alerts) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gpuq_estimate_capped_total",
			Help: "Estimates whose forward simulation spent its budget before the task started: capped there, a lower bound (the advisor logs each task once)."},
			get(func(s estimate.Stats, _ map[alarm.Cause]int) float64 { return float64(s.Capped) })),
	} {
		register(r, c)
	}
	for _, cause := range alarm.Causes {
		register(r, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gpuq_advisor_alerts_total",
			Help:        "Alerts raised in advice, by cause: a queued task's wait went beyond twice its estimate because scheduling is broken (scheduler_stalled, idle_capacity, nodes_lost, gpus_unhealthy, unexplained); tell the operators.",
			ConstLabels: prometheus.Labels{"cause": string(cause)}},
			get(func(_ estimate.Stats, a map[alarm.Cause]int) float64 { return float64(a[cause]) })))
	}
}

// serve listens on addr and serves h until ctx ends.
func serve(ctx context.Context, addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener failed after start: nothing left to serve
		}
	}()
	return ln.Addr().String(), nil
}
