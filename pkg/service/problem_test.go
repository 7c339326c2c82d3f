package service_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
	"github.com/gpuq/gpuq/pkg/service"
)

// refusingLog refuses every follow while refuse is set, as a server whose
// stream is at its consumer limit refuses a new consumer.
type refusingLog struct {
	*memlog.Log
	refuse atomic.Bool
}

var errLimit = errors.New("nats: maximum consumers limit reached")

func (l *refusingLog) Follow(ctx context.Context, from uint64, filter string) (events.Follower, error) {
	if l.refuse.Load() {
		return nil, errLimit
	}
	return l.Log.Follow(ctx, from, filter)
}

// TestHealthzNamesARefusedFollow: a fold whose follow the server refuses
// (the #22 finding: after a restart every service looped on "maximum
// consumers limit reached" while /healthz said ok) is unhealthy and says
// why, and healthy again once the follow opens.
func TestHealthzNamesARefusedFollow(t *testing.T) {
	l := &refusingLog{Log: memlog.New()}
	appendEvent(t, l, dt.Node("n0").GPUs(8).Available())
	l.refuse.Store(true)
	f := service.New("svc", l, zerolog.Nop(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, service.Hooks{}) }()
	defer func() { cancel(); <-done }()
	waitReady(t, f)

	health := func() (int, string) {
		w := httptest.NewRecorder()
		f.Healthz(w, httptest.NewRequest("GET", "/healthz", nil))
		return w.Code, w.Body.String()
	}
	waitFor := func(what string, ok func(code int, body string) bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; {
			code, body := health()
			if ok(code, body) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /healthz %d %q", what, code, body)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("refused follow", func(code int, body string) bool {
		return code == http.StatusServiceUnavailable && strings.Contains(body, "maximum consumers limit reached") && strings.Contains(body, "svc")
	})
	if err := f.Problem(); err == nil || !strings.Contains(err.Error(), "following the log") {
		t.Errorf("Problem() = %v, want the refused follow", err)
	}
	w := httptest.NewRecorder()
	service.HealthzProcess(w, httptest.NewRequest("GET", "/healthz", nil))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "maximum consumers limit reached") {
		t.Errorf("the process's /healthz: %d %q, want 503 naming the refused follow", w.Code, w.Body)
	}
	l.refuse.Store(false)
	waitFor("follow open again", func(code int, _ string) bool { return code == http.StatusOK })
	if err := f.Problem(); err != nil {
		t.Errorf("Problem() = %v after the follow opened, want nil", err)
	}
	w = httptest.NewRecorder()
	service.HealthzProcess(w, httptest.NewRequest("GET", "/healthz", nil))
	if w.Code != http.StatusOK {
		t.Errorf("the process's /healthz after the follow opened: %d %q", w.Code, w.Body)
	}
}
