package notifier

import (
	"context"
	"sort"
	"strings"
	"sync"
)

// Mem is a Store in memory: the tests' double of KV, held to the same
// conformance suite (nothing survives a restart of the process).
type Mem struct {
	mu     sync.Mutex
	cursor *uint64
	keys   map[string]Delivery
	events map[string]bool
}

var _ Store = (*Mem)(nil)

// NewMem returns an empty Mem.
func NewMem() *Mem { return &Mem{keys: map[string]Delivery{}, events: map[string]bool{}} }

func (m *Mem) Cursor(context.Context) (uint64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cursor == nil {
		return 0, false, nil
	}
	return *m.cursor, true, nil
}

func (m *Mem) SetCursor(_ context.Context, seq uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cursor = &seq
	return nil
}

func (m *Mem) Recorded(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.events[id], nil
}

func (m *Mem) Record(_ context.Context, id string, ds []Delivery) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range ds {
		m.keys[d.key("p")] = d
	}
	m.events[id] = true
	return nil
}

func (m *Mem) list(prefix string) []Delivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Delivery
	for k, d := range m.keys {
		if strings.HasPrefix(k, prefix+".") {
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].NoticeID < out[j].NoticeID
	})
	return out
}

func (m *Mem) Pending(context.Context) ([]Delivery, error)     { return m.list("p"), nil }
func (m *Mem) DeadLetters(context.Context) ([]Delivery, error) { return m.list("x"), nil }

func (m *Mem) Retry(_ context.Context, d Delivery) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys[d.key("p")] = d
	return nil
}

func (m *Mem) Delivered(_ context.Context, d Delivery) error { return m.settle(d, "s") }
func (m *Mem) Dead(_ context.Context, d Delivery) error      { return m.settle(d, "x") }

// settle keeps d under the kind ("s" sent, "x" dead) and drops it from
// the pending ones.
func (m *Mem) settle(d Delivery, kind string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys[d.key(kind)] = d
	delete(m.keys, d.key("p"))
	return nil
}
