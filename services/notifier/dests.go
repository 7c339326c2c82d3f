package notifier

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/events"
)

// DestBucket holds the teams' destinations (gpuq notify add): d.<id>,
// and the test requests of gpuq notify test (t.<id>.<nonce>), which the
// notifier answers with a test notice to that destination and deletes.
// Only the admin and the notifier may read or write it (it holds the
// secrets).
const DestBucket = events.NotifyDestBucket

// TeamDest is one team's destination as kept in DestBucket.
type TeamDest struct {
	ID      string    `json:"id"`
	Team    string    `json:"team"`
	URL     string    `json:"url"`
	Events  []string  `json:"events,omitempty"` // none: every type
	Secret  string    `json:"secret"`
	Created time.Time `json:"created"`
}

// Destination is d as the notifier delivers to it.
func (d TeamDest) Destination() Destination {
	out := NewDestination(d.Team, d.URL, []byte(d.Secret), d.Events)
	out.restricted = true
	return out
}

// NewTeamDest checks and returns a team destination; an empty secret is
// replaced by a new random one.
func NewTeamDest(team, rawURL string, types []string, secret string, now time.Time) (TeamDest, error) {
	if team == "" {
		return TeamDest{}, &FieldError{Field: "team", Msg: "is required"}
	}
	if err := CheckURL(rawURL); err != nil {
		return TeamDest{}, &FieldError{Field: "url", Msg: err.Error()}
	}
	for _, t := range types {
		if !slices.Contains(Types, t) {
			return TeamDest{}, &FieldError{Field: "events", Msg: fmt.Sprintf("%q: must be one of %s", t, strings.Join(Types, ", "))}
		}
	}
	if secret == "" {
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		secret = "whsec_" + hex.EncodeToString(b)
	}
	d := NewDestination(team, rawURL, nil, nil)
	return TeamDest{ID: d.ID, Team: team, URL: rawURL, Events: types, Secret: secret, Created: now.UTC()}, nil
}

