package scheduler

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/embedded"
	"github.com/gpuq/gpuq/pkg/events"
	evjs "github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/snapshot"
)

// On a 3-server JetStream cluster, streams and buckets created with one
// replica are raised to three by the services' --stream-replicas 3, and
// when the leading scheduler's server dies (and the scheduler with it),
// the standby on another server takes the lease, with a larger epoch,
// and dispatches; nothing is dispatched twice.
func TestClusterFailoverR3(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-server cluster")
	}
	cl, err := embedded.StartCluster(embedded.ClusterOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Each client talks to one server only, as a process on that machine
	// would before it learns of the others.
	connect := func(i int) *nats.Conn {
		nc, err := nats.Connect(cl.Servers[i].URL(), nats.NoReconnect(), nats.IgnoreDiscoveredServers())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	nc1, nc2, nc3 := connect(0), connect(1), connect(2)

	// 1. Everything first created with one replica, as a single-server
	// deployment left it.
	log3, err := evjs.Open(ctx, nc3, evjs.StreamConfig{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	j3 := log3.JetStream()
	for _, kc := range []js.KeyValueConfig{events.LeaderKV(time.Second, 1), events.HeartbeatKV(1)} {
		if _, err := j3.CreateKeyValue(ctx, kc); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := snapshot.Open(ctx, j3, 1); err != nil {
		t.Fatal(err)
	}

	// 2. Two schedulers with --stream-replicas 3, on servers 1 and 2.
	open := func(nc *nats.Conn) *evjs.Log {
		l, err := evjs.Open(ctx, nc, evjs.StreamConfig{Replicas: 3})
		if err != nil {
			t.Fatalf("open with 3 replicas: %v", err)
		}
		return l
	}
	logA, logB := open(nc1), open(nc2)
	start := func(name string, l *evjs.Log) (*Scheduler, context.CancelFunc, <-chan error) {
		s := New(Config{Log: l, JS: l.JetStream(), Policy: policy.New(policy.Options{}), Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
			Instance: name, LeaseTTL: 2 * time.Second, Tick: 50 * time.Millisecond, NodeTimeout: time.Minute, Replicas: 3})
		sctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(sctx) }()
		return s, stop, done
	}
	a, stopA, doneA := start("a", logA)
	defer stopA()
	waitFor(t, 60*time.Second, "a leads", func() bool {
		select {
		case err := <-doneA:
			t.Fatalf("a: %v", err)
		default:
		}
		l, _ := a.Lease()
		return l
	})
	// Every stream behind gpuq's storage (the heartbeats' once a leads) now has three replicas.
	for _, name := range []string{events.StreamName, "KV_" + events.LeaderBucket, "KV_" + events.HeartbeatBucket, "OBJ_" + events.SnapshotBucket} {
		waitFor(t, 60*time.Second, name+" at 3 current replicas", func() bool {
			s, err := j3.Stream(ctx, name)
			if err != nil {
				return false
			}
			i := s.CachedInfo()
			if i.Config.Replicas != 3 || i.Cluster == nil || len(i.Cluster.Replicas) != 2 {
				return false
			}
			for _, p := range i.Cluster.Replicas {
				if !p.Current {
					return false
				}
			}
			return true
		})
	}

	b, stopB, doneB := start("b", logB)
	defer func() { stopB(); <-doneB }()

	// 3. A node with a fresh heartbeat (through server 3), and a task.
	hb, err := j3.KeyValue(ctx, events.HeartbeatBucket)
	if err != nil {
		t.Fatal(err)
	}
	beat := func() {
		b, _ := json.Marshal(map[string]any{"node": "n1", "time": time.Now().UTC()})
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, _ = hb.Put(pctx, "n1", b)
	}
	beat()
	go func() {
		for ctx.Err() == nil {
			beat()
			time.Sleep(200 * time.Millisecond)
		}
	}()
	app := &server{log: log3}
	app.append(t, time.Now(), dt.Node("n1").GPUs(4).Available(), dt.Task().ID("t1").GPUs(1).Submitted())
	dispatched := func(id string) (epoch uint64, n int) {
		_, err := events.ReadAll(ctx, log3, 1, "", func(r events.Record) error {
			if d, ok := r.Event.(events.Dispatched); ok && d.TaskID == id {
				epoch, n = d.Epoch, n+1
			}
			return nil
		})
		if err != nil {
			t.Logf("read: %v", err)
		}
		return epoch, n
	}
	waitFor(t, 30*time.Second, "t1 dispatched", func() bool { _, n := dispatched("t1"); return n > 0 })
	_, epochA := a.Lease()

	// 4. Server 1 dies, and with it scheduler a's connection: a cannot
	// renew; its lease expires in the R3 bucket and b takes over.
	killed := time.Now()
	cl.Stop(0)
	t.Logf("server 1 stopped")
	app.append(t, time.Now(), dt.Task().ID("t2").GPUs(1).Submitted())
	// Generous: on a loaded 2-core machine the R3 streams take a while to
	// elect new leaders (2–11 s measured on a quiet one).
	waitFor(t, 120*time.Second, "t2 dispatched by b", func() bool { _, n := dispatched("t2"); return n > 0 })
	failover := time.Since(killed)
	t.Logf("failover_s=%.1f (lease TTL 2 s, one of three servers down)", failover.Seconds())
	if l, e := b.Lease(); !l || e <= epochA {
		t.Fatalf("b leads %v with epoch %d after a's %d", l, e, epochA)
	}
	if e, _ := dispatched("t2"); e <= epochA {
		t.Fatalf("t2 dispatched with epoch %d, not newer than a's %d", e, epochA)
	}
	stopA()
	<-doneA
	for _, id := range []string{"t1", "t2"} {
		if _, n := dispatched(id); n != 1 {
			t.Errorf("%s dispatched %d times, want 1", id, n)
		}
	}
	// 5. The server comes back and catches up.
	if err := cl.Restart(0); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
