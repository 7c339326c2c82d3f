package domain

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

// A state snapshot is the fold written as bytes, so that a service can
// restart from a snapshot and the tail of the log instead of the whole log.
// It is a cache of the fold, never the truth: the log stays authoritative,
// and a snapshot that does not decode is ignored (the service folds from
// the start).
//
// It holds what Apply folds — Seq, Skipped, Ignored, LastTime, every task
// and every node — and none of the indexes: Owner, Idem and the unexported
// indexes are rebuilt on load from the tasks and nodes (rebuildIndexes),
// with the functions Apply uses, so they cannot drift from the tasks.
//
// Layout: a 24-byte header — the magic "gpuqstat", the format version
// (uint32), the body's length (uint64) and the CRC-32C of the body
// (uint32), little-endian — then the body: unsigned and signed varints,
// floats as varints of their byte-reversed bits, times as seconds and
// nanoseconds since year 1 plus a zone offset, strings as a length and
// bytes. Strings that many tasks share (teams, node names, GPU UUIDs,
// states, reasons) are written once and then referred to by number.

// SnapshotVersion is the format DecodeSnapshot reads and EncodeSnapshot
// writes. A change of the layout or of what a field means is a new
// version; a snapshot of another version is refused (ErrSnapshotVersion),
// which costs one full fold.
const SnapshotVersion = 6 // 2: the leader epoch; 3: drained with preemption; 4: checkpoint steps, the attempt's preemption request, progress; 5: deadline and notify; 6: the reason's code

// snapshotOldest is the oldest format DecodeSnapshot still reads: a
// version 4 snapshot is version 5 without the tasks' deadline and notify
// destinations (they decode as none), and a version 5 one is version 6
// without the reasons' codes (upcastReasonCode), so both are read rather
// than refused.
const snapshotOldest = 4

const snapHeader = 24

var snapMagic = [8]byte{'g', 'p', 'u', 'q', 's', 't', 'a', 't'}

