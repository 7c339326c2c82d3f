// Package service is the one runtime every gpuq service folds the log
// with: it reads the log into a domain.State, follows it, re-opens a
// failed follow with backoff (a NATS reconnect, a server restart), hands
// each folded record and each batch to the service's reaction, skips
// every record the fold cannot apply in exactly the same way, and keeps
// the counters that health checks and metrics read.
//
// A service says what to do with a fact (Hooks); the runtime does the
// rest, once. It never exits on anything a client can publish: a record
// that does not decode, has an unknown type or version, is too large,
// carries invalid data or is impossible in its task's state is logged
// once with its sequence and subject, counted, and still counts for the
// expected sequence of the task its subject names (domain.State.Apply).
package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// Hooks are a service's reactions. Every hook is optional.
type Hooks struct {
	// Applied is called for every record right after it is folded, with
	// the fold's lock held and the reason it was skipped ("" when it was
	// applied). It must not block.
	Applied func(st *domain.State, r events.Record, skipped string)
	// CaughtUp is called once, after the initial read, before following.
	CaughtUp func(ctx context.Context) error
	// React is called, without the lock, after each batch of followed
	// records and at every Tick. An error ends Run with that error (the
	// service's own decision, e.g. a lost lease); nothing in the log can
	// cause one.
	React func(ctx context.Context) error
	// Tick is how often React runs without new records (0: only after
	// records).
	Tick time.Duration
	// Wake, when set, runs React whenever it receives (the agent's
	// process exits).
	Wake <-chan struct{}
	// Snapshots, when set, keeps the fold in the snapshot store: the
	// runtime notes every record folded (Saw), offers a snapshot under
	// the lock once caught up and after each batch, before CaughtUp and
	// React run (Take), and writes a last one when Run returns (Final).
	// A service registers its snapshots here once; it restores its state
	// with Snapshots.Restore before New.
	Snapshots *Snapshots
	// Own encodes the service's own parts of a snapshot (the scheduler's
	// predictor), called under the fold's lock; nil: none.
	Own func() [][]byte
}

// Skip is one record the fold did not apply.
type Skip struct {
	Seq     uint64 `json:"seq"`
	Subject string `json:"subject"`
	Reason  string `json:"reason"`
}

// Counters are the runtime's figures, safe to read at any time.
type Counters struct {
	Applied    atomic.Uint64 // records folded and applied
	Skipped    atomic.Uint64 // records folded and skipped
	Reconnects atomic.Uint64 // follows re-opened after a failure (stalls included)
	Stalls     atomic.Uint64 // follows closed by the watchdog: the log moved past them, they delivered nothing
	StreamLast atomic.Uint64 // the log's last sequence when last asked
	LastTime   atomic.Int64  // the log time of the last record folded (Unix ns)
	Folded     atomic.Uint64 // the last sequence folded (Seq without the lock)
}

// Fold is a service's state and its place in the log. Every access to
// the state goes through Read or the hooks.
type Fold struct {
	name   string
	log    events.Log
	logger zerolog.Logger

	mu      sync.Mutex
	st      *domain.State
	changed chan struct{} // closed and replaced when the fold advances and a waiter took it
	waited  bool          // a WaitFor holds changed
	ready   atomic.Bool
	// StallAfter is how long a follow may wait for its next record while
	// the log already holds it before the watchdog re-opens the follow
	// (DefaultStallAfter when 0). Set it before Run.
	StallAfter time.Duration
	// Counters of this fold.
	Counters Counters
	// problem is why the last read or follow of the log could not be
	// opened (nil once one works again): health checks report it.
	problem atomic.Pointer[string]
	// SummaryEvery, when set before Run, publishes the state's summary
	// (domain.Summarize) at most this often, after a batch or a tick, for
	// the metrics to read without the lock (Summary).
	SummaryEvery time.Duration
	summary      atomic.Pointer[domain.Summary]
	summarized   time.Time
}

// Summary is the state's last published summary (nil before the first, or
// without SummaryEvery): what the metrics read, never taking the lock.
func (f *Fold) Summary() *domain.Summary { return f.summary.Load() }

