package notifier

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/metrics"
)

// Headers of a delivery.
const (
	HeaderID        = "X-Gpuq-Event-Id"
	HeaderSignature = "X-Gpuq-Signature"
)

// Destination is a webhook: where notices go, signed with Secret.
type Destination struct {
	ID     string // derived from Team and URL: the key of its deliveries
	Team   string // only this team's tasks ("" : every task, gpuq dev --webhook)
	URL    string
	Secret []byte   // "" : no signature header
	Events []string // the types it wants (none: all)
	// restricted: a team's or a task's, delivered only where
	// Config.Allow permits.
	restricted bool
	// task: a task's own (gpuq submit --notify): it gets only the notices
	// of the tasks that name its URL, never signed (the log, where the
	// URL is kept, holds no secret for it).
	task bool
}

// HeaderSignatureStatus says, on a delivery to a task's own destination
// (gpuq submit --notify), that it is not signed: "unsigned".
const HeaderSignatureStatus = "X-Gpuq-Signature-Status"

// taskDestPrefix begins the id of a task's own destination.
const taskDestPrefix = "task-"

// TaskDestination is the destination of a task's --notify URL: one per
// URL, shared by every task that names it, restricted like a team's.
func TaskDestination(rawURL string) Destination {
	return Destination{ID: taskDestPrefix + NoticeID("task-dest", rawURL)[1:13], URL: rawURL, restricted: true, task: true}
}

// isTaskDest reports whether a destination id is a task's own.
func isTaskDest(id string) bool { return strings.HasPrefix(id, taskDestPrefix) }

// adminDestPrefix begins the id of an operator's alarm destination.
const adminDestPrefix = "admin-"

// AdminDestination is an operator's alarm channel (gpuq-notifier
// --admin-webhook, GPUQ_ADMIN_WEBHOOKS): it gets every task's alert — the
// advisor's alarm that scheduling is broken, never a wait that is late
// for a legitimate reason — and nothing else, signed with secret, with
// the recording, retries and dead letters of every destination: one
// delivery per task per alarm, however often the advice comes again or
// the notifier restarts. Its id differs from a --webhook destination's of
// the same URL.
func AdminDestination(rawURL string, secret []byte) Destination {
	return Destination{ID: adminDestPrefix + NoticeID("admin-dest", rawURL)[1:13], URL: rawURL, Secret: secret, Events: []string{Alert}}
}

// AdminDestinations are the operators' alarm channels of urls
// (AdminDestination), refusing a URL that is not an absolute http(s) URL,
// one given twice, and one of the --webhook destinations (webhooks),
// which get every notice already: it would get each alert twice.
func AdminDestinations(urls, webhooks []string, secret []byte) ([]Destination, error) {
	var out []Destination
	seen := map[string]bool{}
	for _, u := range urls {
		if err := CheckURL(u); err != nil {
			return nil, err
		}
		if seen[u] {
			return nil, fmt.Errorf("%q given twice", u)
		}
		seen[u] = true
		if slices.Contains(webhooks, u) {
			return nil, fmt.Errorf("%q is also a --webhook, which gets every notification already (each alert would come twice)", u)
		}
		out = append(out, AdminDestination(u, secret))
	}
	return out, nil
}

// NewDestination returns a destination with its id.
func NewDestination(team, rawURL string, secret []byte, types []string) Destination {
	return Destination{ID: NoticeID("dest", team, rawURL)[:17], Team: team, URL: rawURL, Secret: secret, Events: types}
}

// Wants reports whether d wants notice n.
func (d Destination) Wants(n Notice) bool {
	if n.only != "" {
		return n.only == d.ID
	}
	if d.task {
		return slices.Contains(n.notify, d.URL)
	}
	if d.Team != "" && d.Team != n.Team {
		return false
	}
	return len(d.Events) == 0 || slices.Contains(d.Events, n.Type)
}

