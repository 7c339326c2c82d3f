package submitter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/embedded/embeddedtest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/events/memlog"
)

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestRunJetStream runs the service on an embedded JetStream server and
// talks to it as the CLI (api.Client over NATS) and as CI (HTTP) would.
func TestRunJetStream(t *testing.T) {
	srv := embeddedtest.Server(t)
	svcNC := embeddedtest.Connect(t, srv, "submitter")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log, err := jetstream.Open(ctx, svcNC, jetstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}

	// A task submitted before the service starts is folded on start.
	if _, err := events.Append(ctx, log, events.Submitted{TaskID: earlyID, Name: "early", Team: "nlp", Priority: "low",
		GPUs: 1, Hours: 1, Hypothesis: "h", Command: "c", SubmittedAt: t0}, events.Meta{Time: t0}, "", nil); err != nil {
		t.Fatal(err)
	}

	addr := freeAddr(t)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{NC: svcNC, Log: log, HTTPAddr: addr, Limits: testLimits, Logger: testLogger(t),
			Now: (&clock{t: t0}).Now, Ready: func() { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run returned before ready: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("not ready after 20s")
	}

	cliNC, err := srv.Connect("cli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cliNC.Close)
	cli := &api.Client{NC: cliNC, Timeout: 10 * time.Second}
	base := "http://" + addr

	// 1. Submit over NATS, show at once (read-your-writes).
	var sub api.SubmitReply
	if err := cli.Call(api.OpSubmit, validReq(), &sub); err != nil {
		t.Fatal(err)
	}
	var v api.TaskView
	if err := cli.Call(api.OpShow, api.IDRequest{TaskID: sub.TaskID}, &v); err != nil {
		t.Fatal(err)
	}
	if v.State != "queued" || v.Seq != sub.Seq || v.SubmittedAt.IsZero() {
		t.Errorf("show after submit: %+v", v)
	}

	// 2. An invalid submission names the field.
	bad := validReq()
	bad.GPUs = 0
	if err := cli.Call(api.OpSubmit, bad, nil); !api.IsInvalid(err) || err.(*api.Error).Field != "gpus" {
		t.Errorf("gpus 0: err = %v, want an invalid gpus", err)
	}

	// 3. Concurrent retries with one idempotency key: one task, through
	// JetStream's de-duplication.
	keyed := validReq()
	keyed.IdempotencyKey = "pipeline-991"
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r api.SubmitReply
			if err := cli.Call(api.OpSubmit, keyed, &r); err != nil {
				t.Error(err)
			}
			ids[i] = r.TaskID
		}()
	}
	wg.Wait()
	for i := range ids {
		if ids[i] != ids[0] || ids[i] == "" {
			t.Errorf("retry %d: task %q, retry 0: %q", i, ids[i], ids[0])
		}
	}

	// 4. Queue: early (low), the keyed and the first task (high), in queue order.
	var q []api.TaskView
	if err := cli.Call(api.OpQueue, api.QueueRequest{}, &q); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, t := range q {
		got = append(got, t.TaskID)
	}
	if diff := cmp.Diff([]string{sub.TaskID, ids[0], earlyID}, got); diff != "" {
		t.Errorf("queue (-want +got):\n%s", diff)
	}

	// 5. Cancel over NATS; twice is an error; unknown is not found.
	if err := cli.Call(api.OpCancel, api.IDRequest{TaskID: earlyID, By: "test"}, &v); err != nil || v.State != "cancelled" {
		t.Errorf("cancel: %v %+v", err, v)
	}
	if err := cli.Call(api.OpCancel, api.IDRequest{TaskID: earlyID}, nil); !api.IsInvalid(err) {
		t.Errorf("cancel twice: %v", err)
	}
	if err := cli.Call(api.OpCancel, api.IDRequest{TaskID: unknownID}, nil); !api.IsNotFound(err) {
		t.Errorf("cancel unknown: %v", err)
	}

	// 6. Amend with the expected-sequence guard on JetStream.
	if err := cli.Call(api.OpAmend, api.AmendRequest{TaskID: sub.TaskID, GPUs: 4}, &v); err != nil || v.GPUs != 4 || v.SubmittedAt.IsZero() || time.Since(v.SubmittedAt) > time.Minute {
		t.Errorf("amend: %v %+v", err, v)
	}

	// 7. Ops of other services under the same prefix are not answered here.
	if _, err := cliNC.Request(api.SubjectPrefix+"estimate", []byte(`{}`), 2*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("estimate: err = %v, want no responders", err)
	}

	// 8. HTTP: healthz, submit, show, history, 404.
	httpDo := func(method, path string, body any) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader([]byte(mustJSON(t, body)))
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, b := httpDo("GET", "/healthz", nil); code != 200 || string(bytes.TrimSpace(b)) != `{"status":"ok"}` {
		t.Errorf("healthz: %d %s", code, b)
	}
	code, b := httpDo("POST", "/v1/tasks", domain.Request{Name: "vit", Team: "vision", Priority: "critical", GPUs: 8,
		Hours: 24, Hypothesis: "h", Command: "c"})
	var hs api.SubmitReply
	if err := json.Unmarshal(b, &hs); code != 201 || err != nil {
		t.Fatalf("http submit: %d %s", code, b)
	}
	if code, b := httpDo("GET", "/v1/tasks/"+hs.TaskID, nil); code != 200 {
		t.Errorf("http show: %d %s", code, b)
	}
	code, b = httpDo("GET", "/v1/tasks/"+sub.TaskID+"/history", nil)
	var hist []api.HistoryEntry
	if err := json.Unmarshal(b, &hist); code != 200 || err != nil || len(hist) != 2 || hist[0].Type != "submitted" || hist[1].Type != "amended" {
		t.Errorf("http history: %d %s", code, b)
	}
	if code, b := httpDo("GET", "/v1/tasks/"+unknownID, nil); code != 404 {
		t.Errorf("http unknown: %d %s", code, b)
	}

	// 9. Checkpoint over NATS and HTTP, guarded by the task's state: refused
	// while queued, accepted once an agent reports it started.
	ck := api.CheckpointRequest{TaskID: hs.TaskID, Ref: "/ckpt/vit/step-1"}
	if err := cli.Call(api.OpCheckpoint, ck, nil); !api.IsInvalid(err) || err.(*api.Error).Field != "task_id" {
		t.Errorf("checkpoint while queued: err = %v, want a refusal naming task_id", err)
	}
	if code, b := httpDo("POST", "/v1/tasks/"+hs.TaskID+"/checkpoint", ck); code != 409 {
		t.Errorf("http checkpoint while queued: %d %s, want 409", code, b)
	}
	gpus := make([]events.GPU, 8)
	var uuids []string
	for i := range gpus {
		gpus[i] = events.GPU{UUID: fmt.Sprintf("GPU-%d", i), Model: "A100", MemoryMiB: 81920, Healthy: true}
		uuids = append(uuids, gpus[i].UUID)
	}
	for _, e := range []events.Event{
		events.Available{Node: "n1", GPUs: gpus, FreeGPUs: 8},
		events.Dispatched{TaskID: hs.TaskID, Placements: []events.Placement{{Node: "n1", GPUs: uuids}}},
		events.Started{TaskID: hs.TaskID, Node: "n1", PID: 1},
	} {
		if _, err := events.Append(ctx, log, e, events.Meta{Time: t0}, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	var ckr api.CheckpointReply
	if err := cli.Call(api.OpCheckpoint, ck, &ckr); err != nil || ckr.State != "running" || ckr.Seq == 0 {
		t.Errorf("checkpoint while running: %v %+v", err, ckr)
	}
	ck.Ref = "/ckpt/vit/step-2"
	if code, b := httpDo("POST", "/v1/tasks/"+hs.TaskID+"/checkpoint", ck); code != 200 {
		t.Errorf("http checkpoint while running: %d %s", code, b)
	}
	if err := cli.Call(api.OpShow, api.IDRequest{TaskID: hs.TaskID}, &v); err != nil || v.Checkpoint != "/ckpt/vit/step-2" {
		t.Errorf("show after checkpoints: %v, checkpoint %q", err, v.Checkpoint)
	}
	if err := cli.Call(api.OpCheckpoint, api.CheckpointRequest{TaskID: unknownID, Ref: "/c"}, nil); !api.IsNotFound(err) {
		t.Errorf("checkpoint unknown: %v", err)
	}

	// 10. Clean shutdown.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestRunConfigErrors(t *testing.T) {
	cases := map[string]Config{
		"no log":        {},
		"bad http addr": {Log: memlog.New(), HTTPAddr: "256.0.0.1:bad"},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			cfg.Logger = testLogger(t)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := Run(ctx, cfg); err == nil {
				t.Error("Run returned nil, want an error")
			}
		})
	}
}

// TestRunMemlog: Run without NATS or HTTP becomes ready and stops cleanly.
func TestRunMemlog(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Log: memlog.New(), Logger: testLogger(t), Ready: func() { close(ready) }})
	}()
	<-ready
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