// summarize publishes a summary when SummaryEvery has passed.
func (f *Fold) summarize() {
	if f.SummaryEvery <= 0 || time.Since(f.summarized) < f.SummaryEvery {
		return
	}
	f.summarized = time.Now()
	f.Read(func(st *domain.State) { f.summary.Store(st.Summarize()) })
}

// Problem is why the fold could not read or follow the log the last time
// it tried (a consumer the server refused: "maximum consumers limit
// reached", a permission), or nil when the read or follow works: a fold
// that cannot follow answers from an old state, and its health says so.
func (f *Fold) Problem() error {
	if p := f.problem.Load(); p != nil {
		return errors.New(*p)
	}
	return nil
}

// running are the folds whose Run is under way in this process, for
// Problems.
var running sync.Map // *Fold → struct{}

// Problems are the problems (Problem) of every fold running in this
// process, in no particular order: what a process's /healthz reports (one
// service, or all of them under gpuq dev).
func Problems() []error {
	var out []error
	running.Range(func(k, _ any) bool {
		if err := k.(*Fold).Problem(); err != nil {
			out = append(out, err)
		}
		return true
	})
	return out
}

// HealthzProcess answers 503 naming the problems of the folds running in
// this process (Problems), 200 "ok" otherwise: the /healthz of a service's
// metrics listener.
func HealthzProcess(w http.ResponseWriter, _ *http.Request) {
	if errs := Problems(); len(errs) > 0 {
		http.Error(w, errors.Join(errs...).Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

func (f *Fold) setProblem(what string, err error) {
	if err == nil {
		f.problem.Store(nil)
		return
	}
	msg := f.name + ": " + what + ": " + err.Error()
	f.problem.Store(&msg)
}

// New returns a fold of log named for the service, from st (a restored
// snapshot: the fold goes on at st.Seq+1) or from the start (st nil).
// A caller that passes st and folds only with CatchUp on its own
// goroutine (the simulator's driver) may read st between calls.
func New(name string, log events.Log, logger zerolog.Logger, st *domain.State) *Fold {
	if st == nil {
		st = domain.NewState()
	}
	f := &Fold{name: name, log: log, logger: logger, st: st, changed: make(chan struct{})}
	f.Counters.Folded.Store(st.Seq)
	return f
}

// Read runs fn with the state locked. fn must not block and must not keep
// pointers into the state after it returns.
func (f *Fold) Read(fn func(st *domain.State)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.st)
}

// Seq is the last sequence folded.
func (f *Fold) Seq() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.Seq
}

// Ready reports whether the initial read is done.
func (f *Fold) Ready() bool { return f.ready.Load() }

// Lag is how far the fold is behind the log: sequences, and the log time
// between the last record folded and now.
func (f *Fold) Lag(now time.Time) (seqs uint64, behind time.Duration) {
	last, at := f.Counters.StreamLast.Load(), f.Counters.Folded.Load()
	if last > at {
		seqs = last - at
		if t := f.Counters.LastTime.Load(); t > 0 {
			behind = now.Sub(time.Unix(0, t))
		}
	}
	return seqs, behind
}

// Healthz answers 200 once the fold has caught up, 503 before, and 503
// with the reason while the log cannot be followed (Problem).
func (f *Fold) Healthz(w http.ResponseWriter, _ *http.Request) {
	if !f.Ready() {
		http.Error(w, f.name+": folding the log", http.StatusServiceUnavailable)
		return
	}
	if err := f.Problem(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// apply folds one stored message. A message at or below the folded
// sequence (a redelivery after a re-follow) is ignored.
func (f *Fold) apply(s events.Stored, h *Hooks) { f.applyRecord(events.DecodeRecord(s), h) }

// applyRecord folds one decoded record (see apply).
func (f *Fold) applyRecord(r events.Record, h *Hooks) {
	f.mu.Lock()
	if r.Seq <= f.st.Seq && f.st.Seq > 0 {
		f.mu.Unlock()
		return
	}
	why := f.st.Apply(r)
	f.Counters.Folded.Store(f.st.Seq)
	if h.Applied != nil {
		h.Applied(f.st, r, why)
	}
	h.Snapshots.Saw(r) // nil-safe
	if f.waited {
		close(f.changed)
		f.changed, f.waited = make(chan struct{}), false
	}
	f.mu.Unlock()
	if !r.Time.IsZero() {
		f.Counters.LastTime.Store(r.Time.UnixNano())
	}
	if why != "" {
		f.Counters.Skipped.Add(1)
		f.logger.Warn().Uint64("seq", r.Seq).Str("subject", r.Subject).Str("reason", why).Msg(f.name + ": record skipped")
		return
	}
	f.Counters.Applied.Add(1)
}

// WaitFor blocks until the fold has reached seq, ctx ends, or bound
// passes (ErrBehind).
func (f *Fold) WaitFor(ctx context.Context, seq uint64, bound time.Duration) error {
	var timeout <-chan time.Time
	for {
		f.mu.Lock()
		at, ch := f.st.Seq, f.changed
		f.waited = true
		f.mu.Unlock()
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
			return fmt.Errorf("%w (folded up to %d, want %d)", ErrBehind, at, seq)
		}
	}
}

// ErrBehind: the fold did not reach a sequence in time.
var ErrBehind = errors.New("service: the fold is behind the log")

// Backoff bounds of a re-opened follow.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Run folds the log, then follows it until ctx ends or a hook fails. A
// read or a follow that fails is retried from the next unfolded sequence
// with backoff, forever: NATS going away is never a reason to exit.
func (f *Fold) Run(ctx context.Context, h Hooks) error {
	running.Store(f, struct{}{})
	defer running.Delete(f)
	if h.Snapshots != nil {
		defer f.Read(func(st *domain.State) { h.Snapshots.Final(st, h.Own) })
	}
	// snapshot offers a snapshot of the state as folded (Hooks.Snapshots).
	snapshot := func() {
		if h.Snapshots != nil {
			f.Read(func(st *domain.State) { h.Snapshots.Take(ctx, st, h.Own) })
		}
	}
	backoff := minBackoff
	// 1. The initial read, retried until it succeeds.
	for {
		err := f.CatchUp(ctx, &h)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		f.logger.Warn().Err(err).Str("retry_in", backoff.String()).Msg(f.name + ": reading the log failed")
		if !sleep(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, maxBackoff)
	}
	f.logger.Info().Uint64("seq", f.Seq()).Uint64("skipped", f.Counters.Skipped.Load()).Msg(f.name + ": log folded")
	snapshot() // a long fold is worth a snapshot at once
	if h.CaughtUp != nil {
		if err := h.CaughtUp(ctx); err != nil {
			return err
		}
	}
	f.ready.Store(true)
	defer f.ready.Store(false)

	// 2. Follow, with the reaction after each batch and at each tick.
	recs := make(chan events.Stored, 1024)
	go f.follow(ctx, recs)
	var tick <-chan time.Time
	if h.Tick > 0 {
		t := time.NewTicker(h.Tick)
		defer t.Stop()
		tick = t.C
	}
	react := func() error {
		snapshot()
		f.summarize()
		if h.React == nil {
			return nil
		}
		return h.React(ctx)
	}
	if err := react(); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		case <-h.Wake:
		case m := <-recs:
			f.apply(m, &h)
		drain:
			for {
				select {
				case m := <-recs:
					f.apply(m, &h)
				default:
					break drain
				}
			}
		}
		if err := react(); err != nil {
			return err
		}
	}
}

