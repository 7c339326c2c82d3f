// Package embedded starts an in-process nats-server with JetStream: the
// zero-setup default of `gpuq dev`, and the server every test that needs
// NATS starts for itself.
package embedded

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
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
	o  Options
}

// serverOptions are the nats-server options of o.
func serverOptions(o Options) (*server.Options, error) {
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
	if opts.MaxControlLine < auth.MaxControlLine {
		// the roles' user JWTs exceed the default 4 KiB CONNECT line (an
		// auth directory made before its config said so)
		opts.MaxControlLine = auth.MaxControlLine
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
	return opts, nil
}

// Start starts the server and waits until it is ready for connections.
func Start(o Options) (*Server, error) {
	if o.StoreDir == "" {
		return nil, fmt.Errorf("embedded: StoreDir is required")
	}
	if err := os.MkdirAll(o.StoreDir, 0o755); err != nil {
		return nil, err
	}
	opts, err := serverOptions(o)
	if err != nil {
		return nil, err
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
	if o.Port == -1 && !o.NoListen {
		if a, ok := ns.Addr().(*net.TCPAddr); ok {
			o.Port = a.Port // a reload keeps the port it got
		}
	}
	return &Server{NS: ns, o: o}, nil
}

// Reload reads AuthConfig again and applies it, as nats-server does on
// SIGHUP: new or revoked users and signing keys of `gpuq auth rotate`
// take effect, and connections they no longer allow are closed.
func (s *Server) Reload() error {
	if s.o.AuthConfig == "" {
		return fmt.Errorf("embedded: no auth configuration to reload")
	}
	opts, err := serverOptions(s.o)
	if err != nil {
		return err
	}
	return s.NS.ReloadOptions(opts)
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

// ClusterOptions for StartCluster.
type ClusterOptions struct {
	StoreDir string // each server's store is StoreDir/<server name>; required
	Servers  int    // default 3
	Name     string // cluster name, default "gpuq"
}

// Cluster is a JetStream cluster of embedded servers on loopback, each
// listening for clients and routes on random ports: what tests and
// `gpuq bench` use to run gpuq on replicated (R3) storage in one
// process, as nats-server's own tests do.
type Cluster struct {
	Servers []*Server
	opts    []*server.Options
}

// StartCluster starts the servers, each routed to every other, and waits
// until JetStream has a meta leader. A server that does not come up (its
// reserved route port taken by another process between the reservation
// and the start, say) makes it start the cluster again on fresh ports,
// twice at most.
func StartCluster(o ClusterOptions) (*Cluster, error) {
	var err error
	for try := range 3 {
		var c *Cluster
		if c, err = startCluster(o, try); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func startCluster(o ClusterOptions, try int) (*Cluster, error) {
	if o.StoreDir == "" {
		return nil, fmt.Errorf("embedded: StoreDir is required")
	}
	if o.Servers == 0 {
		o.Servers = 3
	}
	if o.Name == "" {
		o.Name = "gpuq"
	}
	// Reserve the route ports first, so every server can name every other.
	ports := make([]int, o.Servers)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	c := &Cluster{}
	for i := range ports {
		var routes []*url.URL
		for j, p := range ports {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
			}
		}
		name := fmt.Sprintf("%s-%d", o.Name, i+1)
		opts := &server.Options{
			ServerName: name,
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			StoreDir:   filepath.Join(o.StoreDir, storeName(name, try)),
			Cluster:    server.ClusterOpts{Name: o.Name, Host: "127.0.0.1", Port: ports[i]},
			Routes:     routes,
			NoSigs:     true,
			NoLog:      true,
		}
		c.opts = append(c.opts, opts)
		if err := c.start(i); err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	if err := c.WaitReady(30 * time.Second); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// storeName is server name's store directory on the try'th start of
// its cluster: a fresh one after a failed start.
func storeName(name string, try int) string {
	if try == 0 {
		return name
	}
	return fmt.Sprintf("%s.try%d", name, try)
}

// start (re)starts server i on its options (its ports and store).
func (c *Cluster) start(i int) error {
	o := *c.opts[i] // after the first start, Port is the client port it got: a restart keeps it
	if err := os.MkdirAll(o.StoreDir, 0o755); err != nil {
		return err
	}
	ns, err := server.NewServer(&o)
	if err != nil {
		return err
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return fmt.Errorf("embedded: %s not ready in 30s", o.ServerName)
	}
	c.opts[i].Port = ns.Addr().(*net.TCPAddr).Port
	if i < len(c.Servers) {
		c.Servers[i] = &Server{NS: ns}
	} else {
		c.Servers = append(c.Servers, &Server{NS: ns})
	}
	return nil
}

// WaitReady waits until every running server sees a JetStream meta
// leader (the cluster can create and change streams).
func (c *Cluster) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, running, current := true, 0, -1
		for _, s := range c.Servers {
			if !s.NS.Running() {
				continue
			}
			running++
			if !s.NS.JetStreamEnabled() || !s.NS.JetStreamIsCurrent() || s.NS.JetStreamIsClustered() && s.metaLeader() == "" {
				ok = false
			}
			if s.NS.JetStreamIsLeader() {
				current = s.currentPeers()
			}
		}
		// The meta leader must also see every other running server as a
		// current peer: before that, an R3 stream is refused ("no
		// suitable peers for placement, peer offline").
		if ok && current >= running-1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("embedded: cluster without a JetStream meta leader after %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// currentPeers is how many other meta group peers the server sees
// current and online.
func (s *Server) currentPeers() int {
	jsz, err := s.NS.Jsz(&server.JSzOptions{})
	if err != nil || jsz.Meta == nil {
		return -1
	}
	n := 0
	for _, p := range jsz.Meta.Replicas {
		if p.Current && !p.Offline {
			n++
		}
	}
	return n
}

func (s *Server) metaLeader() string {
	jsz, err := s.NS.Jsz(&server.JSzOptions{})
	if err != nil || jsz.Meta == nil {
		return ""
	}
	return jsz.Meta.Leader
}

// Stop shuts server i down (its store stays); Restart starts it again
// on the same ports and store.
func (c *Cluster) Stop(i int) { c.Servers[i].Shutdown() }

// Restart starts server i again after Stop.
func (c *Cluster) Restart(i int) error { return c.start(i) }

// Shutdown stops every server.
func (c *Cluster) Shutdown() {
	for _, s := range c.Servers {
		if s != nil && s.NS.Running() {
			s.Shutdown()
		}
	}
}
