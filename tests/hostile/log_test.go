//go:build hostile

package hostile

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestDataDirAuthMode: a data directory made under one auth mode is
// refused under the other (exit 2, naming the way out: another --data),
// in both directions; the same mode starts again.
func TestDataDirAuthMode(t *testing.T) {
	authDir := filepath.Join(suiteDir, "datadir-auth")
	if out, err := exec.Command(bin(t), "auth", "init", authDir, "--teams", "vision,nlp").CombinedOutput(); err != nil {
		t.Fatalf("gpuq auth init: %v: %s", err, out)
	}
	for _, c := range []struct {
		name        string
		first, then bool // --auth of the first run and of the second
		refused     bool
	}{
		{"plain, then --auth", false, true, true},
		{"--auth, then plain", true, false, true},
		{"plain, then plain", false, false, false},
		{"--auth, then --auth", true, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := devOpts{}
			if c.first {
				o.authDir = authDir
			}
			first := newDev(t, "datadir", o).start(t)
			id := first.submit(t, with2(task(uniq("datadir")), "command", "sleep 600", "hours", 1))
			first.waitState(t, id, "running")
			first.stop()
			o = devOpts{data: first.data}
			if c.then {
				o.authDir = authDir
			}
			second := newDev(t, "datadir-again", o)
			second.launch(t)
			defer second.stop()
			healthy := false
			deadline := time.Now().Add(60 * time.Second)
			for !healthy && second.alive() && time.Now().Before(deadline) {
				code, _ := second.health()
				healthy = code == http.StatusOK
				time.Sleep(100 * time.Millisecond)
			}
			if !c.refused {
				if !healthy {
					t.Fatalf("the same mode again did not start: %v; log:\n%s", second.err, second.logTail(10))
				}
				return
			}
			if healthy || second.alive() {
				t.Fatalf("gpuq dev started on a data directory of the other auth mode (healthy %v); want exit 2", healthy)
			}
			var ee *exec.ExitError
			if !errors.As(second.err, &ee) || ee.ExitCode() != 2 {
				t.Errorf("exit %v, want 2", second.err)
			}
			if log := second.logTail(10); !strings.Contains(log, "--data") {
				t.Errorf("the refusal does not name the way out (another --data):\n%s", log)
			}
		})
	}
}

// newUUID is a random UUID (version 4).
func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// forge appends to the log (gpuq dev without --auth: anyone may) a copy
// of a real task's submitted record with the task id forged and the
// fields of data changed; it returns the record's sequence.
func forge(t *testing.T, d *dev, realID, forgedID string, data map[string]any) uint64 {
	t.Helper()
	nc, err := nats.Connect(d.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, eventStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, "gpuq.task."+realID+".submitted")
	if err != nil {
		t.Fatalf("the submitted record of %s: %v", realID, err)
	}
	var rec map[string]any
	if err := json.Unmarshal(m.Data, &rec); err != nil {
		t.Fatal(err)
	}
	rec["id"] = newUUID()
	inner, _ := rec["data"].(map[string]any)
	if inner == nil {
		t.Fatalf("record without data: %s", m.Data)
	}
	inner["task_id"] = forgedID
	for k, v := range data {
		inner[k] = v
	}
	msg := nats.NewMsg("gpuq.task." + forgedID + ".submitted")
	for k, vs := range m.Header {
		if k != nats.MsgIdHdr && !strings.HasPrefix(k, "Nats-") {
			msg.Header[k] = vs
		}
	}
	msg.Data = mustJSON(rec)
	ack, err := js.PublishMsg(ctx, msg)
	if err != nil {
		t.Fatalf("publish the forged record: %v", err)
	}
	return ack.Sequence
}

