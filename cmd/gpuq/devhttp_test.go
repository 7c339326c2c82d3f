package main

import (
	"net"
	"testing"
)

// TestDevHTTPLoopbackByDefault: `gpuq dev` serves its HTTP API on a
// loopback address unless --http says otherwise (docs/operations.md,
// Browser safety): an open API on every interface would run any caller's
// commands.
func TestDevHTTPLoopbackByDefault(t *testing.T) {
	def := newDev().Flags().Lookup("http").DefValue
	host, _, err := net.SplitHostPort(def)
	if err != nil {
		t.Fatalf("--http default %q: %v", def, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Errorf("--http default %q: want a loopback IP address", def)
	}
}
