package svcmain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/embedded"
)

type vals struct {
	Common
	GPUs int
	Mock bool
}

func TestParse(t *testing.T) {
	def := Common{NATSURL: DefaultNATSURL, Replicas: 1, DedupeWindow: 24 * time.Hour, LogLevel: "info"}
	with := func(f func(*vals)) vals { v := vals{Common: def, GPUs: 8}; f(&v); return v }
	for name, tc := range map[string]struct {
		env     map[string]string
		args    []string
		want    vals
		wantBad string // the field of the FieldError, "" = none
	}{
		"defaults": {want: with(func(*vals) {})},
		"env": {
			env:  map[string]string{"GPUQ_NATS_URL": "nats://n:1", "GPUQ_STREAM_REPLICAS": "3", "GPUQ_DEDUPE_WINDOW": "1h", "GPUQ_LOG_LEVEL": "debug", "GPUQ_MOCK_GPUS": "4", "GPUQ_MOCK": "true"},
			want: vals{Common: Common{NATSURL: "nats://n:1", Replicas: 3, DedupeWindow: time.Hour, LogLevel: "debug"}, GPUs: 4, Mock: true},
		},
		"flag beats env": {
			env:  map[string]string{"GPUQ_MOCK_GPUS": "4"},
			args: []string{"--gpus", "2"},
			want: with(func(v *vals) { v.GPUs = 2 }),
		},
		"bad env names the flag":          {env: map[string]string{"GPUQ_MOCK_GPUS": "four"}, wantBad: "gpus"},
		"bad env is moot when flag given": {env: map[string]string{"GPUQ_MOCK_GPUS": "four"}, args: []string{"--gpus=3"}, want: with(func(v *vals) { v.GPUs = 3 })},
		"bad duration env":                {env: map[string]string{"GPUQ_DEDUPE_WINDOW": "1 day"}, wantBad: "dedupe-window"},
		"replicas out of range":           {args: []string{"--stream-replicas", "0"}, wantBad: "stream-replicas"},
		"unknown log level":               {env: map[string]string{"GPUQ_LOG_LEVEL": "loud"}, wantBad: "log-level"},
		"empty nats url":                  {args: []string{"--nats", " "}, wantBad: "nats"},
		"stray argument":                  {args: []string{"extra"}, wantBad: "args"},
		"bad flag value names the flag":   {args: []string{"--gpus", "four"}, wantBad: "gpus"},
		"bad bool value names the flag":   {args: []string{"--mock=maybe"}, wantBad: "mock"},
		"creds file missing":              {env: map[string]string{"GPUQ_NATS_CREDS": "/nonexistent/x.nk"}, wantBad: "creds"},
		"creds not a seed":                {args: []string{"--creds", "svcmain_test.go"}, wantBad: "creds"},
		"a client certificate alone":      {args: []string{"--nats-cert", "svcmain_test.go"}, wantBad: "nats-cert"},
		"a CA file missing":               {args: []string{"--nats-ca", "/nonexistent/ca.pem"}, wantBad: "nats-ca"},
	} {
		t.Run(name, func(t *testing.T) {
			for _, k := range []string{"GPUQ_NATS_URL", "GPUQ_STREAM_REPLICAS", "GPUQ_DEDUPE_WINDOW", "GPUQ_LOG_LEVEL", "GPUQ_MOCK_GPUS", "GPUQ_MOCK", "GPUQ_NATS_CREDS"} {
				t.Setenv(k, tc.env[k])
			}
			f := NewFlags("test")
			f.cmd.SetOut(io.Discard)
			f.cmd.SetErr(io.Discard)
			c := f.Common()
			var got vals
			f.Int(&got.GPUs, "gpus", "GPUQ_MOCK_GPUS", 8, "")
			f.Bool(&got.Mock, "mock", "GPUQ_MOCK", false, "")
			err := f.parse(tc.args, c)
			var fe *FieldError
			switch {
			case tc.wantBad != "":
				if !errors.As(err, &fe) || fe.Field != tc.wantBad {
					t.Fatalf("parse: got %v, want a FieldError for %q", err, tc.wantBad)
				}
				return
			case err != nil:
				t.Fatalf("parse: %v", err)
			}
			got.Common = *c
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("values (-want +got):\n%s", d)
			}
		})
	}
}

