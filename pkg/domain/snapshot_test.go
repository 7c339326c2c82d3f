package domain_test

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
)

// (i) A snapshot taken at a random record, decoded, then the rest of the
// log folded onto it, equals the fold of the whole log: every exported
// field, every index (IndexMismatch after the load and after each record)
// and the queue order. The snapshot itself decodes to the state it was
// taken of.
func TestPropSnapshotThenTail(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs := genLog(t)
		k := rapid.IntRange(0, len(rs)).Draw(t, "k")
		head := dt.Fold(rs[:k])
		st, err := domain.DecodeSnapshot(domain.EncodeSnapshot(head))
		if err != nil {
			t.Fatalf("DecodeSnapshot: %v", err)
		}
		if diff := cmp.Diff(head, st, stateOpts); diff != "" {
			t.Fatalf("snapshot at record %d (-folded +decoded):\n%s", k, diff)
		}
		sameViews(t, head, st, "snapshot")
		if m := st.IndexMismatch(); m != "" {
			t.Fatalf("snapshot at record %d: %s", k, m)
		}
		for i, r := range rs[k:] {
			st.Apply(r)
			if m := st.IndexMismatch(); m != "" {
				t.Fatalf("snapshot at record %d, then record %d (%s %+v): %s", k, k+i, r.Event.EventType(), r.Event, m)
			}
		}
		whole := dt.Fold(rs)
		if diff := cmp.Diff(whole, st, stateOpts); diff != "" {
			t.Fatalf("snapshot at record %d, then the other %d (-full fold +snapshot and tail):\n%s", k, len(rs)-k, diff)
		}
		sameViews(t, whole, st, "snapshot and tail")
	})
}

// sameViews compares what the indexes answer, beyond the exported fields.
func sameViews(t *rapid.T, want, got *domain.State, what string) {
	type views struct {
		Queued, Active, Free, Sched, Names []string
		Live, Victims, Preempting, Count   int
		Totals                             domain.NodeTotals
		Teams                              map[string]int
	}
	view := func(s *domain.State) views {
		v := views{Queued: ids(s.Queued()), Active: ids(s.Active()), Free: s.FreeNodes(), Sched: s.SchedulableNodes(),
			Names: s.SortedNodes(), Live: s.Live(), Victims: s.Victims(), Preempting: s.Preempting(), Count: s.FreeCount(),
			Totals: s.Totals(), Teams: map[string]int{}}
		s.TeamGPUs(func(team string, n int) { v.Teams[team] = n })
		return v
	}
	if diff := cmp.Diff(view(want), view(got), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("%s: index views (-full fold +%s):\n%s", what, what, diff)
	}
}

// Every exported field of a task and a node survives a snapshot. The
// fields are filled by reflection, so a field added to Task, Node or GPU
// without a place in the snapshot fails here.
func TestSnapshotEveryField(t *testing.T) {
	at := time.Date(2025, 3, 3, 9, 0, 0, 123456789, time.UTC)
	n := 0
	var fill func(v reflect.Value, path string)
	fill = func(v reflect.Value, path string) {
		n++
		switch v.Kind() {
		case reflect.String:
			v.SetString(path + "-value")
		case reflect.Int, reflect.Int64:
			v.SetInt(int64(1000 + n))
		case reflect.Uint64:
			v.SetUint(uint64(2000 + n))
		case reflect.Float64:
			v.SetFloat(float64(n) + 0.25)
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Struct:
			if v.Type() == reflect.TypeOf(time.Time{}) {
				v.Set(reflect.ValueOf(at.Add(time.Duration(n) * time.Minute)))
				return
			}
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					fill(v.Field(i), path+"."+v.Type().Field(i).Name)
				}
			}
		case reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), 2, 2))
			for i := range 2 {
				fill(v.Index(i), path)
			}
		case reflect.Map:
			v.Set(reflect.MakeMap(v.Type()))
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k, path+"-key")
			fill(e, path)
			v.SetMapIndex(k, e)
		default:
			t.Fatalf("%s is a %s: teach the snapshot (pkg/domain/snapshot.go) and this test", path, v.Kind())
		}
	}
	task, node := &domain.Task{}, &domain.Node{}
	fill(reflect.ValueOf(task).Elem(), "task")
	fill(reflect.ValueOf(node).Elem(), "node")
	task.Priority, task.ID, node.Name = domain.High, "t1", "n1"
	task.EndedAt = time.Date(2025, 3, 3, 11, 0, 0, 0, time.FixedZone("", 2*3600)) // an offset survives too
	st := domain.NewState()
	st.Seq, st.Skipped, st.Ignored, st.LastTime = 77, 3, 4, at
	st.Tasks[task.ID] = task
	st.Nodes[node.Name] = node
	got, err := domain.DecodeSnapshot(domain.EncodeSnapshot(st))
	if err != nil {
		t.Fatal(err)
	}
	// Owner and Idem are rebuilt from the task, not stored.
	st.Owner = map[string]string{}
	for _, g := range task.GPUUUIDs() {
		st.Owner[g] = task.ID
	}
	st.Idem = map[string]string{domain.IdemKey(task.Team, task.IdempotencyKey): task.ID}
	if diff := cmp.Diff(st, got, stateOpts); diff != "" {
		t.Fatalf("(-encoded +decoded):\n%s", diff)
	}
	if _, off := got.Tasks["t1"].EndedAt.Zone(); off != 2*3600 {
		t.Errorf("zone offset %d s, want %d", off, 2*3600)
	}
	for name, tm := range map[string]time.Time{"SubmittedAt": got.Tasks["t1"].SubmittedAt, "LastTime": got.LastTime} {
		if tm.Location() != time.UTC {
			t.Errorf("%s in %v, want UTC", name, tm.Location())
		}
	}
}