// TestForgedTaskID: task ids not of the API's shape (what submit mints)
// are refused by the API (400, field task_id), and a record in the log
// with such an id is skipped by the fold and listed by `gpuq audit
// skipped`; the agent never makes directories from it.
func TestForgedTaskID(t *testing.T) {
	d := sharedDev(t, false)
	nc := d.connect(t, "")
	for _, id := range []string{"x/y/z", "../../etc", "not-a-task", "x y"} {
		t.Run("show over NATS "+id, func(t *testing.T) {
			rep, err := call(nc, "gpuq.api.v1.show", mustJSON(map[string]string{"task_id": id}), 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Field != "task_id" {
				t.Errorf("show %q: error %q field %q not_found %v, want field task_id", id, rep.Error, rep.Field, rep.NotFound)
			}
		})
	}
	for _, path := range []string{"/v1/tasks/not-a-task", "/v1/tasks/x%2Fy%2Fz", "/v1/tasks/not-a-task/history", "/v1/tasks/not-a-task/logs"} {
		t.Run("GET "+path, func(t *testing.T) {
			if r := d.req("GET", path, nil, nil); r.Status != http.StatusBadRequest || r.errBody().Field != "task_id" {
				t.Errorf("answered %s, want 400 field task_id", r)
			}
		})
	}
	t.Run("a forged record in the log", func(t *testing.T) {
		real := d.submit(t, task(uniq("forge-source")))
		d.waitState(t, real, "completed")
		seq := forge(t, d, real, "x/y/z", map[string]any{"command": "echo forged"})
		time.Sleep(3 * time.Second) // a scheduler pass and an agent's start
		tasksDir := filepath.Join(d.data, "agents", "node-1", "tasks")
		if _, err := os.Stat(filepath.Join(tasksDir, "x")); err == nil {
			t.Errorf("the agent made %s/x/… for the forged task id x/y/z", tasksDir)
		}
		r := cli(t, nil, append([]string{"audit", "skipped"}, d.natsFlags("")...)...)
		if r.Code != 0 || !strings.Contains(r.Stdout, "x/y/z") || !strings.Contains(r.Stdout, fmt.Sprint(seq)) {
			t.Errorf("gpuq audit skipped does not list the forged record (seq %d): %s", seq, r)
		}
	})
}

const tinyFollowers = 100

// TestAdvisorTinyHoursInLog: a log that holds tasks estimated at 1e-300
// hours (accepted once; the API refuses them now, but the log keeps them;
// forged here as a copy of a real record) does not stall the advisor:
// after a restart /healthz says ok within 30 s (it said starting for
// minutes: each forward simulation ran its step cap without time
// advancing) and estimates answer.
func TestAdvisorTinyHoursInLog(t *testing.T) {
	d := ownDev(t, "tiny-hours", devOpts{extra: []string{"--gpus", "1"}})
	source := d.submit(t, task(uniq("source")))
	d.waitState(t, source, "completed")
	// Two tasks estimated at 1e-300 hours run (1 s each) and complete:
	// what the estimator learns from them, and then a blocker holds the
	// GPU and many tasks wait behind it.
	for range 2 {
		id := newUUID()
		forge(t, d, source, id, map[string]any{"hours": 1e-300, "command": "sleep 1", "name": uniq("tiny")})
		// Completed, or skipped by the fold (a reader may refuse such a
		// record): either way the advisor must not stall on it.
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			r := d.req("GET", "/v1/tasks/"+id, nil, nil)
			if r.Status == http.StatusNotFound || r.Status == http.StatusBadRequest || strings.Contains(string(r.Body), `"state":"completed"`) {
				t.Logf("forged task estimated at 1e-300 hours: %s", clip(r.String()))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("forged task %s neither completed nor skipped in 60 s: %s", id, r)
			}
		}
	}
	blocker := d.submit(t, with2(task(uniq("blocker")), "command", "sleep 600", "hours", 1))
	d.waitState(t, blocker, "running")
	nc := d.connect(t, "")
	var queued []string
	for i := range tinyFollowers {
		rep, err := call(nc, "gpuq.api.v1.submit", mustJSON(with2(task(fmt.Sprintf("queued-%d", i)), "command", "sleep 600", "hours", 1)), 30*time.Second)
		if err != nil || rep.Error != "" {
			t.Fatalf("submit: %v %s", err, rep.Error)
		}
		var res struct {
			TaskID string `json:"task_id"`
		}
		_ = json.Unmarshal(rep.Result, &res)
		queued = append(queued, res.TaskID)
	}
	t0 := time.Now()
	r := cli(t, nil, append([]string{"estimate", queued[len(queued)-1], "--json"}, d.natsFlags("")...)...)
	t.Logf("estimate behind the tiny tasks: %v: %s", time.Since(t0).Round(time.Millisecond), r)
	d.stop()
	t0 = time.Now()
	d.launch(t)
	healthy := false
	var last string
	for time.Since(t0) < 30*time.Second && d.alive() {
		var code int
		code, last = d.health()
		if healthy = code == http.StatusOK; healthy {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("restart to /healthz ok: %v (last %s)", time.Since(t0).Round(time.Millisecond), last)
	if !healthy {
		t.Fatalf("/healthz not ok 30 s after the restart: %s", last)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		r = cli(t, nil, append([]string{"estimate", queued[len(queued)-1], "--json"}, d.natsFlags("")...)...)
		if r.Code == 0 || time.Now().After(deadline) {
			break
		}
	}
	if r.Code != 0 {
		t.Errorf("estimate after the restart: %s", r)
	}
}

// TestKillMidBurst: kill -9 of gpuq dev between a task's started record
// and its run record.
func TestKillMidBurst(t *testing.T) {
	t.Skip("left to the agent's unit tests (a started task whose run record never appeared is requeued): the window between the two appends is microseconds, so a kill -9 2.5 s into a burst lands in it only by chance, not deterministically black-box")
}
