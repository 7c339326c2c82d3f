package metrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
	"github.com/gpuq/gpuq/pkg/metrics"
	"github.com/gpuq/gpuq/pkg/service"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func appendEvent(t *testing.T, l events.Log, e events.Event) {
	t.Helper()
	if _, err := events.Append(context.Background(), l, e, events.Meta{Time: t0}, "", nil); err != nil {
		t.Fatal(err)
	}
}

// scrape serves the registry over HTTP as a service does and parses the
// answer with Prometheus's own text parser.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+metrics.Path, nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return fams
}

// value is the one sample of name whose labels include want.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no sample of %s with %v", name, want)
	return 0
}

func TestScrape(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := memlog.New()
	appendEvent(t, log, events.Available{Node: "node-1", GPUs: []events.GPU{
		{UUID: "GPU-1", Model: "a100", Healthy: true}, {UUID: "GPU-2", Model: "a100", Healthy: true}}})
	appendEvent(t, log, events.Submitted{TaskID: "t1", Name: "a", Team: "vision", Priority: "high", GPUs: 1, Hours: 1, Command: "true"})
	appendEvent(t, log, events.Submitted{TaskID: "t2", Name: "b", Team: "nlp", Priority: "low", GPUs: 1, Hours: 1, Command: "true"})
	appendEvent(t, log, events.Dispatched{TaskID: "t1", Placements: []events.Placement{{Node: "node-1", GPUs: []string{"GPU-1"}}},
		BasedOnSeq: 3, Epoch: 7})
	// A record no fold can apply: skipped and counted.
	if _, err := log.Append(ctx, events.Msg{Subject: events.TaskPrefix + "t3.submitted", Data: []byte("{")}); err != nil {
		t.Fatal(err)
	}

	fold := service.New("submitter", log, zerolog.Nop(), nil)
	fold.SummaryEvery = time.Millisecond // the state's metrics read the published summary
	go func() { _ = fold.Run(ctx, service.Hooks{}) }()
	deadline := time.Now().Add(5 * time.Second)
	for !fold.Ready() || fold.Seq() < 5 || fold.Summary() == nil || fold.Summary().Seq < 5 {
		if time.Now().After(deadline) {
			t.Fatal("the fold did not catch up")
		}
		time.Sleep(10 * time.Millisecond)
	}

	reg := metrics.New()
	src := func() *service.Fold { return fold }
	metrics.Fold(reg, "submitter", src, log.LastSeq)
	metrics.State(reg, "submitter", src)
	metrics.Fold(reg, "scheduler", func() *service.Fold { return nil }, nil) // a standby
	leading := true
	m := metrics.NewScheduler(reg, "sched-a", func() (bool, uint64) { return leading, 7 })
	m.Pass(3 * time.Millisecond)
	m.Decided(events.Dispatched{TaskID: "t1"})
	m.Decided(events.Dispatched{TaskID: "t2", Backfill: true})
	m.Decided(events.PreemptRequested{TaskID: "t2", Policy: "critical-only"})
	m.Decided(events.Requeued{TaskID: "t2", Reason: "node node-1 lost"})
	m.Refused()
	metrics.Advisor(reg, func() (estimate.Stats, map[alarm.Cause]int) {
		return estimate.Stats{N: 10, P90Coverage: 0.9, MedianAbsS: 120, Alerts: 1}, map[alarm.Cause]int{alarm.SchedulerStalled: 2}
	})
	// A service restarted in the same process registers again: no panic.
	metrics.Fold(reg, "submitter", src, log.LastSeq)
	metrics.NewScheduler(reg, "sched-a", func() (bool, uint64) { return leading, 7 }).Decided(events.Lost{Node: "node-1"})

	fams := scrape(t, metrics.Handler(reg))
	sub := map[string]string{"service": "submitter"}
	for name, want := range map[string]float64{
		"gpuq_fold_records_applied_total": 4,
		"gpuq_fold_records_skipped_total": 1,
		"gpuq_fold_reconnects_total":      0,
		"gpuq_fold_ready":                 1,
		"gpuq_fold_sequence":              5,
		"gpuq_fold_lag_records":           0,
		"gpuq_fold_lag_seconds":           0,
		"gpuq_gpus":                       2,
		"gpuq_gpus_healthy":               2,
		"gpuq_gpus_free":                  1,
		"gpuq_log_leader_epoch":           7,
	} {
		if got := value(t, fams, name, sub); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"gpuq_tasks", map[string]string{"state": "dispatched", "priority": "high", "team": "vision"}, 1},
		{"gpuq_tasks", map[string]string{"state": "queued", "priority": "low", "team": "nlp"}, 1},
		{"gpuq_nodes", map[string]string{"state": "up"}, 1},
		{"gpuq_fold_ready", map[string]string{"service": "scheduler"}, 0},
		{"gpuq_scheduler_pass_duration_seconds", nil, 1},
		{"gpuq_scheduler_decisions_total", map[string]string{"type": "dispatched", "reason": "queue"}, 1},
		{"gpuq_scheduler_decisions_total", map[string]string{"type": "dispatched", "reason": "backfill"}, 1},
		{"gpuq_scheduler_decisions_total", map[string]string{"type": "requeued", "reason": "node-lost"}, 1},
		{"gpuq_scheduler_decisions_total", map[string]string{"type": "lost", "reason": "heartbeat"}, 1},
		{"gpuq_scheduler_preemptions_total", map[string]string{"reason": "critical-only"}, 1},
		{"gpuq_scheduler_decisions_refused_total", nil, 1},
		{"gpuq_scheduler_leader", map[string]string{"instance_name": "sched-a"}, 1},
		{"gpuq_scheduler_lease_epoch", map[string]string{"instance_name": "sched-a"}, 7},
		{"gpuq_estimate_p90_coverage_ratio", map[string]string{"service": "advisor"}, 0.9},
		{"gpuq_estimate_p50_abs_error_seconds", nil, 120},
		{"gpuq_estimate_judged_tasks", nil, 10},
		{"gpuq_advisor_alerts_total", map[string]string{"cause": "scheduler_stalled"}, 2},
		{"gpuq_advisor_alerts_total", map[string]string{"cause": "nodes_lost"}, 0},
	}
	for _, c := range checks {
		if got := value(t, fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Naming: every gpuq metric has help, counters end in _total.
	for name, f := range fams {
		if !strings.HasPrefix(name, "gpuq_") {
			continue
		}
		if f.GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
		if f.GetType() == dto.MetricType_COUNTER && !strings.HasSuffix(name, "_total") {
			t.Errorf("counter %s does not end in _total", name)
		}
	}

	// Lag: records appended that the fold has not seen yet are counted at
	// scrape time (the fold is stopped, so they stay unfolded).
	cancel()
	time.Sleep(50 * time.Millisecond)
	lagLog := memlog.New()
	lagFold := service.New("advisor", lagLog, zerolog.Nop(), nil)
	appendEvent(t, lagLog, events.Submitted{TaskID: "t9", Name: "c", Team: "x", Priority: "low", GPUs: 1, Hours: 1, Command: "true"})
	if err := lagFold.CatchUp(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	appendEvent(t, lagLog, events.Cancelled{TaskID: "t9"})
	appendEvent(t, lagLog, events.Submitted{TaskID: "t10", Name: "c", Team: "x", Priority: "low", GPUs: 1, Hours: 1, Command: "true"})
	reg2 := metrics.New()
	metrics.Fold(reg2, "advisor", func() *service.Fold { return lagFold }, lagLog.LastSeq)
	fams = scrape(t, metrics.Handler(reg2))
	if got := value(t, fams, "gpuq_fold_lag_records", nil); got != 2 {
		t.Errorf("lag = %v records, want 2", got)
	}
	if got := value(t, fams, "gpuq_fold_lag_seconds", nil); got <= 0 {
		t.Errorf("lag = %v s, want > 0", got)
	}
}
