package submitter

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// model is the read model: the fold of the log, with a way to wait until the
// fold has reached a sequence. All access to st goes through mu.
type model struct {
	mu      sync.Mutex
	st      *domain.State
	applied uint64        // last sequence folded, undecodable records included
	bad     int           // records the fold skipped
	changed chan struct{} // closed and replaced whenever applied advances
	logger  zerolog.Logger
}

func newModel(logger zerolog.Logger) *model {
	return &model{st: domain.NewState(), changed: make(chan struct{}), logger: logger}
}

// apply folds one stored message. Messages at or below the applied sequence
// (a redelivery after a re-follow) are ignored. A record the fold cannot
// apply is skipped, logged and counted exactly as in every other service
// (domain.State.Apply), and the fold advances past it, so waiters are not
// stuck behind it.
func (m *model) apply(s events.Stored) {
	r := events.DecodeRecord(s)
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.Seq <= m.applied {
		return
	}
	if why := m.st.Apply(r); why != "" {
		m.bad++
		m.logger.Warn().Uint64("seq", s.Seq).Str("subject", s.Subject).Str("reason", why).Msg("record skipped")
	}
	m.applied = s.Seq
	m.signal()
}

// advanceTo records that every sequence up to seq has been seen (e.g. the
// end of the initial read), even if no message carried it.
func (m *model) advanceTo(seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if seq > m.applied {
		m.applied = seq
		m.signal()
	}
}

func (m *model) signal() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// seq is the last sequence folded.
func (m *model) seq() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.applied
}

// waitFor blocks until the fold has reached seq, ctx ends, or bound passes
// (an *opError with status 503).
func (m *model) waitFor(ctx context.Context, seq uint64, bound time.Duration) error {
	var timeout <-chan time.Time
	for {
		m.mu.Lock()
		at, ch := m.applied, m.changed
		m.mu.Unlock()
		if at >= seq {
			return nil
		}
		if timeout == nil {
			t := time.NewTimer(bound)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return &opError{Status: http.StatusServiceUnavailable,
				Msg: fmt.Sprintf("read model is behind the log (folded up to %d, log at %d); try again", at, seq)}
		}
	}
}

// read runs fn with the state locked. fn must not block and must not keep
// pointers into the state after it returns.
func (m *model) read(fn func(st *domain.State)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fn(m.st)
}
