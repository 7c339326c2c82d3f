package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/embedded/embeddedtest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
	"github.com/gpuq/gpuq/pkg/snapshot"
)

func store(t *testing.T) (*snapshot.Store, jetstream.JetStream) {
	t.Helper()
	srv := embeddedtest.Server(t)
	nc := embeddedtest.Connect(t, srv, "test")
	j, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.Open(context.Background(), j, 1)
	if err != nil {
		t.Fatal(err)
	}
	return s, j
}

// logOf is an in-memory log of n task submissions; it returns the mark of
// each record.
func logOf(t *testing.T, n int) (*memlog.Log, []snapshot.Mark) {
	t.Helper()
	l := memlog.New()
	var marks []snapshot.Mark
	for i := range n {
		if _, err := events.Append(context.Background(), l, dt.Task().ID(fmt.Sprint("t", i)).Submitted(), events.Meta{Time: dt.Epoch}, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := events.ReadAll(context.Background(), l, 1, "", func(r events.Record) error {
		marks = append(marks, snapshot.MarkOf(r))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return l, marks
}

func TestSaveLoad(t *testing.T) {
	ctx := context.Background()
	s, _ := store(t)
	l, marks := logOf(t, 8)
	if _, _, err := s.Load(ctx, "svc", l); !errors.Is(err, snapshot.ErrNone) {
		t.Fatalf("Load of nothing: %v, want ErrNone", err)
	}
	big := bytes.Repeat([]byte("state "), 100_000) // several chunks
	for _, at := range []snapshot.Mark{marks[4], marks[6]} {
		if _, err := s.Save(ctx, "svc", at, []byte("a"), nil, big); err != nil {
			t.Fatal(err)
		}
	}
	at, parts, err := s.Load(ctx, "svc", l)
	if err != nil || at != marks[6] || len(parts) != 3 || string(parts[0]) != "a" || len(parts[1]) != 0 || !bytes.Equal(parts[2], big) {
		t.Fatalf("Load = %v, %d parts, %v; want the second save", at, len(parts), err)
	}
	// A log that ends before the snapshot (truncated, or restored from an
	// older backup), and a log that reaches its sequence with other
	// records (a stream created anew): the snapshot is refused.
	short, _ := logOf(t, 6)
	other := memlog.New()
	for range 10 {
		if _, err := events.Append(ctx, other, dt.Task().Submitted(), events.Meta{Time: dt.Epoch}, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	for name, l := range map[string]events.Log{"short": short, "other": other} {
		if _, _, err := s.Load(ctx, "svc", l); err == nil || errors.Is(err, snapshot.ErrNone) {
			t.Errorf("Load on the %s log: %v, want a refusal", name, err)
		}
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
		"not s2":         {Name: "a", Metadata: map[string]string{"gpuq-seq": "0", "gpuq-format": "1"}},
		"another format": {Name: "b", Metadata: map[string]string{"gpuq-seq": "0", "gpuq-format": "2"}},
		"no sequence":    {Name: "c", Metadata: map[string]string{"gpuq-format": "1"}},
	}
	for name, meta := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := obj.Put(ctx, meta, bytes.NewReader([]byte("garbage"))); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Load(ctx, meta.Name, memlog.New()); err == nil || errors.Is(err, snapshot.ErrNone) {
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
