package submitter

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/auth/authtest"
	"github.com/gpuq/gpuq/pkg/events/memlog"
)

// TestHTTPTLS: with a certificate the HTTP API speaks only HTTPS, which a
// client that trusts the test's CA accepts.
func TestHTTPTLS(t *testing.T) {
	files := authtest.TLS(t)
	cfg, err := files.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Log: memlog.New(), HTTPAddr: addr, TLS: cfg, Logger: testLogger(t), Ready: func() { close(ready) }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	pem, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	trusting := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := trusting.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("HTTPS with the CA: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Fatalf("HTTPS /healthz: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	if _, err := plain.Get("https://" + addr + "/healthz"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("HTTPS without the CA: %v, want a certificate error", err)
	}
	if resp, err := plain.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP to the HTTPS API: %d", resp.StatusCode)
		}
	}
}