// Errors of DecodeSnapshot.
var (
	ErrSnapshotVersion = errors.New("domain: snapshot of an unknown format version")
	ErrSnapshotCorrupt = errors.New("domain: corrupt snapshot")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeSnapshot writes the state as a snapshot. It only reads s.
func EncodeSnapshot(s *State) []byte {
	w := snapWriter{b: make([]byte, snapHeader, snapHeader+256*len(s.Tasks)+1024), ids: map[string]uint64{}}
	w.uvarint(s.Seq)
	w.varint(int64(s.Skipped))
	w.varint(int64(s.Ignored))
	w.time(s.LastTime)
	w.uvarint(s.Epoch)
	w.uvarint(s.EpochSeq)

	names := make([]string, 0, len(s.Nodes))
	for n := range s.Nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	w.uvarint(uint64(len(names)))
	for _, name := range names {
		n := s.Nodes[name]
		w.shared(n.Name)
		w.shared(string(n.State))
		w.shared(n.BootID)
		w.shared(n.Reason)
		w.bool(n.DrainPreempt)
		w.count(len(n.GPUs), n.GPUs == nil)
		for _, g := range n.GPUs {
			w.shared(g.UUID)
			w.varint(int64(g.Index))
			w.shared(g.Model)
			w.varint(int64(g.MemoryMiB))
			w.bool(g.Healthy)
		}
	}

	w.uvarint(uint64(len(s.Tasks)))
	for _, t := range s.Tasks {
		w.task(t)
	}

	body := w.b[snapHeader:]
	copy(w.b, snapMagic[:])
	binary.LittleEndian.PutUint32(w.b[8:], SnapshotVersion)
	binary.LittleEndian.PutUint64(w.b[12:], uint64(len(body)))
	binary.LittleEndian.PutUint32(w.b[20:], crc32.Checksum(body, castagnoli))
	return w.b
}

func (w *snapWriter) task(t *Task) {
	w.inline(t.ID)
	w.inline(t.Name)
	w.shared(t.Team)
	w.varint(int64(t.Priority))
	w.varint(int64(t.GPUs))
	w.float(t.Hours)
	w.inline(t.Hypothesis)
	w.inline(t.Command)
	w.shared(t.PreemptSignal)
	w.float(t.GraceS)
	w.shared(t.GPUModel)
	w.varint(int64(t.MinGPUMemMiB))
	w.inline(t.IdempotencyKey)
	w.shared(t.Dir)
	w.time(t.SubmittedAt)
	w.uvarint(t.SubmitSeq)
	w.shared(string(t.State))
	var flags byte
	if t.Preemptible {
		flags |= 1
	}
	if t.Holding {
		flags |= 2
	}
	w.b = append(w.b, flags)
	w.count(len(t.Placements), t.Placements == nil)
	for _, p := range t.Placements {
		w.shared(p.Node)
		w.count(len(p.GPUs), p.GPUs == nil)
		for _, g := range p.GPUs {
			w.shared(g)
		}
	}
	w.time(t.DispatchedAt)
	w.uvarint(t.DispatchSeq)
	w.time(t.StartedAt)
	w.time(t.FirstStarted)
	w.time(t.EndedAt)
	w.shared(t.Node)
	w.varint(int64(t.PID))
	w.inline(t.Checkpoint)
	w.time(t.CheckpointAt)
	w.inline(t.ResumeFrom)
	w.varint(int64(t.Preemptions))
	w.inline(t.PreemptFor)
	w.float(t.LostGPUSecs)
	w.float(t.RunSeconds)
	w.varint(int64(t.ExitCode))
	w.shared(t.Error)
	w.inline(t.StderrTail)
	w.shared(t.Reason)
	w.count(len(t.Checklist), t.Checklist == nil)
	for k, v := range t.Checklist {
		w.shared(k)
		w.bool(v)
	}
	w.uvarint(t.LastSeq)
	w.varint(t.CheckpointStep)
	w.varint(t.ResumeStep)
	w.shared(t.PreemptPolicy)
	w.time(t.PreemptAt)
	w.varint(t.ProgressStep)
	w.varint(t.ProgressTotal)
	w.float(t.ProgressFraction)
	w.time(t.ProgressAt)
	// Version 5.
	w.time(t.Deadline)
	w.count(len(t.Notify), t.Notify == nil)
	for _, u := range t.Notify {
		w.inline(u)
	}
	// Version 6.
	w.shared(t.ReasonCode)
}

// DecodeSnapshot reads a snapshot written by EncodeSnapshot into a new
// state with every index rebuilt. It fails with ErrSnapshotVersion on
// another format version and ErrSnapshotCorrupt (wrapped) on anything
// else that does not check out: magic, length, checksum, contents. It
// never panics on bad input and does not keep b.
func DecodeSnapshot(b []byte) (st *State, err error) {
	if len(b) < snapHeader || [8]byte(b[:8]) != snapMagic {
		return nil, fmt.Errorf("%w: no snapshot header", ErrSnapshotCorrupt)
	}
	v := binary.LittleEndian.Uint32(b[8:])
	if v < snapshotOldest || v > SnapshotVersion {
		return nil, fmt.Errorf("%w: version %d, this build reads %d to %d", ErrSnapshotVersion, v, snapshotOldest, SnapshotVersion)
	}
	body := b[snapHeader:]
	if n := binary.LittleEndian.Uint64(b[12:]); n != uint64(len(body)) {
		return nil, fmt.Errorf("%w: body of %d bytes, header says %d", ErrSnapshotCorrupt, len(body), n)
	}
	if binary.LittleEndian.Uint32(b[20:]) != crc32.Checksum(body, castagnoli) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrSnapshotCorrupt)
	}
	defer func() {
		// The checksum makes this unreachable short of a bug in the writer;
		// a bad snapshot must still never take a service down.
		if p := recover(); p != nil {
			st, err = nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, p)
		}
	}()
	// One string for the whole body: every string of the state is a slice
	// of it, so decoding allocates no string of its own.
	r := snapReader{s: string(body), version: v}
	st = &State{}
	st.Seq = r.uvarint()
	st.Skipped = r.int()
	st.Ignored = r.int()
	st.LastTime = r.time()
	st.Epoch = r.uvarint()
	st.EpochSeq = r.uvarint()

	nn := r.length(4)
	st.Nodes = make(map[string]*Node, nn)
	for range nn {
		n := &Node{Name: r.shared(), State: NodeState(r.shared()), BootID: r.shared(), Reason: r.shared(), DrainPreempt: r.bool()}
		if k, isNil := r.count(5); !isNil {
			n.GPUs = make([]GPU, k)
			for i := range n.GPUs {
				n.GPUs[i] = GPU{UUID: r.shared(), Index: r.int(), Model: r.shared(), MemoryMiB: r.int(), Healthy: r.bool()}
			}
		}
		if r.err == nil && st.Nodes[n.Name] != nil {
			r.fail("node " + n.Name + " twice")
		}
		st.Nodes[n.Name] = n
	}

	nt := r.length(40)
	st.Tasks = make(map[string]*Task, nt)
	slab := make([]Task, nt) // one allocation for every task
	for i := range slab {
		t := &slab[i]
		r.task(t)
		if r.err != nil {
			break
		}
		st.Tasks[t.ID] = t
		if len(st.Tasks) != i+1 {
			r.fail("task " + t.ID + " twice")
		}
	}
	if r.err == nil && r.i != len(r.s) {
		r.fail(fmt.Sprintf("%d bytes after the last task", len(r.s)-r.i))
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, r.err)
	}
	st.rebuildIndexes(slab)
	return st, nil
}

