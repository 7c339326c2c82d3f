package events

import (
	"context"
	"fmt"
	"slices"
	"time"

	js "github.com/nats-io/nats.go/jetstream"
)

// Stream and bucket names.
const (
	StreamName       = "GPUQ_EVENTS"
	AdviceStreamName = "GPUQ_ADVICE"
	HeartbeatBucket  = "gpuq_heartbeats"
	LeaderBucket     = "gpuq_leader"
	SnapshotBucket   = "gpuq_snapshots"
	// The notifier's buckets (services/notifier): its cursor in the log,
	// and its notices and deliveries.
	NotifyStateBucket    = "gpuq_notify_state"
	NotifyDeliveryBucket = "gpuq_notify_deliveries"
	NotifyDestBucket     = "gpuq_notify_destinations"
)

// DefaultDedupeWindow is how long a message id (a CI idempotency key)
// de-duplicates at the stream level. The submitter also remembers every
// idempotency key in its fold, so a retry after the window still finds the
// original task; the window covers the race between two concurrent retries.
const DefaultDedupeWindow = 24 * time.Hour

// AuditStream is the definition of the immutable event log: file storage,
// no delete, no purge, no rollup, no limits, de-duplication window dedupe.
func AuditStream(name string, replicas int, dedupe time.Duration) js.StreamConfig {
	if name == "" {
		name = StreamName
	}
	if replicas <= 0 {
		replicas = 1
	}
	if dedupe <= 0 {
		dedupe = DefaultDedupeWindow
	}
	return js.StreamConfig{
		Name:        name,
		Description: "gpuq audit log: every fact, append-only",
		Subjects:    []string{TaskPrefix + ">", NodePrefix + ">"},
		Retention:   js.LimitsPolicy,
		Storage:     js.FileStorage,
		Replicas:    replicas,
		Duplicates:  dedupe,
		DenyDelete:  true,
		DenyPurge:   true,
		AllowRollup: false,
		Discard:     js.DiscardNew,
		// Direct gets by sequence: readers read the log without creating
		// a consumer (pkg/events/jetstream direct.go).
		AllowDirect: true,
	}
}

// AdviceStream keeps the latest advice per task. It is derived data, not
// audit: one message per subject, older ones replaced.
func AdviceStream(replicas int) js.StreamConfig {
	if replicas <= 0 {
		replicas = 1
	}
	return js.StreamConfig{
		Name:              AdviceStreamName,
		Description:       "gpuq advice: latest estimate, reason and action per task",
		Subjects:          []string{AdvicePrefix + ">"},
		Storage:           js.FileStorage,
		Replicas:          replicas,
		MaxMsgsPerSubject: 1,
		MaxAge:            30 * 24 * time.Hour,
	}
}

// LeaderKV defines the scheduler's leader lease bucket: one key, expiring
// after the lease TTL.
func LeaderKV(ttl time.Duration, replicas int) js.KeyValueConfig {
	if replicas <= 0 {
		replicas = 1
	}
	return js.KeyValueConfig{Bucket: LeaderBucket, TTL: ttl, History: 1, Replicas: replicas,
		Description: "gpuq scheduler leader lease"}
}

// Replicated wraps the error of creating or updating a stream or bucket
// with its name and replica count: a replica count a single server cannot
// give, or a change NATS refuses, says which and how many.
func Replicated(what string, replicas int, err error) error {
	if err == nil {
		return nil
	}
	if replicas <= 0 {
		replicas = 1
	}
	return fmt.Errorf("events: %s with %d replicas (--stream-replicas): %w", what, replicas, err)
}

// HeartbeatKV defines the agents' heartbeat bucket: one key per node, the
// latest beat. Liveness is judged from the beat's time by the scheduler's
// node timeout; the TTL only clears nodes long gone.
func HeartbeatKV(replicas int) js.KeyValueConfig {
	if replicas <= 0 {
		replicas = 1
	}
	return js.KeyValueConfig{Bucket: HeartbeatBucket, TTL: 10 * time.Minute, History: 1, Replicas: replicas,
		Description: "gpuq agent heartbeats"}
}

