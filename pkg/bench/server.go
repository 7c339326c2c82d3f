package bench

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/embedded"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
)

// maxPending bounds outstanding async publishes, for the raw rate and for
// gpuq's pipelines alike (nats.go's default).
const maxPending = 4000

// stall lets an async publish wait for a free slot under maxPending for up
// to a minute (nats.go's default of 200 ms fails publishes on a busy
// machine with ErrTooManyStalledMsgs).
var stall = js.WithStallWait(time.Minute)

// node is one embedded server on its own store directory, with an
// in-process connection and the audit stream created as gpuq creates it.
type node struct {
	dir    string
	ownDir bool
	srv    *embedded.Server
	nc     *nats.Conn
	log    *jetstream.Log
	// replicas: 1, one server; 3, a cluster of three on loopback (cl),
	// the stream at R3, the connections in-process to the first server.
	replicas int
	cl       *embedded.Cluster
}

// startNode starts a fresh server in a new temporary directory under
// parent ("" = the system's).
func startNode(ctx context.Context, parent string) (*node, error) {
	return startNodes(ctx, parent, 1)
}

// startNodes is startNode on one server (replicas 1) or on a cluster of
// three with the stream at R3 (replicas 3).
func startNodes(ctx context.Context, parent string, replicas int) (*node, error) {
	dir, err := os.MkdirTemp(parent, "gpuq-bench-*")
	if err != nil {
		return nil, err
	}
	n := &node{dir: dir, ownDir: true, replicas: max(replicas, 1)}
	if err := n.start(ctx); err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

// start starts (or restarts) the server on n.dir and opens the stream.
func (n *node) start(ctx context.Context) error {
	var srv *embedded.Server
	if n.replicas > 1 {
		cl, err := embedded.StartCluster(embedded.ClusterOptions{StoreDir: n.dir, Servers: n.replicas})
		if err != nil {
			return err
		}
		n.cl, srv = cl, cl.Servers[0]
	} else {
		var err error
		if srv, err = embedded.Start(embedded.Options{StoreDir: n.dir, NoListen: true}); err != nil {
			return err
		}
	}
	n.srv = srv
	nc, err := srv.Connect("gpuq-bench")
	if err != nil {
		return err
	}
	n.nc = nc
	l, err := jetstream.Open(ctx, nc, jetstream.StreamConfig{Replicas: n.replicas})
	if err != nil {
		return err
	}
	n.log = l
	return nil
}

// agedWindow is the de-duplication window History's aged restart sets
// (see History, step 5).
const agedWindow = time.Second

// age makes every event of n's log older than the stream's
// de-duplication window, as a day would: it restarts the server, shortens
// the stream's window to w, stops the server again and waits w out.
func (n *node) age(ctx context.Context, w time.Duration) error {
	n.stop()
	if err := n.start(ctx); err != nil {
		return err
	}
	j := n.log.JetStream()
	s, err := j.Stream(ctx, events.StreamName)
	if err != nil {
		return err
	}
	cfg := s.CachedInfo().Config
	cfg.Duplicates = w
	if _, err := j.UpdateStream(ctx, cfg); err != nil {
		return err
	}
	n.stop()
	time.Sleep(w + 100*time.Millisecond)
	return nil
}

// stop closes the connection and shuts the server down, keeping the store.
func (n *node) stop() {
	if n.nc != nil {
		n.nc.Close()
		n.nc = nil
	}
	if n.cl != nil {
		n.cl.Shutdown()
		n.cl = nil
	} else if n.srv != nil {
		n.srv.Shutdown()
	}
	n.srv = nil
}

// close stops the server and removes the store.
func (n *node) close() {
	n.stop()
	if n.ownDir {
		_ = os.RemoveAll(n.dir)
	}
}

// publisher is an async-publishing JetStream context on its own
// connection; err counts failed publishes.
type publisher struct {
	nc   *nats.Conn
	js   js.JetStream
	errs chan error
	// tolerate, when set, says which failed publishes are counted in
	// tolerated instead of failing the run.
	tolerate  func(m *nats.Msg, err error) bool
	tolerated atomic.Int64
}

func (n *node) publisher(onAck js.MsgAckHandler) (*publisher, error) {
	nc, err := n.srv.Connect("gpuq-bench-publisher")
	if err != nil {
		return nil, err
	}
	p := &publisher{nc: nc, errs: make(chan error, 1)}
	opts := []js.JetStreamOpt{
		js.WithPublishAsyncMaxPending(maxPending),
		js.WithPublishAsyncErrHandler(func(_ js.JetStream, m *nats.Msg, err error) {
			if p.tolerate != nil && p.tolerate(m, err) {
				p.tolerated.Add(1)
				return
			}
			select {
			case p.errs <- fmt.Errorf("publish on %s: %w", m.Subject, err):
			default:
			}
		}),
	}
	if onAck != nil {
		opts = append(opts, js.WithPublishAsyncAckHandler(onAck))
	}
	j, err := js.New(nc, opts...)
	if err != nil {
		nc.Close()
		return nil, err
	}
	p.js = j
	return p, nil
}

// wait waits until every async publish is acknowledged; it returns the
// first publish error, if any.
func (p *publisher) wait(ctx context.Context) error {
	select {
	case <-p.js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-p.errs:
		return err
	default:
		return nil
	}
}

func (p *publisher) close() { p.nc.Close() }

func (n *node) lastSeq(ctx context.Context) (uint64, error) { return n.log.LastSeq(ctx) }