// CatchUp folds every record present in the log now, once, calling
// h.Applied for each (h may be nil); Run does it until it succeeds.
func (f *Fold) CatchUp(ctx context.Context, h *Hooks) error {
	if h == nil {
		h = &Hooks{}
	}
	last, err := events.ReadAll(ctx, f.log, f.Seq()+1, "", func(r events.Record) error { f.applyRecord(r, h); return nil })
	if ctx.Err() == nil {
		f.setProblem("reading the log", err)
	}
	if err == nil && last > f.Counters.StreamLast.Load() {
		f.Counters.StreamLast.Store(last)
	}
	return err
}

// DefaultStallAfter is Fold.StallAfter's default. A follow that waits
// this long while the log holds the record it waits for is stalled, not
// idle: seen in a three-server cluster after one server was killed, an
// ordered consumer that kept its subscription but delivered nothing more
// and reported no error. Re-opening costs one consumer; waiting costs the
// service its view of the log for good.
const DefaultStallAfter = 10 * time.Second

// follow moves followed messages into recs until ctx ends, re-opening a
// failed follow from the next unfolded sequence with backoff, and a
// stalled one (watch) at once.
func (f *Fold) follow(ctx context.Context, recs chan<- events.Stored) {
	backoff := minBackoff
	next := f.Seq() + 1
	for ctx.Err() == nil {
		fl, err := f.log.Follow(ctx, next, "")
		if ctx.Err() == nil {
			f.setProblem("following the log", err)
		}
		stalled := false
		if err == nil {
			var waiting, want atomic.Int64 // since when Next waits (Unix ns, 0: not waiting); the sequence it waits for
			wctx, stopWatch := context.WithCancel(ctx)
			watched := make(chan bool, 1)
			go func() { watched <- f.watch(wctx, fl, &waiting, &want) }()
			for {
				var m events.Stored
				want.Store(int64(next))
				waiting.Store(time.Now().UnixNano())
				m, err = fl.Next(ctx)
				waiting.Store(0)
				if err != nil {
					break
				}
				select {
				case recs <- m:
				case <-ctx.Done():
					stopWatch()
					fl.Close()
					return
				}
				next = m.Seq + 1
				if m.Seq > f.Counters.StreamLast.Load() {
					f.Counters.StreamLast.Store(m.Seq)
				}
				backoff = minBackoff
			}
			stopWatch()
			stalled = <-watched
			fl.Close()
		}
		if ctx.Err() != nil {
			return
		}
		f.Counters.Reconnects.Add(1)
		if stalled {
			f.Counters.Stalls.Add(1)
			f.logger.Warn().Uint64("next", next).Msg(f.name + ": the follow stalled behind the log; re-opening")
			continue // the follow did not fail: no backoff
		}
		f.logger.Warn().Err(err).Str("retry_in", backoff.String()).Msg(f.name + ": following the log failed; re-opening")
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, maxBackoff)
		if n, err := f.log.LastSeq(ctx); err == nil {
			f.Counters.StreamLast.Store(n)
		}
	}
}

