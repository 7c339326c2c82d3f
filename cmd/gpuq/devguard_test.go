package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/policy"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestDevGuards: a second `gpuq dev` on a data directory in use, and one on
// a NATS port in use, each exit 1 at once with a message naming the holder's
// pid or the port (today: both start, or hang 30 s).
func TestDevGuards(t *testing.T) {
	// A real gpuq dev holding its data directory.
	held := t.TempDir()
	natsPort := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runDev(ctx, devFlags{data: held, port: natsPort, http: "127.0.0.1:0", gpus: 1, nodes: 1, model: "a100",
			dedupe: time.Minute, maxGPUs: 8, maxHours: 1, heartbeat: time.Second, nodeTO: 30 * time.Second}, policy.Options{})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("gpuq dev did not stop in 15 s")
		}
	})
	pid := fmt.Sprint(os.Getpid())
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Held: its pid in .lock and its NATS listening.
		b, _ := os.ReadFile(filepath.Join(held, ".lock"))
		if strings.TrimSpace(string(b)) == pid {
			if conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", natsPort)); err == nil {
				conn.Close()
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("gpuq dev ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("gpuq dev did not write its pid to .lock and listen in 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port

	busyHTTP := busy.Addr().String()
	cases := []struct {
		name string
		data string
		port int
		http string
		want string
	}{
		{"data directory in use", held, freePort(t), "127.0.0.1:0",
			fmt.Sprintf("gpuq: data directory %s is in use by another gpuq dev (pid %s); stop it, or give this one another --data", held, pid)},
		{"nats port in use", t.TempDir(), busyPort, "127.0.0.1:0",
			fmt.Sprintf("gpuq: NATS port %d is already in use; stop what listens there, or pick another with --nats-port", busyPort)},
		{"http address in use", t.TempDir(), freePort(t), busyHTTP,
			fmt.Sprintf("gpuq: HTTP address %s is already in use; stop what listens there, or pick another with --http", busyHTTP)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			start := time.Now()
			c := run([]string{"dev", "--data", tc.data, "--nats-port", fmt.Sprint(tc.port), "--http", tc.http, "--gpus", "1"}, &out, &errb)
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("took %v, want it to stop at once", took)
			}
			if c != exitErr {
				t.Errorf("exit %d, want %d", c, exitErr)
			}
			if got := strings.TrimSuffix(errb.String(), "\n"); got != tc.want {
				t.Errorf("stderr\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestDevDataIdentity: a data directory holds one event log. gpuq dev
// records which in <data>/log.json on first use, and refuses (exit 2, at
// once, naming both and the way out) another auth mode on it, or another
// auth directory's account; a directory of an older gpuq dev, without the
// record, is judged by its JetStream store. Before, `gpuq dev --auth A
// --data D` on a D of a plain gpuq dev started a second, empty log under
// another NATS account, and its agent adopted — and killed — the first
// log's runs.
func TestDevDataIdentity(t *testing.T) {
	authA := filepath.Join(t.TempDir(), "a")
	authB := filepath.Join(t.TempDir(), "b")
	for _, d := range []string{authA, authB} {
		if _, err := auth.Init(d, []string{"vision"}, []string{"node-1"}); err != nil {
			t.Fatal(err)
		}
	}
	keyA, err := auth.AccountKey(authA)
	if err != nil {
		t.Fatal(err)
	}
	keyB, _ := auth.AccountKey(authB)

	// A plain gpuq dev's directory, as it really is; started twice, its
	// log keeps its identity (what the agents' runs record).
	plain := t.TempDir()
	var rec dataIdentity
	for i := 0; i < 2; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		port := freePort(t)
		go func() {
			done <- runDev(ctx, devFlags{data: plain, port: port, http: "127.0.0.1:0", gpus: 1, nodes: 0, model: "a100",
				dedupe: time.Minute, maxGPUs: 8, maxHours: 1, heartbeat: time.Second, nodeTO: 30 * time.Second}, policy.Options{})
		}()
		got := waitIdentity(t, plain, done)
		if i == 1 {
			// The record is there from the first run: ask this one's log.
			if now := liveIdentity(t, port, done); now != rec.Log {
				t.Errorf("the log's identity changed across a restart: %s, then %s", rec.Log, now)
			}
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("gpuq dev: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("gpuq dev did not stop in 15 s")
		}
		if i == 1 && got != rec {
			t.Errorf("the record changed across a restart:\n%+v\n%+v", rec, got)
		}
		rec = got
	}
	if rec.Auth != authNone || rec.Account != noAuthAccount || !strings.HasPrefix(rec.Log, events.StreamName+"@") {
		t.Errorf("record of a plain gpuq dev: %+v", rec)
	}
	if got := storedAccounts(plain); !slices.Equal(got, []string{noAuthAccount}) {
		t.Errorf("accounts in the store: %v, want [$G]", got)
	}
	// The same as an older gpuq dev left it: no record.
	older := t.TempDir()
	if err := os.MkdirAll(filepath.Join(older, "jetstream", "jetstream", noAuthAccount, "streams", events.StreamName), 0o755); err != nil {
		t.Fatal(err)
	}
	// A directory of gpuq dev --auth A.
	withA := t.TempDir()
	if err := writeDataIdentity(withA, dataIdentity{Auth: authOn, Account: keyA, AuthDir: authA, Server: "gpuq-dev", Stream: events.StreamName}); err != nil {
		t.Fatal(err)
	}

	cases := map[string]struct {
		data string
		auth string
		want []string // in stderr; nil: accepted
	}{
		"--auth on a plain directory": {plain, authA,
			[]string{"holds the event log of `gpuq dev without --auth (NATS account $G)`", "`gpuq dev --auth " + authA + " (NATS account " + keyA + ")`", "another --data"}},
		"--auth on a plain directory of an older gpuq": {older, authA,
			[]string{"without --auth (NATS account $G)", keyA, "another --data"}},
		"plain on an --auth directory": {withA, "",
			[]string{"holds the event log of `gpuq dev --auth " + authA + " (NATS account " + keyA + ")`", "`gpuq dev without --auth (NATS account $G)`", "another --data"}},
		"another auth directory": {withA, authB,
			[]string{keyA, keyB, "another --data"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			args := []string{"dev", "--data", tc.data, "--nats-port", fmt.Sprint(freePort(t)), "--http", "127.0.0.1:0", "--gpus", "1"}
			if tc.auth != "" {
				args = append(args, "--auth", tc.auth)
			}
			var out, errb bytes.Buffer
			start := time.Now()
			c := run(args, &out, &errb)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %v, want it to stop at once", took)
			}
			if c != exitInvalid {
				t.Errorf("exit %d, want %d; stderr %s", c, exitInvalid, errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr %q\nwant it to contain %q", errb.String(), w)
				}
			}
		})
	}
	// The same mode on each: accepted.
	for _, c := range []struct {
		data, auth string
	}{{plain, ""}, {older, ""}, {withA, authA}, {t.TempDir(), authB}} {
		want, err := wantIdentity(devFlags{auth: c.auth})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := checkDataIdentity(c.data, want); err != nil {
			t.Errorf("%s with --auth %q: %v", c.data, c.auth, err)
		}
	}
}

// waitIdentity waits for gpuq dev to record its data directory's log.
func waitIdentity(t *testing.T, dir string, done <-chan error) dataIdentity {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(filepath.Join(dir, identityFile)); err == nil {
			var id dataIdentity
			if err := json.Unmarshal(b, &id); err != nil {
				t.Fatal(err)
			}
			return id
		}
		select {
		case err := <-done:
			t.Fatalf("gpuq dev ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s in %s after 20 s", identityFile, dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReadinessNamesWhoCatchesUp: while a service of gpuq dev is still
// folding the log, its /healthz (the submitter's, through Health) names
// that one, not just "starting" (issue 22: 125 s of "starting" while the
// advisor replayed, and `gpuq stats` blamed the submitter).
func TestReadinessNamesWhoCatchesUp(t *testing.T) {
	names := []string{"submitter", "advisor", "scheduler", "gpuagent node-1"}
	cases := map[string]struct {
		ready []int
		want  string // "" = healthy
	}{
		"none ready":          {nil, "starting: submitter, advisor, scheduler, gpuagent node-1 are still catching up with the log"},
		"the advisor replays": {[]int{0, 2, 3}, "starting: advisor is still catching up with the log"},
		"all ready":           {[]int{3, 2, 1, 0, 1}, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := newReadiness(names)
			for _, i := range c.ready {
				r.done(i)()
			}
			err := r.health()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != c.want {
				t.Errorf("health %q, want %q", got, c.want)
			}
			select {
			case <-r.all:
				if c.want != "" {
					t.Error("all closed while a service is not ready")
				}
			default:
				if c.want == "" {
					t.Error("all not closed with every service ready")
				}
			}
		})
	}
}

// liveIdentity is the identity of the log of the gpuq dev listening on
// port.
func liveIdentity(t *testing.T, port int, done <-chan error) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port)); err == nil {
			defer nc.Close()
			l, err := jetstream.Attach(context.Background(), nc, "")
			if err == nil {
				id, err := l.Identity(context.Background())
				if err == nil {
					return id
				}
			}
		}
		select {
		case err := <-done:
			t.Fatalf("gpuq dev ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("gpuq dev's log not reachable in 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