// Nil and empty differ for the fold's slices and maps, and survive.
func TestSnapshotNilAndEmpty(t *testing.T) {
	st := dt.NewLog().Append(events.Available{Node: "bare"}, events.Drained{Node: "ghost"}).Fold()
	if st.Nodes["bare"].GPUs == nil || st.Nodes["ghost"].GPUs != nil {
		t.Fatalf("setup: bare %#v, ghost %#v", st.Nodes["bare"].GPUs, st.Nodes["ghost"].GPUs)
	}
	got, err := domain.DecodeSnapshot(domain.EncodeSnapshot(st))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(st, got, stateOpts); diff != "" {
		t.Fatalf("(-encoded +decoded):\n%s", diff)
	}
}

// A snapshot that does not check out is refused with the right error,
// never trusted and never a panic.
func TestSnapshotRefused(t *testing.T) {
	log := dt.NewLog()
	log.Append(dt.Node("n0").GPUs(4).Available(), dt.Task().ID("a").GPUs(2).Submitted(), dt.Task().ID("b").Submitted())
	log.Append(dt.Dispatch("a", dt.On("n0", 0, 1)))
	good := domain.EncodeSnapshot(log.Fold())
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	reseal := func(b []byte) []byte { // a valid length and checksum over a changed body
		binary.LittleEndian.PutUint64(b[12:], uint64(len(b)-24))
		binary.LittleEndian.PutUint32(b[20:], crc32.Checksum(b[24:], crc32.MakeTable(crc32.Castagnoli)))
		return b
	}
	cases := map[string]struct {
		b    []byte
		want error
	}{
		"empty":           {nil, domain.ErrSnapshotCorrupt},
		"header only":     {good[:24], domain.ErrSnapshotCorrupt},
		"truncated":       {good[:len(good)-1], domain.ErrSnapshotCorrupt},
		"another magic":   {mod(func(b []byte) []byte { b[0] = 'G'; return b }), domain.ErrSnapshotCorrupt},
		"future version":  {mod(func(b []byte) []byte { b[8] = domain.SnapshotVersion + 1; return b }), domain.ErrSnapshotVersion},
		"flipped bit":     {mod(func(b []byte) []byte { b[len(b)/2] ^= 4; return b }), domain.ErrSnapshotCorrupt},
		"trailing bytes":  {mod(func(b []byte) []byte { return reseal(append(b, 0)) }), domain.ErrSnapshotCorrupt},
		"resealed cut":    {mod(func(b []byte) []byte { return reseal(b[:len(b)-3]) }), domain.ErrSnapshotCorrupt},
		"huge task count": {reseal(hugeCount(t)), domain.ErrSnapshotCorrupt},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st, err := domain.DecodeSnapshot(tc.b)
			if !errors.Is(err, tc.want) || st != nil {
				t.Fatalf("DecodeSnapshot = %v, %v; want nil, %v", st, err, tc.want)
			}
		})
	}
}

// hugeCount is the snapshot of an empty state (a body of nine zero
// bytes: Seq, Skipped, Ignored, LastTime's two, Epoch, EpochSeq, no nodes,
// no tasks) with
// the task count replaced by the largest varint.
func hugeCount(t *testing.T) []byte {
	b := domain.EncodeSnapshot(domain.NewState())
	if len(b) != 24+9 {
		t.Fatalf("the empty state's snapshot has %d bytes, want 33", len(b))
	}
	return append(b[:len(b)-1], 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)
}

