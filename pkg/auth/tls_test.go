package auth_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/auth/authtest"
	"github.com/gpuq/gpuq/pkg/embedded"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/svcmain"
)

// TestNATSTLS: a server with a certificate takes clients that verify it
// with the CA (and credentials), and refuses plain ones and clients that
// do not trust the CA.
func TestNATSTLS(t *testing.T) {
	files := authtest.TLS(t)
	dir := t.TempDir()
	authDir := filepath.Join(dir, "auth")
	if _, err := auth.Init(authDir, nil, nil); err != nil {
		t.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(dir, "js"), Port: -1,
		AuthConfig: filepath.Join(authDir, auth.ConfigFile), TLS: auth.TLSFiles{Cert: files.Cert, Key: files.Key}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	url := strings.Replace(srv.URL(), "nats://", "tls://", 1)

	opts, err := svcmain.NATSOptions(auth.CredsPath(authDir, "admin"), auth.TLSFiles{CA: files.CA})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("TLS with the CA: %v", err)
	}
	defer nc.Close()
	if !nc.TLSRequired() {
		t.Fatal("the connection is not TLS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := jetstream.Open(ctx, nc, jetstream.StreamConfig{}); err != nil {
		t.Fatalf("open the log over TLS: %v", err)
	}

	// Without the CA the server's certificate is not trusted.
	noCA, _ := svcmain.NATSOptions(auth.CredsPath(authDir, "admin"), auth.TLSFiles{})
	if _, err := nats.Connect(url, append(noCA, nats.NoReconnect())...); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("TLS without the CA: %v, want a certificate error", err)
	}
	// A plain client is refused.
	if _, err := nats.Connect(srv.URL(), append(noCA, nats.NoReconnect(), nats.Timeout(2*time.Second))...); err == nil {
		t.Fatal("a plain-text client connected to a TLS server")
	}
	// A bad CA file is named.
	if _, err := svcmain.NATSOptions("", auth.TLSFiles{CA: files.Key}); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("a key as the CA: %v", err)
	}
}
