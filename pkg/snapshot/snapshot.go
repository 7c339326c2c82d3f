// Package snapshot keeps services' state snapshots beside the event log,
// in a JetStream object store (events.SnapshotStoreIn; gpuq_snapshots for the
// scheduler, events.SnapshotBucketOf(service) for the others): one
// object per service, named after it ("scheduler"), replaced by each new
// snapshot. A snapshot is a cache of a fold, never the truth: it records
// the log sequence it covers, and a service loads it, folds the log from
// the next sequence, and folds from the start whenever a snapshot is
// missing or does not check out.
//
// An object is a frame — the magic "gpuqsnap", the frame format, the
// sequence covered, the CRC-32C of the parts and the parts themselves,
// each a service-defined blob such as domain.EncodeSnapshot's — compressed
// with S2. The object's metadata says where it stands in the log (Mark:
// the sequence, and the subject and envelope id of the record there), so
// that Load refuses, before fetching it, a snapshot beyond the log's last
// sequence (a log truncated or restored from an older backup) or of
// another log.
package snapshot

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"

	"github.com/klauspost/compress/s2"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/events"
)

// Format is the frame format this build writes and reads.
const Format = 1

// DefaultEvery is how many applied events separate a service's snapshots
// by default (the scheduler's GPUQ_SNAPSHOT_EVERY): a restart after a
// crash folds at most this many events after its snapshot, one after a
// clean stop none.
const DefaultEvery = 10_000

const (
	frameHeader = 24 // magic, format, seq, crc
	metaSeq     = "gpuq-seq"
	metaSubject = "gpuq-subject"
	metaID      = "gpuq-id"
	metaFormat  = "gpuq-format"
)

