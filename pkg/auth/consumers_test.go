package auth_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
)

// streamConsumers is the audit stream's consumer count, as the admin sees it.
func (a *authServer) streamConsumers() int {
	a.t.Helper()
	c := a.as("admin")
	j, err := js.New(c.nc)
	if err != nil {
		a.t.Fatal(err)
	}
	s, err := j.Stream(context.Background(), events.StreamName)
	if err != nil {
		a.t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		a.t.Fatal(err)
	}
	return info.State.Consumers
}

// TestReadersCreateNoConsumer: the reader roles (the auditor, every
// agent, whose credential its jobs' user may read) can create no consumer
// on the audit stream, durable or not, by any of the server's subjects —
// so they cannot fill its consumer limit (the #22 finding: a thousand
// durable consumers, after which no service could start) — and they still
// read the whole log, a task's last record and what is appended while
// they follow, by direct gets. A service still follows with its ordered
// consumer.
func TestReadersCreateNoConsumer(t *testing.T) {
	a := newAuthServer(t)
	sc, sl := a.openLog("submitter")
	const task = "01a22962-7813-7583-8cf9-b646a9f5e718"
	for range 3 {
		if err := publish(sc, events.TaskPrefix+task+".submitted"); err != nil {
			t.Fatal(err)
		}
	}
	durable, _ := json.Marshal(map[string]any{"stream_name": events.StreamName,
		"config": map[string]any{"durable_name": "reader", "name": "reader", "ack_policy": "none"}})
	unnamed, _ := json.Marshal(map[string]any{"stream_name": events.StreamName,
		"config": map[string]any{"ack_policy": "none", "inactive_threshold": int64(time.Hour)}})
	attempts := map[string]struct {
		subject string
		body    []byte
	}{
		"legacy durable create": {"$JS.API.CONSUMER.DURABLE.CREATE." + events.StreamName + ".reader", durable},
		"named create, durable": {"$JS.API.CONSUMER.CREATE." + events.StreamName + ".reader", durable},
		"named create, filter":  {"$JS.API.CONSUMER.CREATE." + events.StreamName + ".reader.gpuq.task.>", durable},
		"unnamed create":        {"$JS.API.CONSUMER.CREATE." + events.StreamName, unnamed},
	}
	for _, role := range []string{"auditor", "agent-node-1"} {
		t.Run(role, func(t *testing.T) {
			c := a.as(role)
			for name, at := range attempts {
				_, err := c.nc.Request(at.subject, at.body, 300*time.Millisecond)
				if err == nil {
					t.Errorf("%s: %s answered, want refused", name, at.subject)
					continue
				}
				refused(t, c, err, at.subject)
			}
			j, err := js.New(c.nc)
			if err != nil {
				t.Fatal(err)
			}
			octx, ocancel := context.WithTimeout(context.Background(), time.Second)
			_, err = j.OrderedConsumer(octx, events.StreamName, js.OrderedConsumerConfig{})
			ocancel()
			if err == nil {
				t.Error("ordered consumer created, want refused")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if n := a.streamConsumers(); n != 0 {
				t.Fatalf("the stream has %d consumers after %s's attempts, want 0", n, role)
			}

			// Reads still work, by direct gets.
			l, err := jetstream.Attach(ctx, c.nc, "")
			if err != nil {
				t.Fatalf("attach: %v (%s)", err, c.violations())
			}
			n := 0
			if _, err := l.Read(ctx, 1, "", func(events.Stored) error { n++; return nil }); err != nil {
				t.Fatalf("read: %v (%s)", err, c.violations())
			}
			if want := int(lastSeq(t, sl)); n != want {
				t.Fatalf("read %d records, want %d", n, want)
			}
			if m, ok, err := l.Last(ctx, events.TaskPrefix+task+".submitted"); err != nil || !ok || m.Seq != 3 {
				t.Fatalf("last submitted: %+v %v %v, want seq 3", m, ok, err)
			}
			fl, err := l.Follow(ctx, lastSeq(t, sl)+1, events.TaskPrefix+">")
			if err != nil {
				t.Fatal(err)
			}
			defer fl.Close()
			if err := publish(sc, events.TaskPrefix+task+".cancelled"); err != nil {
				t.Fatal(err)
			}
			m, err := fl.Next(ctx)
			if err != nil || m.Subject != events.TaskPrefix+task+".cancelled" {
				t.Fatalf("follow: %+v %v (%s)", m, err, c.violations())
			}
			if n := a.streamConsumers(); n != 0 {
				t.Fatalf("the stream has %d consumers after %s's reads, want 0", n, role)
			}
		})
	}

	// The services' own follow is untouched.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fl, err := sl.Follow(ctx, 1, "")
	if err != nil {
		t.Fatalf("submitter follow: %v (%s)", err, sc.violations())
	}
	defer fl.Close()
	if _, err := fl.Next(ctx); err != nil {
		t.Fatalf("submitter follow: %v", err)
	}
}
