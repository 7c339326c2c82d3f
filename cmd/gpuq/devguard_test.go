package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