// watch closes fl, and reports true, when its Next has waited longer than
// StallAfter for a sequence the log already holds. It asks the log only
// while Next waits that long, so an idle log costs one LastSeq per
// StallAfter and a busy one none.
func (f *Fold) watch(ctx context.Context, fl events.Follower, waiting, want *atomic.Int64) bool {
	after := f.StallAfter
	if after <= 0 {
		after = DefaultStallAfter
	}
	t := time.NewTicker(after / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		since := waiting.Load()
		if since == 0 || time.Since(time.Unix(0, since)) < after {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, after)
		last, err := f.log.LastSeq(qctx)
		cancel()
		if err != nil || last < uint64(want.Load()) {
			continue // the log is idle, or unreachable (the follow reports that itself)
		}
		if last > f.Counters.StreamLast.Load() {
			f.Counters.StreamLast.Store(last)
		}
		if waiting.Load() != since {
			continue // a record came meanwhile
		}
		fl.Close()
		return true
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Skipped folds the whole log as every service does and lists the
// records the fold skipped, in log order, with the reason each was
// skipped: what `gpuq audit skipped` shows. It is a pure function of the
// log, so it lists each bad record once, whoever asks and whenever.
func Skipped(ctx context.Context, log events.Log) ([]Skip, error) {
	st := domain.NewState()
	out := []Skip{}
	_, err := events.ReadAll(ctx, log, 1, "", func(r events.Record) error {
		if why := st.Apply(r); why != "" {
			out = append(out, Skip{Seq: r.Seq, Subject: r.Subject, Reason: why})
		}
		return nil
	})
	return out, err
}