// FieldError is a refused value, naming its flag or field.
type FieldError struct{ Field, Msg string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Destinations is the admin's access to DestBucket (gpuq notify).
type Destinations struct {
	j   js.JetStream
	kv  js.KeyValue
	dlv js.KeyValue // the deliveries, for test results and dead letters (nil until the notifier made them)
}

// OpenDestinations creates (or opens) the destinations bucket, and opens
// the deliveries bucket when it exists.
func OpenDestinations(ctx context.Context, j js.JetStream, replicas int) (*Destinations, error) {
	kv, err := events.EnsureKV(ctx, j, destKV(replicas))
	if err != nil {
		return nil, err
	}
	return &Destinations{j: j, kv: kv}, nil
}

func destKV(replicas int) js.KeyValueConfig {
	return js.KeyValueConfig{Bucket: DestBucket, History: 1, Replicas: max(replicas, 1), Storage: js.FileStorage,
		Description: "gpuq notifier: the teams' webhook destinations (gpuq notify add)"}
}

// Add stores d (replacing one with the same team and URL).
func (s *Destinations) Add(ctx context.Context, d TeamDest) error {
	b, _ := json.Marshal(d)
	_, err := s.kv.Put(ctx, "d."+d.ID, b)
	return err
}

// List returns every team destination, by team and URL.
func (s *Destinations) List(ctx context.Context) ([]TeamDest, error) {
	l, err := s.kv.ListKeysFiltered(ctx, "d.>")
	if err != nil {
		if errors.Is(err, js.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, err
	}
	var out []TeamDest
	for k := range l.Keys() {
		e, err := s.kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var d TeamDest
		if json.Unmarshal(e.Value(), &d) == nil && d.ID != "" {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Team+" "+out[i].URL < out[j].Team+" "+out[j].URL })
	return out, nil
}

// Get returns the destination with id.
func (s *Destinations) Get(ctx context.Context, id string) (TeamDest, error) {
	e, err := s.kv.Get(ctx, "d."+id)
	if errors.Is(err, js.ErrKeyNotFound) {
		return TeamDest{}, &FieldError{Field: "id", Msg: fmt.Sprintf("no destination %q (gpuq notify list)", id)}
	}
	if err != nil {
		return TeamDest{}, err
	}
	var d TeamDest
	err = json.Unmarshal(e.Value(), &d)
	return d, err
}

// Remove deletes the destination with id.
func (s *Destinations) Remove(ctx context.Context, id string) error {
	if _, err := s.Get(ctx, id); err != nil {
		return err
	}
	return s.kv.Delete(ctx, "d."+id)
}

// Test asks the notifier to send a test notice to destination id and
// returns the notice's id (TestResult reads its outcome).
func (s *Destinations) Test(ctx context.Context, id string) (string, error) {
	if _, err := s.Get(ctx, id); err != nil {
		return "", err
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	nonce := hex.EncodeToString(b)
	if _, err := s.kv.Put(ctx, "t."+id+"."+nonce, []byte(time.Now().UTC().Format(time.RFC3339Nano))); err != nil {
		return "", err
	}
	return testID(id, nonce), nil
}

func testID(dest, nonce string) string { return NoticeID(Test, dest, nonce) }

// TestResult is the outcome of a test notice so far: delivered, or the
// last error of a failed attempt ("" and false: not tried yet).
func (s *Destinations) TestResult(ctx context.Context, dest, notice string) (delivered bool, lastErr string, err error) {
	if !s.deliveries(ctx) {
		return false, "", nil
	}
	d := Delivery{NoticeID: notice, Dest: dest}
	if _, err := s.dlv.Get(ctx, d.key("s")); err == nil {
		return true, "", nil
	}
	for _, p := range []string{"p", "x"} {
		if e, err := s.dlv.Get(ctx, d.key(p)); err == nil {
			var got Delivery
			if json.Unmarshal(e.Value(), &got) == nil && got.LastError != "" {
				return false, got.LastError, nil
			}
		}
	}
	return false, "", nil
}

// Failed lists the dead letters, oldest first.
func (s *Destinations) Failed(ctx context.Context) ([]Delivery, error) {
	if !s.deliveries(ctx) {
		return nil, nil
	}
	return (&KV{dlv: s.dlv}).DeadLetters(ctx)
}

// deliveries opens the deliveries bucket; false: no notifier made it yet.
func (s *Destinations) deliveries(ctx context.Context) bool {
	if s.dlv == nil {
		s.dlv, _ = s.j.KeyValue(ctx, DeliveryBucket)
	}
	return s.dlv != nil
}

// Allow is where team destinations may be delivered: the addresses a
// delivery may connect to, checked on the address actually dialled (so a
// name that resolves to a forbidden address later is still refused).
type Allow struct {
	// Nets: only these (none: every address but Local's).
	Nets []netip.Prefix
	// Local also allows loopback and link-local addresses (gpuq dev).
	Local bool
}

// ParseAllow reads comma-separated CIDRs (or single addresses).
func ParseAllow(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("%q: not a CIDR or an address", f)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q: not a CIDR or an address", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Permits reports whether a delivery may connect to ip.
func (a Allow) Permits(ip netip.Addr) bool {
	ip = ip.Unmap()
	if len(a.Nets) > 0 {
		for _, p := range a.Nets {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
	if a.Local {
		return true
	}
	return !(ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() || ip.IsMulticast())
}

// restrictedClient is newClient that connects only where allow permits,
// and through no proxy (one would connect for it, unchecked).
func restrictedClient(timeout time.Duration, allow Allow) *http.Client {
	d := &net.Dialer{Timeout: timeout, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || !allow.Permits(ip) {
			return fmt.Errorf("address %s not allowed for team destinations (--webhook-allow)", host)
		}
		return nil
	}}
	c := newClient(timeout)
	c.Transport = &http.Transport{DialContext: d.DialContext, TLSHandshakeTimeout: timeout, ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second}
	return c
}
