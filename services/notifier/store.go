package notifier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/events"
)

// Buckets of the notifier (JetStream KV, replicated like the log).
const (
	// StateBucket holds the cursor: the log sequence up to which notices
	// are recorded. No TTL: a restart must never decide the past again.
	StateBucket = events.NotifyStateBucket
	// DeliveryBucket holds one key per notice recorded (e.<id>), per
	// delivery pending (p.<id>.<dest>), delivered (s.<id>.<dest>) and
	// dead (x.<id>.<dest>: gpuq notify failed). Its TTL (DeliveryTTL)
	// outlasts the retry horizon, so every key lives as long as a
	// redelivery could matter, and the dead-letter list a week.
	DeliveryBucket = events.NotifyDeliveryBucket
	// DeliveryTTL is how long DeliveryBucket keeps a key.
	DeliveryTTL = 7 * 24 * time.Hour
)

// Delivery is one notice to one destination, as recorded.
type Delivery struct {
	NoticeID  string          `json:"notice_id"`
	Type      string          `json:"type"`
	TaskID    string          `json:"task_id"`
	Dest      string          `json:"dest"` // Destination.ID
	URL       string          `json:"url"`
	Body      json.RawMessage `json:"body,omitempty"`
	Created   time.Time       `json:"created"`
	Attempts  int             `json:"attempts"`
	Next      time.Time       `json:"next"`
	LastError string          `json:"last_error,omitempty"`
	order     uint64          // the order recorded, in this process
}

func (d Delivery) key(prefix string) string { return prefix + "." + d.NoticeID + "." + d.Dest }

// Store is where the notifier records what it decided and delivered.
type Store interface {
	// Cursor is the log sequence up to which notices are recorded
	// (found false: never set).
	Cursor(ctx context.Context) (seq uint64, found bool, err error)
	SetCursor(ctx context.Context, seq uint64) error
	// Recorded reports whether a notice with this id was recorded.
	Recorded(ctx context.Context, id string) (bool, error)
	// Record records the notice's deliveries as pending, then the notice.
	Record(ctx context.Context, id string, ds []Delivery) error
	// Pending lists the pending deliveries, oldest first.
	Pending(ctx context.Context) ([]Delivery, error)
	// Retry records a failed attempt (Attempts, Next, LastError).
	Retry(ctx context.Context, d Delivery) error
	// Delivered marks a delivery done; Dead moves it to the dead letters.
	Delivered(ctx context.Context, d Delivery) error
	Dead(ctx context.Context, d Delivery) error
	// DeadLetters lists the dead deliveries, oldest first.
	DeadLetters(ctx context.Context) ([]Delivery, error)
}

// KV is the Store on JetStream KV buckets.
type KV struct {
	state, dlv js.KeyValue
}

var _ Store = (*KV)(nil)

// OpenKV creates (or opens) the notifier's buckets with replicas.
func OpenKV(ctx context.Context, j js.JetStream, replicas int) (*KV, error) {
	replicas = max(replicas, 1)
	state, err := events.EnsureKV(ctx, j, js.KeyValueConfig{Bucket: StateBucket, History: 1, Replicas: replicas, Storage: js.FileStorage,
		Description: "gpuq notifier: the log sequence up to which notices are recorded"})
	if err != nil {
		return nil, err
	}
	dlv, err := events.EnsureKV(ctx, j, js.KeyValueConfig{Bucket: DeliveryBucket, History: 1, Replicas: replicas, Storage: js.FileStorage, TTL: DeliveryTTL,
		Description: "gpuq notifier: notices recorded, deliveries pending, delivered and dead"})
	if err != nil {
		return nil, err
	}
	return &KV{state: state, dlv: dlv}, nil
}

const cursorKey = "cursor"

func (s *KV) Cursor(ctx context.Context) (uint64, bool, error) {
	e, err := s.state.Get(ctx, cursorKey)
	if errors.Is(err, js.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	n, err := strconv.ParseUint(string(e.Value()), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("notifier cursor %q: %w", e.Value(), err)
	}
	return n, true, nil
}

func (s *KV) SetCursor(ctx context.Context, seq uint64) error {
	_, err := s.state.Put(ctx, cursorKey, []byte(strconv.FormatUint(seq, 10)))
	return err
}

func (s *KV) Recorded(ctx context.Context, id string) (bool, error) {
	_, err := s.dlv.Get(ctx, "e."+id)
	if errors.Is(err, js.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (s *KV) Record(ctx context.Context, id string, ds []Delivery) error {
	for _, d := range ds {
		b, _ := json.Marshal(d)
		if _, err := s.dlv.Put(ctx, d.key("p"), b); err != nil {
			return err
		}
	}
	_, err := s.dlv.Put(ctx, "e."+id, []byte(time.Now().UTC().Format(time.RFC3339Nano)))
	return err
}

func (s *KV) list(ctx context.Context, prefix string) ([]Delivery, error) {
	l, err := s.dlv.ListKeysFiltered(ctx, prefix+".>")
	if err != nil {
		if errors.Is(err, js.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, err
	}
	var out []Delivery
	for k := range l.Keys() {
		e, err := s.dlv.Get(ctx, k)
		if errors.Is(err, js.ErrKeyNotFound) {
			continue // delivered meanwhile
		}
		if err != nil {
			_ = l.Stop()
			return nil, err
		}
		var d Delivery
		if json.Unmarshal(e.Value(), &d) != nil || d.NoticeID == "" || d.Dest == "" {
			continue // not ours to read
		}
		out = append(out, d)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

func (s *KV) Pending(ctx context.Context) ([]Delivery, error) { return s.list(ctx, "p") }

func (s *KV) DeadLetters(ctx context.Context) ([]Delivery, error) { return s.list(ctx, "x") }

func (s *KV) Retry(ctx context.Context, d Delivery) error {
	b, _ := json.Marshal(d)
	_, err := s.dlv.Put(ctx, d.key("p"), b)
	return err
}

func (s *KV) Delivered(ctx context.Context, d Delivery) error {
	if _, err := s.dlv.Put(ctx, d.key("s"), []byte(strconv.Itoa(d.Attempts))); err != nil {
		return err
	}
	return s.dlv.Delete(ctx, d.key("p"))
}

func (s *KV) Dead(ctx context.Context, d Delivery) error {
	b, _ := json.Marshal(d)
	if _, err := s.dlv.Put(ctx, d.key("x"), b); err != nil {
		return err
	}
	return s.dlv.Delete(ctx, d.key("p"))
}