var (
	magic      = [8]byte{'g', 'p', 'u', 'q', 's', 'n', 'a', 'p'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// Mark is where a snapshot stands in the log: the sequence it covers, and
// the subject and envelope id of the record there. Load checks them
// against the log, so that a snapshot of another log (a stream deleted
// and created again, or restored from a backup and appended to since) is
// refused even where its sequence exists.
type Mark struct {
	Seq         uint64
	Subject, ID string
}

// MarkOf is the mark of a snapshot taken right after r was applied.
func MarkOf(r events.Record) Mark { return Mark{Seq: r.Seq, Subject: r.Subject, ID: r.Envelope.ID} }

// ErrNone is Load's answer when there is no snapshot to use; Load's other
// errors say why a snapshot was refused (the caller logs them and folds
// from the start).
var ErrNone = errors.New("snapshot: none")

// Store is the snapshot bucket.
type Store struct {
	obj js.ObjectStore
}

// Open creates or updates the scheduler's bucket with the given replicas
// (0: 1).
func Open(ctx context.Context, j js.JetStream, replicas int) (*Store, error) {
	return OpenBucket(ctx, j, events.SnapshotBucket, replicas)
}

// OpenBucket creates the named snapshot bucket (events.SnapshotBucketOf a
// service) or raises its replicas (never lowers them; 0: 1).
func OpenBucket(ctx context.Context, j js.JetStream, bucket string, replicas int) (*Store, error) {
	obj, err := events.EnsureObjectStore(ctx, j, events.SnapshotStoreIn(bucket, replicas))
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return &Store{obj: obj}, nil
}

// Save stores parts as the snapshot called name, covering the log up to
// at, in place of the previous one. It returns the bytes stored. A
// reader sees the previous snapshot or this one, never a mix.
func (s *Store) Save(ctx context.Context, name string, at Mark, parts ...[]byte) (int, error) {
	data := s2.Encode(nil, Frame(at.Seq, parts...))
	meta := js.ObjectMeta{Name: name, Description: "gpuq state snapshot",
		Metadata: map[string]string{metaSeq: strconv.FormatUint(at.Seq, 10), metaSubject: at.Subject, metaID: at.ID,
			metaFormat: strconv.Itoa(Format)}}
	if _, err := s.obj.Put(ctx, meta, bytes.NewReader(data)); err != nil {
		return 0, fmt.Errorf("snapshot: put %s: %w", name, err)
	}
	return len(data), nil
}

// Load returns the snapshot called name and where it stands, if it
// belongs to l: it covers at most l's last sequence, and l's record there
// is the one it was taken after (Mark). ErrNone: there is none; any other
// error: there is one, and it was refused (unknown format, another log,
// damage) — the caller folds from the start.
func (s *Store) Load(ctx context.Context, name string, l events.Log) (Mark, [][]byte, error) {
	info, err := s.obj.GetInfo(ctx, name)
	if errors.Is(err, js.ErrObjectNotFound) {
		return Mark{}, nil, ErrNone
	}
	if err != nil {
		return Mark{}, nil, fmt.Errorf("snapshot: %s: %w", name, err)
	}
	if f := info.Metadata[metaFormat]; f != strconv.Itoa(Format) {
		return Mark{}, nil, fmt.Errorf("snapshot: %s: format %q, this build reads %d", name, f, Format)
	}
	seq, err := strconv.ParseUint(info.Metadata[metaSeq], 10, 64)
	if err != nil {
		return Mark{}, nil, fmt.Errorf("snapshot: %s: sequence %q", name, info.Metadata[metaSeq])
	}
	at := Mark{Seq: seq, Subject: info.Metadata[metaSubject], ID: info.Metadata[metaID]}
	if err := check(ctx, l, at); err != nil {
		return Mark{}, nil, fmt.Errorf("snapshot: %s: %w", name, err)
	}
	data, err := s.obj.GetBytes(ctx, name) // checks the object's SHA-256
	if err != nil {
		return Mark{}, nil, fmt.Errorf("snapshot: get %s: %w", name, err)
	}
	raw, err := s2.Decode(nil, data)
	if err != nil {
		return Mark{}, nil, fmt.Errorf("snapshot: %s: %w", name, err)
	}
	fseq, parts, err := Unframe(raw)
	if err != nil {
		return Mark{}, nil, fmt.Errorf("snapshot: %s: %w", name, err)
	}
	if fseq != seq {
		return Mark{}, nil, fmt.Errorf("snapshot: %s: frame covers %d, metadata says %d", name, fseq, seq)
	}
	return at, parts, nil
}

var errFound = errors.New("found")

// check reports whether at is a place in l: l reaches at.Seq and holds
// the record at.ID there.
func check(ctx context.Context, l events.Log, at Mark) error {
	last, err := l.LastSeq(ctx)
	if err != nil {
		return err
	}
	if at.Seq > last {
		return fmt.Errorf("covers sequence %d, beyond the log's last %d (a truncated or restored log)", at.Seq, last)
	}
	if at.Seq == 0 {
		return nil
	}
	var got Mark
	if g, ok := l.(events.Getter); ok { // one direct get, no consumer
		if m, err := g.Get(ctx, at.Seq); err == nil {
			if r, err := events.Decode(m); err == nil {
				got = MarkOf(r)
			}
			if got == at {
				return nil
			}
		}
	}
	if _, err := l.Read(ctx, at.Seq, at.Subject, func(m events.Stored) error {
		r, err := events.Decode(m)
		if err == nil {
			got = MarkOf(r)
		}
		return errFound
	}); err != nil && !errors.Is(err, errFound) {
		return err
	}
	if got != at {
		return fmt.Errorf("was taken after record %d %s (id %s), the log has %d %s (id %s) there: another log", at.Seq, at.Subject, at.ID, got.Seq, got.Subject, got.ID)
	}
	return nil
}

// Frame writes parts with the sequence they cover: the 24-byte header
// (magic, Format as uint32, seq as uint64, then as uint32 the CRC-32C of
// the format, seq and what follows the header; little-endian), then the
// number of parts and each part's length (uvarints) and bytes.
func Frame(seq uint64, parts ...[]byte) []byte {
	n := frameHeader + binary.MaxVarintLen64*(len(parts)+1)
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, frameHeader, n)
	b = binary.AppendUvarint(b, uint64(len(parts)))
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	copy(b, magic[:])
	binary.LittleEndian.PutUint32(b[8:], Format)
	binary.LittleEndian.PutUint64(b[12:], seq)
	binary.LittleEndian.PutUint32(b[20:], frameCRC(b))
	return b
}

// frameCRC covers the format, the sequence and everything after the
// header.
func frameCRC(b []byte) uint32 {
	return crc32.Update(crc32.Checksum(b[8:20], castagnoli), castagnoli, b[frameHeader:])
}

// Unframe reads what Frame wrote; the parts are slices of b.
func Unframe(b []byte) (uint64, [][]byte, error) {
	if len(b) < frameHeader || [8]byte(b[:8]) != magic {
		return 0, nil, errors.New("not a snapshot frame")
	}
	if f := binary.LittleEndian.Uint32(b[8:]); f != Format {
		return 0, nil, fmt.Errorf("frame format %d, this build reads %d", f, Format)
	}
	seq := binary.LittleEndian.Uint64(b[12:])
	if binary.LittleEndian.Uint32(b[20:]) != frameCRC(b) {
		return 0, nil, errors.New("frame checksum mismatch")
	}
	rest := b[frameHeader:]
	k, w := binary.Uvarint(rest)
	if w <= 0 || k > uint64(len(rest)) {
		return 0, nil, errors.New("bad part count")
	}
	rest = rest[w:]
	parts := make([][]byte, 0, k)
	for range k {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return 0, nil, errors.New("part past the end")
		}
		parts = append(parts, rest[w:w+int(n)])
		rest = rest[w+int(n):]
	}
	if len(rest) != 0 {
		return 0, nil, errors.New("bytes after the last part")
	}
	return seq, parts, nil
}
