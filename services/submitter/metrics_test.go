package submitter

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events/memlog"
	"github.com/gpuq/gpuq/pkg/metrics"
)

// TestMetricsEndpoint: the submitter's own /metrics, on its HTTP handler,
// counts the tasks of its fold by state, class and team, the GPUs of its
// nodes and the records it folded, and follows the log as it grows.
func TestMetricsEndpoint(t *testing.T) {
	l := memlog.New()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Log: l, HTTPAddr: addr, Limits: testLimits, Logger: testLogger(t), Metrics: metrics.New(),
			Ready: func() { close(ready) }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	<-ready
	base := "http://" + addr
	submit := func(req domain.Request) string {
		t.Helper()
		body, _ := json.Marshal(req)
		resp, err := http.Post(base+"/v1/tasks", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var rep api.SubmitReply
		if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil || resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
			t.Fatalf("submit: %d %v", resp.StatusCode, err)
		}
		return rep.TaskID
	}
	h := &harness{t: t, log: l, ctx: context.Background()}

	a := submit(validReq()) // high, nlp
	low := validReq()
	low.Priority, low.Team = "low", "cv"
	submit(low)
	low.Name = "resnet"
	submit(low)
	h.dispatch(a)
	want := map[string]float64{
		`gpuq_tasks{priority="high",state="dispatched",team="nlp"}`: 1,
		`gpuq_tasks{priority="low",state="queued",team="cv"}`:       2,
		`gpuq_gpus`:                       1,
		`gpuq_gpus_free`:                  0,
		`gpuq_fold_records_applied_total`: 5, // three submitted, available, dispatched
		`gpuq_fold_records_skipped_total`: 0,
		`gpuq_fold_ready`:                 1,
		`gpuq_fold_lag_records`:           0,
	}
	var got map[string]float64
	deadline := time.Now().Add(10 * time.Second)
	for {
		got = flatten(t, scrape(t, base+metrics.Path), want)
		if equalMetrics(got, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

// scrape GETs url (a /metrics) and parses the text exposition (an
// unparsable answer fails the test).
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// flatten gives the value of each series named in want, as name{l="v",…}
// with the labels sorted (expfmt keeps them sorted), less the service
// label, which every gpuq_ series must carry as "submitter", and labels
// with no value (Prometheus's absent).
func flatten(t *testing.T, fams map[string]*dto.MetricFamily, want map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			key := name
			if ls := m.GetLabel(); len(ls) > 0 {
				parts := make([]string, 0, len(ls))
				svc := ""
				for _, l := range ls {
					if l.GetName() == "service" {
						svc = l.GetValue()
					}
					if l.GetName() == "service" || l.GetValue() == "" {
						continue
					}
					parts = append(parts, l.GetName()+`="`+l.GetValue()+`"`)
				}
				if len(parts) > 0 {
					key += "{" + strings.Join(parts, ",") + "}"
				}
				if strings.HasPrefix(name, "gpuq_") && svc != "submitter" {
					t.Errorf("%s: service label %q, want submitter", key, svc)
				}
			}
			if _, ok := want[key]; !ok {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				out[key] = m.GetUntyped().GetValue()
			}
		}
	}
	return out
}

func equalMetrics(got, want map[string]float64) bool {
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}
