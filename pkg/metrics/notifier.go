package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Notifier is what the notifier counts as it delivers. A nil *Notifier
// counts nothing.
type Notifier struct {
	total   *prometheus.CounterVec
	latency prometheus.Histogram
}

// DeliveryBuckets are the delivery latency histogram's buckets, in
// seconds: 10 ms to about 2 days (a delivery may succeed on its last
// retry, 24 h after the notice).
var DeliveryBuckets = prometheus.ExponentialBuckets(0.01, 4, 14)

// NewNotifier registers the notifier's metrics: notices by type and
// result (recorded: decided and recorded for a destination; delivered;
// retry: an attempt failed and another is scheduled; dead: given up,
// listed by gpuq notify failed; duplicate: decided again after a
// restart and not recorded twice), the latency from a notice being
// decided to its delivery, and the deliveries pending (read at scrape
// time).
func NewNotifier(reg prometheus.Registerer, pending func() int) *Notifier {
	r := with(reg, "notifier")
	m := &Notifier{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuq_notifications_total",
			Help: "Notifications by type (starts_soon, eta_changed, alert, preempt_requested, started, completed, failed, test) and result (recorded, delivered, retry, dead, duplicate)."},
			[]string{"type", "result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpuq_notification_delivery_seconds",
			Help: "Time from a notification being decided to its delivery (a 2xx answer), retries included.", Buckets: DeliveryBuckets}),
	}
	m.total = register(r, m.total)
	m.latency = register(r, m.latency)
	register(r, prometheus.Collector(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpuq_notifications_pending",
		Help: "Deliveries waiting for their next attempt, all destinations together."}, func() float64 { return float64(pending()) })))
	return m
}

// Count counts one notification of type typ with result.
func (m *Notifier) Count(typ, result string) {
	if m != nil {
		m.total.WithLabelValues(typ, result).Inc()
	}
}

// Delivered records a delivery d after its notice was decided.
func (m *Notifier) Delivered(typ string, d time.Duration) {
	if m != nil {
		m.total.WithLabelValues(typ, "delivered").Inc()
		m.latency.Observe(max(d, 0).Seconds())
	}
}