// CheckURL refuses a destination URL that is not an absolute http(s) URL
// with a host.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %w", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: must be an absolute http:// or https:// URL", raw)
	}
	if u.User != nil {
		return fmt.Errorf("%q: must not carry a user or password (use a secret)", raw)
	}
	return nil
}

// Sign is the X-Gpuq-Signature of body at t: "t=<unix>,v1=<hex
// HMAC-SHA256 of "<unix>.<body>">".
func Sign(secret, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// DefaultBackoff is the wait after each failed attempt (Standard
// Webhooks' schedule): the first retry 5 s after the first try, the
// last within DefaultHorizon of the notice.
var DefaultBackoff = []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}

// DefaultHorizon: a delivery not done this long after its notice is dead.
const DefaultHorizon = 24 * time.Hour

// DefaultQueue bounds a destination's deliveries in memory; more stay
// recorded and are read back as the queue drains.
const DefaultQueue = 10_000

// shutdownGrace is how long a send in flight may go on once the
// notifier stops.
const shutdownGrace = 2 * time.Second

// DefaultTimeout bounds one attempt (connect, send, answer).
const DefaultTimeout = 10 * time.Second

// sender is what the workers share.
type sender struct {
	client  *http.Client
	team    *http.Client // for restricted destinations
	store   Store
	backoff []time.Duration
	horizon time.Duration
	timeout time.Duration
	cap     int
	now     func() time.Time
	logger  zerolog.Logger
	metrics *metrics.Notifier
	// crash, in tests, is asked after a send and before its record: true
	// stops the worker there, as a kill would.
	crash func(Delivery) bool
}

// newClient is an HTTP client that follows no redirect: a 3xx is the
// answer, and not a 2xx, so the attempt failed.
func newClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// worker delivers to one destination, one delivery at a time, the
// earliest due first (in the order recorded among equals).
type worker struct {
	s    *sender
	dest Destination

	stop context.CancelFunc // ends run (the destination was removed)
	// idle, for a task's destination: asked after idleTicks refill ticks
	// with nothing to do; true: the worker was dropped, run returns.
	idle     func(*worker) bool
	mu       sync.Mutex
	queue    map[string]*Delivery // by notice id
	overflow bool                 // deliveries recorded but not queued: read them back when there is room
	wake     chan struct{}
}

func newWorker(s *sender, d Destination) *worker {
	return &worker{s: s, dest: d, queue: map[string]*Delivery{}, wake: make(chan struct{}, 1)}
}

