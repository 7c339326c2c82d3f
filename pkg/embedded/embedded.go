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

	"github.com/gpuq/gpuq/pkg/auth"
)

// Options for Start.
type Options struct {
	StoreDir string // JetStream file store; required
	Host     string // default 127.0.0.1
	Port     int    // -1 for a random port; 0 means default 4222
	// NoListen serves only in-process connections.
	NoListen bool
	// AuthConfig, when set, is a nats-server configuration file (`gpuq
	// auth init`'s nats-auth.conf) whose users and permissions the server
	// enforces; the fields above override what it says of them.
	AuthConfig string
	// TLS, with a certificate and key, makes clients connect with TLS; with
	// a CA too, client certificates are verified when given.
	TLS auth.TLSFiles
	// Warn, when set, receives the server's errors and warnings, such as
	// "Publish Violation - Subject ..." for what a user's permissions
	// refused.
	Warn func(msg string)
}

// warnLogger passes a server's errors and warnings on.
type warnLogger struct{ warn func(string) }

func (l warnLogger) Noticef(string, ...any) {}
func (l warnLogger) Debugf(string, ...any)  {}
func (l warnLogger) Tracef(string, ...any)  {}
func (l warnLogger) Warnf(f string, a ...any) {
	l.warn(fmt.Sprintf(f, a...))
}
func (l warnLogger) Errorf(f string, a ...any) { l.warn(fmt.Sprintf(f, a...)) }
func (l warnLogger) Fatalf(f string, a ...any) { l.warn(fmt.Sprintf(f, a...)) }

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
	opts := &server.Options{}
	if o.AuthConfig != "" {
		var err error
		if opts, err = server.ProcessConfigFile(o.AuthConfig); err != nil {
			return nil, fmt.Errorf("embedded: %w", err)
		}
	}
	opts.ServerName, opts.Host, opts.Port = "gpuq-dev", host, o.Port
	opts.JetStream, opts.StoreDir, opts.DontListen = true, o.StoreDir, o.NoListen
	opts.NoSigs, opts.NoLog = true, true
	if !o.TLS.Empty() {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: o.TLS.Cert, KeyFile: o.TLS.Key, CaFile: o.TLS.CA, Verify: false})
		if err != nil {
			return nil, fmt.Errorf("embedded: tls: %w", err)
		}
		opts.TLSConfig, opts.TLS = tc, true
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	if o.Warn != nil {
		ns.SetLogger(warnLogger{o.Warn}, false, false)
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
	return s.ConnectAs(name, nil)
}

// ConnectAs opens an in-process client connection with credentials (nil:
// none, for a server without AuthConfig).
func (s *Server) ConnectAs(name string, c *auth.Creds) (*nats.Conn, error) {
	opts, err := c.Options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.InProcessServer(s.NS), nats.Name(name), nats.MaxReconnects(-1))
	return nats.Connect("", opts...)
}

// URL is the client URL when the server listens.
func (s *Server) URL() string { return s.NS.ClientURL() }

// Shutdown stops the server and waits for it.
func (s *Server) Shutdown() {
	s.NS.Shutdown()
	s.NS.WaitForShutdown()
}