func (r *snapReader) task(t *Task) {
	t.ID = r.inline()
	t.Name = r.inline()
	t.Team = r.shared()
	t.Priority = Priority(r.int())
	t.GPUs = r.int()
	t.Hours = r.float()
	t.Hypothesis = r.inline()
	t.Command = r.inline()
	t.PreemptSignal = r.shared()
	t.GraceS = r.float()
	t.GPUModel = r.shared()
	t.MinGPUMemMiB = r.int()
	t.IdempotencyKey = r.inline()
	t.Dir = r.shared()
	t.SubmittedAt = r.time()
	t.SubmitSeq = r.uvarint()
	t.State = TaskState(r.shared())
	flags := r.byte()
	t.Preemptible, t.Holding = flags&1 != 0, flags&2 != 0
	if k, isNil := r.count(2); !isNil {
		t.Placements = make([]events.Placement, k)
		for i := range t.Placements {
			p := &t.Placements[i]
			p.Node = r.shared()
			if g, isNil := r.count(1); !isNil {
				p.GPUs = make([]string, g)
				for j := range p.GPUs {
					p.GPUs[j] = r.shared()
				}
			}
		}
	}
	t.DispatchedAt = r.time()
	t.DispatchSeq = r.uvarint()
	t.StartedAt = r.time()
	t.FirstStarted = r.time()
	t.EndedAt = r.time()
	t.Node = r.shared()
	t.PID = r.int()
	t.Checkpoint = r.inline()
	t.CheckpointAt = r.time()
	t.ResumeFrom = r.inline()
	t.Preemptions = r.int()
	t.PreemptFor = r.inline()
	t.LostGPUSecs = r.float()
	t.RunSeconds = r.float()
	t.ExitCode = r.int()
	t.Error = r.shared()
	t.StderrTail = r.inline()
	t.Reason = r.shared()
	if k, isNil := r.count(2); !isNil {
		t.Checklist = make(map[string]bool, k)
		for range k {
			item := r.shared()
			t.Checklist[item] = r.bool()
		}
	}
	t.LastSeq = r.uvarint()
	t.CheckpointStep = r.varint()
	t.ResumeStep = r.varint()
	t.PreemptPolicy = r.shared()
	t.PreemptAt = r.time()
	t.ProgressStep = r.varint()
	t.ProgressTotal = r.varint()
	t.ProgressFraction = r.float()
	t.ProgressAt = r.time()
	if r.version < 5 {
		upcastReasonCode(t)
		return
	}
	t.Deadline = r.time()
	if k, isNil := r.count(1); !isNil {
		t.Notify = make([]string, k)
		for i := range t.Notify {
			t.Notify[i] = r.inline()
		}
	}
	if r.version < 6 {
		upcastReasonCode(t)
		return
	}
	t.ReasonCode = r.shared()
}

// upcastReasonCode gives a task of a snapshot written before reason codes
// the one code a reader decides on, from the text of its reason: the one
// place where that text is read (the log itself is folded with codes).
func upcastReasonCode(t *Task) {
	if t.State == Preempting && strings.HasPrefix(t.Reason, notStartedPrefix) {
		t.ReasonCode = ReasonNotStarted
	}
}

