package main

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/embedded"
)

// TestReloadOnHangup: gpuq dev --auth reloads its auth configuration on
// SIGHUP, so a role gpuq auth rotate revoked is refused without a
// restart; before the signal, the old file still connects.
func TestReloadOnHangup(t *testing.T) {
	dir := t.TempDir()
	authDir := filepath.Join(dir, "auth")
	if _, err := auth.Init(authDir, []string{"vision"}, []string{"node-1"}); err != nil {
		t.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(dir, "js"), Port: -1, AuthConfig: filepath.Join(authDir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	b, err := os.ReadFile(auth.CredsPath(authDir, "submitter"))
	if err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(dir, "kept.creds") // a copy, as a leaked one is kept
	if err := os.WriteFile(kept, b, 0o600); err != nil {
		t.Fatal(err)
	}
	old, err := auth.LoadCreds(kept)
	if err != nil {
		t.Fatal(err)
	}
	connects := func() bool { // over TCP: a refused in-process connection takes 10 s to fail
		opts, err := old.Options()
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(srv.URL(), append(opts, nats.Timeout(5*time.Second))...)
		if err != nil {
			return false
		}
		nc.Close()
		return true
	}
	if _, err := auth.Rotate(authDir, []string{"submitter"}); err != nil {
		t.Fatal(err)
	}
	if !connects() {
		t.Fatal("the old submitter file was refused before any reload")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hup := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { defer close(done); reloadOnHangup(ctx, srv, hup, zerolog.Nop()) }()
	hup <- syscall.SIGHUP
	deadline := time.Now().Add(10 * time.Second)
	for connects() {
		if time.Now().After(deadline) {
			t.Fatal("the revoked submitter file still connects 10 s after SIGHUP")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
}