// TestConnectWaitsForJetStream starts Connect before the server exists; it
// must keep trying and open the audit log once the server is up.
func TestConnectWaitsForJetStream(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type result struct {
		err   error
		waits int
	}
	done := make(chan result, 1)
	go func() {
		waits := 0
		c := &Common{NATSURL: fmt.Sprintf("nats://127.0.0.1:%d", port), Replicas: 1}
		nc, log, err := Connect(ctx, "test", c, func(msg string, err error) {
			if err != nil {
				waits++
			}
		})
		if err == nil {
			_, err = log.LastSeq(ctx)
			nc.Close()
		}
		done <- result{err, waits}
	}()

	time.Sleep(1500 * time.Millisecond)
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	r := <-done
	if r.err != nil {
		t.Fatalf("Connect: %v", r.err)
	}
	t.Logf("connected after %d reported waits", r.waits)
}

// TestConnectGivesUpWithContext: a cancelled context ends the wait.
func TestConnectGivesUpWithContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, _, err := Connect(ctx, "test", &Common{NATSURL: "nats://127.0.0.1:1", Replicas: 1}, nil)
	if err == nil {
		t.Fatal("Connect to nothing succeeded")
	}
}

// TestParseHelpAndUnknown: --help prints the flags with their environment
// variables and is not an error of a field; an unknown flag is refused.
func TestParseHelpAndUnknown(t *testing.T) {
	for name, tc := range map[string]struct {
		args     []string
		wantHelp bool
		wantOut  string
	}{
		"--help":             {args: []string{"--help"}, wantHelp: true, wantOut: "[GPUQ_NATS_URL]"},
		"-h":                 {args: []string{"-h"}, wantHelp: true, wantOut: "--stream-replicas"},
		"unknown flag":       {args: []string{"--nosuch"}},
		"go-style one dash":  {args: []string{"-nats", "x"}},
		"flag without value": {args: []string{"--nats"}},
	} {
		t.Run(name, func(t *testing.T) {
			f := NewFlags("test")
			var out strings.Builder
			f.cmd.SetOut(&out)
			f.cmd.SetErr(io.Discard)
			err := f.parse(tc.args, f.Common())
			var fe *FieldError
			switch {
			case tc.wantHelp:
				if !errors.Is(err, errHelp) {
					t.Fatalf("parse: %v, want errHelp", err)
				}
				if !strings.Contains(out.String(), tc.wantOut) {
					t.Errorf("help lacks %q:\n%s", tc.wantOut, out.String())
				}
			case err == nil || errors.Is(err, errHelp) || errors.As(err, &fe):
				t.Fatalf("parse: %v, want the flag library's own error", err)
			}
		})
	}
}

// TestLogger: off a terminal every line is one JSON object with svc and the
// caller's fields; on a terminal it is not JSON.
func TestLogger(t *testing.T) {
	for name, tc := range map[string]struct {
		terminal bool
		level    string
		wantJSON bool
		wantNone bool
	}{
		"pipe: JSON":               {wantJSON: true, level: "info"},
		"terminal: console":        {terminal: true, level: "info"},
		"level above the line":     {wantJSON: true, level: "warn", wantNone: true},
		"unknown level means info": {wantJSON: true, level: "loud"},
	} {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			l := newLogger(&b, tc.terminal, "scheduler", tc.level)
			l.Info().Str("task_id", "t1").Str("node", "n1").Msg("decided")
			if tc.wantNone {
				if b.Len() != 0 {
					t.Fatalf("logged %q at level %s", b.String(), tc.level)
				}
				return
			}
			var m map[string]any
			err := json.Unmarshal([]byte(b.String()), &m)
			if tc.wantJSON != (err == nil) {
				t.Fatalf("JSON %v, want %v: %q", err == nil, tc.wantJSON, b.String())
			}
			if !tc.wantJSON {
				if !strings.Contains(b.String(), "task_id=") || !strings.Contains(b.String(), "t1") {
					t.Errorf("console line lacks task_id=t1: %q", b.String())
				}
				return
			}
			for k, v := range map[string]string{"svc": "scheduler", "task_id": "t1", "node": "n1", "message": "decided", "level": "info"} {
				if m[k] != v {
					t.Errorf("%s = %v, want %q (line %q)", k, m[k], v, b.String())
				}
			}
		})
	}
}