// SnapshotBucketOf is the snapshot store of a service other than the
// scheduler (which keeps SnapshotBucket): one store per service, so that
// NATS permissions can let each write its own and nobody else's.
func SnapshotBucketOf(service string) string { return SnapshotBucket + "_" + service }

// SnapshotStoreIn is the configuration of the snapshot store bucket.
func SnapshotStoreIn(bucket string, replicas int) js.ObjectStoreConfig {
	if replicas <= 0 {
		replicas = 1
	}
	return js.ObjectStoreConfig{Bucket: bucket, Storage: js.FileStorage, Replicas: replicas,
		Description: "gpuq state snapshots: a cache of folds of GPUQ_EVENTS"}
}

// Streams behind gpuq's buckets and object store (JetStream's naming).
const (
	kvStreamPrefix  = "KV_"
	objStreamPrefix = "OBJ_"
)

// EnsureStream creates the stream cfg, or updates it where it differs in
// what gpuq sets: fewer replicas than cfg (raised; more are kept, never
// lowered), another de-duplication window, other subjects. A stream that
// already fits is used as it is, without an update: an update needs the
// stream's peers to be current, which they are not for a while after a
// server of the cluster died, and a service restarting then must still
// start. The error names the stream and the replica count.
func EnsureStream(ctx context.Context, j js.JetStream, cfg js.StreamConfig) (js.Stream, error) {
	if s, err := j.Stream(ctx, cfg.Name); err == nil {
		have := s.CachedInfo().Config
		if have.Replicas > cfg.Replicas {
			cfg.Replicas = have.Replicas
		}
		if have.Replicas == cfg.Replicas && have.Duplicates == cfg.Duplicates && slices.Equal(have.Subjects, cfg.Subjects) &&
			have.MaxAge == cfg.MaxAge {
			if have.AllowDirect || !cfg.AllowDirect {
				return s, nil
			}
			// A stream made before direct gets were asked for: turned on
			// when this user may update the stream (the admin, gpuq dev).
			// Otherwise it is used as it is, and readers read it one
			// message at a time (the admin turns direct gets on with
			// `nats stream edit --allow-direct`).
			if u, err := j.UpdateStream(ctx, cfg); err == nil {
				return u, nil
			}
			return s, nil
		}
	}
	s, err := j.CreateOrUpdateStream(ctx, cfg)
	return s, Replicated("stream "+cfg.Name, cfg.Replicas, err)
}

// EnsureKV is EnsureStream for a KV bucket: created, or updated where it
// has fewer replicas or another TTL; otherwise used as it is.
func EnsureKV(ctx context.Context, j js.JetStream, cfg js.KeyValueConfig) (js.KeyValue, error) {
	if kv, err := j.KeyValue(ctx, cfg.Bucket); err == nil {
		if s, err := j.Stream(ctx, kvStreamPrefix+cfg.Bucket); err == nil {
			have := s.CachedInfo().Config
			if have.Replicas >= max(cfg.Replicas, 1) && have.MaxAge == cfg.TTL {
				return kv, nil
			}
			cfg.Replicas = max(cfg.Replicas, have.Replicas)
		}
	}
	kv, err := j.CreateOrUpdateKeyValue(ctx, cfg)
	return kv, Replicated("bucket "+cfg.Bucket, cfg.Replicas, err)
}

// EnsureObjectStore is EnsureKV for an object store.
func EnsureObjectStore(ctx context.Context, j js.JetStream, cfg js.ObjectStoreConfig) (js.ObjectStore, error) {
	if obj, err := j.ObjectStore(ctx, cfg.Bucket); err == nil {
		if s, err := j.Stream(ctx, objStreamPrefix+cfg.Bucket); err == nil {
			have := s.CachedInfo().Config
			if have.Replicas >= max(cfg.Replicas, 1) {
				return obj, nil
			}
		}
	}
	obj, err := j.CreateOrUpdateObjectStore(ctx, cfg)
	return obj, Replicated("object store "+cfg.Bucket, cfg.Replicas, err)
}