// rebuildIndexes computes Owner, Idem and every unexported index from
// the tasks (tasks holds every task of s.Tasks, once) and s.Nodes alone,
// with the functions Apply keeps them with (track, the queue's add,
// buildNodeIndex); the state's own index fields and the tasks' index flags
// are reset first. IndexMismatch checks the result. Where the fold's
// order depended on history, the rebuilt order is deterministic instead:
// holders by SubmitSeq (EachActive promises no order), the queue by its
// definition.
func (s *State) rebuildIndexes(tasks []Task) {
	s.Owner = map[string]string{}
	s.q = queueIndex{}
	s.live = map[string]*Task{}
	s.hold, s.nx, s.team, s.pre, s.victims, s.yielded, s.vic = nil, nil, nil, nil, 0, 0, victimNodes{}
	s.ends = endIndex{clock: s.LastTime.Round(0)}
	var queued, holders []*Task
	keyed, keyBytes := 0, 0
	for i := range tasks {
		t := &tasks[i]
		t.qgen, t.inLive, t.inHold, t.holdAt, t.held, t.inPre, t.inVictim, t.inYielded = 0, false, false, 0, 0, false, false, false
		t.vicPls = nil
		t.endIn, t.endAt = endNone, 0
		if t.HoldsGPUs() {
			holders = append(holders, t)
		} else {
			s.track(t)
		}
		if t.State == Queued {
			queued = append(queued, t)
		}
		if t.IdempotencyKey != "" {
			keyed++
			keyBytes += len(t.Team) + 1 + len(t.IdempotencyKey)
		}
	}
	// The first submission of a key keeps it (submitted). The keys are
	// slices of one string.
	arena := make([]byte, 0, keyBytes)
	for i := range tasks {
		if t := &tasks[i]; t.IdempotencyKey != "" {
			arena = append(append(append(arena, t.Team...), 0), t.IdempotencyKey...)
		}
	}
	keys := string(arena)
	s.Idem = make(map[string]string, keyed)
	for i := range tasks {
		t := &tasks[i]
		if t.IdempotencyKey == "" {
			continue
		}
		n := len(t.Team) + 1 + len(t.IdempotencyKey)
		k := keys[:n]
		keys = keys[n:]
		if cur, ok := s.Idem[k]; !ok || s.Tasks[cur].SubmitSeq > t.SubmitSeq {
			s.Idem[k] = t.ID
		}
	}
	slices.SortFunc(holders, func(a, b *Task) int { return cmpSeq(a.SubmitSeq, b.SubmitSeq) })
	for _, t := range holders {
		s.track(t)
		for _, p := range t.Placements {
			for _, g := range p.GPUs {
				s.Owner[g] = t.ID
			}
		}
	}
	// In queue order, so that every add appends.
	sort.Slice(queued, func(i, j int) bool { return inLine(queued[i], queued[j]) })
	for _, t := range queued {
		s.q.add(t)
	}
	s.buildCells()
	s.nx = buildNodeIndex(s)
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// snapWriter appends a snapshot's body.
type snapWriter struct {
	b   []byte
	ids map[string]uint64 // shared strings written so far → their number
}

func (w *snapWriter) uvarint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *snapWriter) varint(v int64)   { w.b = binary.AppendVarint(w.b, v) }

// float writes the bits byte-reversed, so that round numbers (zero
// mantissa bytes) take few bytes.
func (w *snapWriter) float(f float64) { w.uvarint(bits.ReverseBytes64(math.Float64bits(f))) }

func (w *snapWriter) bool(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}

// count writes a length, telling a nil slice or map (0) from an empty one.
func (w *snapWriter) count(n int, isNil bool) {
	if isNil {
		w.uvarint(0)
		return
	}
	w.uvarint(uint64(n) + 1)
}

func (w *snapWriter) inline(s string) {
	w.uvarint(uint64(len(s)))
	w.b = append(w.b, s...)
}