// Arbitrary damage behind a valid checksum (what a writer bug would
// produce) never panics: DecodeSnapshot returns a state or an error.
func TestPropSnapshotDamageNeverPanics(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := domain.EncodeSnapshot(dt.Fold(genLog(t)))
		body := b[24:]
		for range rapid.IntRange(1, 4).Draw(t, "damages") {
			if len(body) == 0 {
				break
			}
			i := rapid.IntRange(0, len(body)-1).Draw(t, "at")
			switch rapid.IntRange(0, 2).Draw(t, "how") {
			case 0:
				body[i] = byte(rapid.IntRange(0, 255).Draw(t, "byte"))
			case 1:
				body = body[:i]
			case 2:
				body = append(body[:i:i], body[i+1:]...)
			}
		}
		b = append(b[:24:24], body...)
		binary.LittleEndian.PutUint64(b[12:], uint64(len(body)))
		binary.LittleEndian.PutUint32(b[20:], crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
		st, err := domain.DecodeSnapshot(b)
		if (st == nil) == (err == nil) {
			t.Fatalf("DecodeSnapshot = %v, %v: want exactly one of a state and an error", st, err)
		}
		if err != nil && !errors.Is(err, domain.ErrSnapshotCorrupt) {
			t.Fatalf("error %v is not ErrSnapshotCorrupt", err)
		}
	})
}

// The holders of a decoded state come in submit order (EachActive
// promises no order; the rebuilt one is deterministic).
func TestSnapshotHoldersInSubmitOrder(t *testing.T) {
	log := dt.NewLog().Append(dt.Node("n0").GPUs(8).Available())
	for _, id := range []string{"a", "b", "c", "d"} {
		log.Append(dt.Task().ID(id).Submitted())
	}
	for i, id := range []string{"c", "a", "d", "b"} {
		log.Append(dt.Dispatch(id, dt.On("n0", i)))
	}
	st, err := domain.DecodeSnapshot(domain.EncodeSnapshot(log.Fold()))
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for i := range st.Holders() {
		got = append(got, st.Holder(i).SubmitSeq)
	}
	if !sort.SliceIsSorted(got, func(i, j int) bool { return got[i] < got[j] }) || len(got) != 4 {
		t.Fatalf("holders' submit seqs %v, want 4 ascending", got)
	}
}

// A snapshot of format 4 (testdata/snapshot-v4.bin, written by the build
// before deadlines and notify destinations) still decodes, to the state
// its log folds to: a new build does not fold the whole log again.
func TestSnapshotReadsVersion4(t *testing.T) {
	b, err := os.ReadFile("testdata/snapshot-v4.bin")
	if err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != 4 {
		t.Fatalf("testdata/snapshot-v4.bin is format %d", v)
	}
	got, err := domain.DecodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	log := dt.NewLog()
	log.Append(dt.Node("n0").GPUs(4).Available(), dt.Task().ID("a").GPUs(2).Submitted(), dt.Task().ID("b").Submitted())
	log.Append(dt.Dispatch("a", dt.On("n0", 0, 1)), events.Drained{Node: "ghost"})
	if diff := cmp.Diff(log.Fold(), got, stateOpts); diff != "" {
		t.Fatalf("(-folded +decoded):\n%s", diff)
	}
	// Format 3 is still refused: it lacks what format 4 added.
	old := append([]byte(nil), b...)
	binary.LittleEndian.PutUint32(old[8:], 3)
	if _, err := domain.DecodeSnapshot(old); !errors.Is(err, domain.ErrSnapshotVersion) {
		t.Fatalf("format 3: %v, want ErrSnapshotVersion", err)
	}
}

// A deadline and notify destinations survive a snapshot.
func TestSnapshotDeadlineNotify(t *testing.T) {
	d := time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC)
	s := dt.Task().ID("a").Submitted()
	s.Deadline, s.Notify = &d, []string{"https://hooks.example.com/x", "http://10.1.2.3/y"}
	st := dt.NewLog().Append(s).Fold()
	if !st.Tasks["a"].Deadline.Equal(d) || len(st.Tasks["a"].Notify) != 2 {
		t.Fatalf("fold: deadline %v, notify %v", st.Tasks["a"].Deadline, st.Tasks["a"].Notify)
	}
	got, err := domain.DecodeSnapshot(domain.EncodeSnapshot(st))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(st, got, stateOpts); diff != "" {
		t.Fatalf("(-encoded +decoded):\n%s", diff)
	}
}
