// Package embedded starts an in-process nats-server with JetStream: the
// zero-setup default of `gpuq dev`, and the server every test that needs
// NATS starts for itself.
package embedded

import (
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Options for Start.
type Options struct {
	StoreDir string // JetStream file store; required
	Host     string // default 127.0.0.1
	Port     int    // -1 for a random port; 0 means default 4222
	// NoListen serves only in-process connections.
	NoListen bool
}

// Server is a running embedded server.
type Server struct {
	NS *server.Server
}

// Start starts the server and waits until it is ready for connections.
func Start(o Options) (*Server, error) {
	if o.StoreDir == "" {
		return nil, fmt.Errorf("embedded: StoreDir is required")
	}
	if err := os.MkdirAll(o.StoreDir, 0o755); err != nil {
		return nil, err
	}
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	opts := &server.Options{
		ServerName: "gpuq-dev",
		Host:       host,
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		DontListen: o.NoListen,
		NoSigs:     true,
		NoLog:      true,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded: nats-server not ready in 30s")
	}
	return &Server{NS: ns}, nil
}

// Connect opens an in-process client connection.
func (s *Server) Connect(name string) (*nats.Conn, error) {
	return nats.Connect("", nats.InProcessServer(s.NS), nats.Name(name), nats.MaxReconnects(-1))
}

// URL is the client URL when the server listens.
func (s *Server) URL() string { return s.NS.ClientURL() }

// Shutdown stops the server and waits for it.
func (s *Server) Shutdown() {
	s.NS.Shutdown()
	s.NS.WaitForShutdown()
}