// add queues d unless the queue is full (then it stays recorded and is
// read back later). It never blocks.
func (w *worker) add(d Delivery) {
	w.mu.Lock()
	if _, ok := w.queue[d.NoticeID]; !ok {
		if len(w.queue) >= w.s.cap {
			w.overflow = true
		} else {
			w.queue[d.NoticeID] = &d
		}
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

// next is the delivery due first, or nil.
func (w *worker) next() *Delivery {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first *Delivery
	for _, d := range w.queue {
		if first == nil || d.Next.Before(first.Next) || (d.Next.Equal(first.Next) && d.order < first.order) {
			first = d
		}
	}
	return first
}

// run delivers until ctx ends.
func (w *worker) run(ctx context.Context) {
	refill := time.NewTicker(30 * time.Second)
	defer refill.Stop()
	idle := 0
	for ctx.Err() == nil {
		d := w.next()
		var due <-chan time.Time
		var timer *time.Timer
		if d != nil {
			wait := d.Next.Sub(w.s.now())
			if wait <= 0 {
				if !w.attempt(ctx, d) {
					return
				}
				continue
			}
			timer = time.NewTimer(wait)
			due = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-due:
		case <-w.wake:
		case <-refill.C:
			w.refill(ctx)
			if d != nil {
				idle = 0
			} else if idle++; w.idle != nil && idle >= idleTicks && w.idle(w) {
				return
			}
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// idleTicks: a task's destination with nothing to deliver for this many
// refill ticks (10 min) stops its worker; the next notice for it starts
// one again.
const idleTicks = 20

// empty reports whether w has nothing queued and nothing left in the
// store.
func (w *worker) empty() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue) == 0 && !w.overflow
}

// refill reads back recorded deliveries that did not fit the queue.
func (w *worker) refill(ctx context.Context) {
	w.mu.Lock()
	over := w.overflow && len(w.queue) < w.s.cap/2
	w.mu.Unlock()
	if !over {
		return
	}
	ds, err := w.s.store.Pending(ctx)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.overflow = false
	for _, d := range ds {
		if d.Dest != w.dest.ID {
			continue
		}
		if len(w.queue) >= w.s.cap {
			w.overflow = true
			break
		}
		if _, ok := w.queue[d.NoticeID]; !ok {
			d := d
			w.queue[d.NoticeID] = &d
		}
	}
}

// attempt sends d once and records the outcome; false: stop (a crash
// simulated in tests).
func (w *worker) attempt(ctx context.Context, d *Delivery) bool {
	s := w.s
	err := w.send(ctx, d)
	if err != nil && ctx.Err() != nil {
		return false // interrupted by the shutdown: not an attempt; the next run makes it
	}
	if s.crash != nil && s.crash(*d) {
		return false
	}
	// What is recorded after a send must be recorded even while the
	// service stops, or a delivered notice would be sent again.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	now := s.now()
	d.Attempts++
	var rerr error
	switch {
	case err == nil:
		rerr = s.store.Delivered(rctx, *d)
		s.metrics.Delivered(d.Type, now.Sub(d.Created))
		w.remove(d)
	case d.Attempts > len(s.backoff) || !now.Before(d.Created.Add(s.horizon)):
		d.LastError = err.Error()
		rerr = s.store.Dead(rctx, *d)
		s.metrics.Count(d.Type, "dead")
		s.logger.Warn().Str("notice", d.NoticeID).Str("type", d.Type).Str("url", d.URL).Int("attempts", d.Attempts).Err(err).Msg("notifier: delivery given up (gpuq notify failed lists it)")
		w.remove(d)
	default:
		d.LastError = err.Error()
		d.Next = now.Add(s.backoff[d.Attempts-1])
		if limit := d.Created.Add(s.horizon); d.Next.After(limit) {
			d.Next = limit
		}
		rerr = s.store.Retry(rctx, *d)
		s.metrics.Count(d.Type, "retry")
		s.logger.Info().Str("notice", d.NoticeID).Str("type", d.Type).Str("url", d.URL).Int("attempts", d.Attempts).Time("next", d.Next).Err(err).Msg("notifier: delivery failed; will retry")
	}
	if rerr != nil {
		s.logger.Warn().Err(rerr).Str("notice", d.NoticeID).Msg("notifier: recording a delivery failed")
	}
	return true
}

func (w *worker) remove(d *Delivery) {
	w.mu.Lock()
	delete(w.queue, d.NoticeID)
	w.mu.Unlock()
}

// errStatus is a non-2xx answer.
var errStatus = errors.New("answer not 2xx")

// send POSTs d's body once.
func (w *worker) send(ctx context.Context, d *Delivery) error {
	// A shutdown lets a send in flight finish for a moment: cutting it
	// off after the receiver got it would send it again after the
	// restart.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.s.timeout)
	defer cancel()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(shutdownGrace, cancel) })()
	req, err := http.NewRequestWithContext(sctx, http.MethodPost, w.dest.URL, bytes.NewReader(d.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "gpuq-notifier")
	req.Header.Set(HeaderID, d.NoticeID)
	if len(w.dest.Secret) > 0 {
		req.Header.Set(HeaderSignature, Sign(w.dest.Secret, d.Body, time.Now()))
	} else if w.dest.task {
		req.Header.Set(HeaderSignatureStatus, "unsigned")
	}
	client := w.s.client
	if w.dest.restricted {
		client = w.s.team
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%w: %s", errStatus, resp.Status)
	}
	return nil
}
