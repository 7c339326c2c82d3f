package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/embedded"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/snapshot"
)

func store(t *testing.T) (*snapshot.Store, jetstream.JetStream) {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	j, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.Open(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	return s, j
}

func TestSaveLoad(t *testing.T) {
	ctx := context.Background()
	s, _ := store(t)
	if _, _, err := s.Load(ctx, "svc", 10); !errors.Is(err, snapshot.ErrNone) {
		t.Fatalf("Load of nothing: %v, want ErrNone", err)
	}
	big := bytes.Repeat([]byte("state "), 100_000) // several chunks
	for _, seq := range []uint64{5, 7} {
		if _, err := s.Save(ctx, "svc", seq, []byte("a"), nil, big); err != nil {
			t.Fatal(err)
		}
	}
	seq, parts, err := s.Load(ctx, "svc", 7)
	if err != nil || seq != 7 || len(parts) != 3 || string(parts[0]) != "a" || len(parts[1]) != 0 || !bytes.Equal(parts[2], big) {
		t.Fatalf("Load = %d, %d parts, %v; want the second save", seq, len(parts), err)
	}
	// A log that ends before the snapshot (truncated, or restored from an
	// older backup): the snapshot is refused.
	if _, _, err := s.Load(ctx, "svc", 6); err == nil || errors.Is(err, snapshot.ErrNone) {
		t.Fatalf("Load with the log at 6 of a snapshot at 7: %v, want a refusal", err)
	}
}

// An object that is not a snapshot frame, or claims another format, is
// refused, not trusted.
func TestLoadRefusesDamage(t *testing.T) {
	ctx := context.Background()
	s, j := store(t)
	obj, err := j.ObjectStore(ctx, events.SnapshotBucket)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]jetstream.ObjectMeta{
		"not s2":         {Name: "a", Metadata: map[string]string{"gpuq-seq": "1", "gpuq-format": "1"}},
		"another format": {Name: "b", Metadata: map[string]string{"gpuq-seq": "1", "gpuq-format": "2"}},
		"no sequence":    {Name: "c", Metadata: map[string]string{"gpuq-format": "1"}},
	}
	for name, meta := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := obj.Put(ctx, meta, bytes.NewReader([]byte("garbage"))); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Load(ctx, meta.Name, 100); err == nil || errors.Is(err, snapshot.ErrNone) {
				t.Fatalf("Load: %v, want a refusal", err)
			}
		})
	}
}

func TestUnframe(t *testing.T) {
	f := snapshot.Frame(42, []byte("x"), []byte("yz"))
	seq, parts, err := snapshot.Unframe(f)
	if err != nil || seq != 42 || len(parts) != 2 || string(parts[1]) != "yz" {
		t.Fatalf("Unframe = %d, %q, %v", seq, parts, err)
	}
	for i := range f {
		bad := bytes.Clone(f)
		bad[i] ^= 0x10
		if _, _, err := snapshot.Unframe(bad); err == nil {
			t.Fatalf("a flipped bit at byte %d was not noticed", i)
		}
	}
	if _, _, err := snapshot.Unframe(f[:len(f)-1]); err == nil {
		t.Fatal("a truncated frame was accepted")
	}
}
