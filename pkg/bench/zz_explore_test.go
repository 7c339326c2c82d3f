package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/embedded"
	"github.com/gpuq/gpuq/pkg/events"
)

func TestExploreRaw(t *testing.T) {
	if os.Getenv("EXPLORE") == "" {
		t.Skip()
	}
	ctx := context.Background()
	n := 50000
	for round := 0; round < 2; round++ {
		for _, v := range []struct {
			name          string
			unique, msgid bool
			dedupe        time.Duration
			tcp           bool
		}{
			{"one-subject/msgid/2m", false, true, 2 * time.Minute, false},
			{"one-subject/msgid/24h", false, true, 24 * time.Hour, false},
			{"unique/msgid/24h", true, true, 24 * time.Hour, false},
			{"unique/nomsgid/24h", true, false, 24 * time.Hour, false},
			{"one-subject/nomsgid", false, false, 24 * time.Hour, false},
			{"unique/msgid/24h/tcp", true, true, 24 * time.Hour, true},
		} {
			dir := t.TempDir()
			srv, err := embedded.Start(embedded.Options{StoreDir: dir, NoListen: !v.tcp, Port: -1})
			if err != nil {
				t.Fatal(err)
			}
			nc, err := srv.Connect("x")
			if v.tcp {
				nc.Close()
				nc, err = natsConnect(srv.URL())
			}
			if err != nil {
				t.Fatal(err)
			}
			j, _ := js.New(nc, js.WithPublishAsyncMaxPending(maxPending))
			sc := events.AuditStream("", 1, v.dedupe)
			if _, err := j.CreateOrUpdateStream(ctx, sc); err != nil {
				t.Fatal(err)
			}
			payload := make([]byte, 256)
			start := time.Now()
			for i := 0; i < n; i++ {
				id := taskID(i)
				subj := "gpuq.task.x.submitted"
				if v.unique {
					subj = events.TaskPrefix + id + ".submitted"
				}
				opts := []js.PublishOpt{stall}
				if v.msgid {
					opts = append(opts, js.WithMsgID("raw:"+id))
				}
				if _, err := j.PublishAsync(subj, payload, opts...); err != nil {
					t.Fatal(err)
				}
			}
			<-j.PublishAsyncComplete()
			d := time.Since(start)
			fmt.Printf("%-28s %8.0f/s\n", v.name, float64(n)/d.Seconds())
			nc.Close()
			srv.Shutdown()
		}
	}
}

func natsConnect(url string) (*nats.Conn, error) { return nats.Connect(url) }