// shared writes 0 for "", 1 and the string the first time, then 2 + its
// number.
func (w *snapWriter) shared(s string) {
	if s == "" {
		w.uvarint(0)
		return
	}
	if id, ok := w.ids[s]; ok {
		w.uvarint(id + 2)
		return
	}
	w.ids[s] = uint64(len(w.ids))
	w.uvarint(1)
	w.inline(s)
}

// time writes seconds since year 1 (0 and 0 for the zero time), the
// nanoseconds and the zone offset in seconds.
func (w *snapWriter) time(t time.Time) {
	if t.IsZero() {
		w.varint(0)
		w.uvarint(0)
		return
	}
	_, off := t.Zone()
	w.varint(t.Unix() - zeroUnix)
	w.uvarint(uint64(t.Nanosecond())<<1 | b2u(off != 0))
	if off != 0 {
		w.varint(int64(off))
	}
}

// zeroUnix is the Unix time of time.Time{} (year 1).
var zeroUnix = time.Time{}.Unix()

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// snapReader reads a body; the first error sticks and every later read
// returns zero values.
type snapReader struct {
	version uint32 // the snapshot's format
	s       string
	i       int
	err     error
	table   []string // shared strings read so far
}

func (r *snapReader) fail(what string) {
	if r.err == nil {
		r.err = errors.New(what)
	}
	r.i = len(r.s)
}

func (r *snapReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	var v uint64
	var shift uint
	for i := r.i; i < len(r.s) && shift < 64; i++ {
		c := r.s[i]
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			r.i = i + 1
			return v
		}
		shift += 7
	}
	r.fail(fmt.Sprintf("bad varint at byte %d", r.i))
	return 0
}

func (r *snapReader) varint() int64 {
	u := r.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (r *snapReader) int() int {
	v := r.varint()
	if int64(int(v)) != v {
		r.fail("integer out of range")
		return 0
	}
	return int(v)
}

func (r *snapReader) float() float64 { return math.Float64frombits(bits.ReverseBytes64(r.uvarint())) }

func (r *snapReader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.i >= len(r.s) {
		r.fail("truncated")
		return 0
	}
	c := r.s[r.i]
	r.i++
	return c
}

func (r *snapReader) bool() bool {
	switch r.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	r.fail("bad bool")
	return false
}

// length reads a count of items that take at least min bytes each; a
// count the rest of the body cannot hold is corrupt (so a bad count
// never allocates much).
func (r *snapReader) length(min int) int {
	n := r.uvarint()
	if n > uint64(len(r.s)-r.i)/uint64(min) {
		r.fail(fmt.Sprintf("count %d at byte %d exceeds the body", n, r.i))
		return 0
	}
	return int(n)
}

// count reads what snapWriter.count wrote; as in length, a count the rest
// of the body cannot hold is corrupt.
func (r *snapReader) count(min int) (n int, isNil bool) {
	k := r.uvarint()
	if k == 0 || r.err != nil {
		return 0, true
	}
	if k-1 > uint64(len(r.s)-r.i)/uint64(min) {
		r.fail(fmt.Sprintf("count %d at byte %d exceeds the body", k-1, r.i))
		return 0, true
	}
	return int(k - 1), false
}

func (r *snapReader) inline() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.s)-r.i) {
		r.fail("string past the end")
		return ""
	}
	s := r.s[r.i : r.i+int(n)]
	r.i += int(n)
	return s
}

func (r *snapReader) shared() string {
	switch k := r.uvarint(); {
	case k == 0:
		return ""
	case k == 1:
		s := r.inline()
		r.table = append(r.table, s)
		return s
	case k-2 < uint64(len(r.table)):
		return r.table[k-2]
	}
	r.fail("unknown shared string")
	return ""
}

func (r *snapReader) time() time.Time {
	sec := r.varint()
	ns := r.uvarint()
	if r.err != nil || sec == 0 && ns == 0 {
		return time.Time{}
	}
	off := int64(0)
	if ns&1 != 0 {
		off = r.varint()
	}
	ns >>= 1
	if ns >= 1e9 || off < -24*3600 || off > 24*3600 {
		r.fail("bad time")
		return time.Time{}
	}
	t := time.Unix(sec+zeroUnix, int64(ns)).UTC()
	if off != 0 {
		t = t.In(time.FixedZone("", int(off)))
	}
	return t
}
