package auth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/embedded"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
)

// authServer is an embedded server with the users of `gpuq auth init`.
type authServer struct {
	t   *testing.T
	dir string
	srv *embedded.Server
}

func newAuthServer(t *testing.T) *authServer {
	t.Helper()
	dir := t.TempDir()
	if _, err := auth.Init(filepath.Join(dir, "auth"), []string{"vision", "nlp"}, []string{"node-1", "node-2"}); err != nil {
		t.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(dir, "js"), Port: -1,
		AuthConfig: filepath.Join(dir, "auth", auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return &authServer{t: t, dir: filepath.Join(dir, "auth"), srv: srv}
}

// conn is one role's connection and the permission errors the server
// sent it.
type conn struct {
	nc   *nats.Conn
	mu   sync.Mutex
	errs []string
}

func (c *conn) violations() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.errs, "\n")
}

func (a *authServer) as(role string) *conn {
	a.t.Helper()
	cr, err := auth.LoadCreds(auth.CredsPath(a.dir, role))
	if err != nil {
		a.t.Fatal(err)
	}
	opts, err := cr.Options()
	if err != nil {
		a.t.Fatal(err)
	}
	c := &conn{}
	opts = append(opts, nats.InProcessServer(a.srv.NS), nats.Name(role),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.mu.Lock()
			c.errs = append(c.errs, err.Error())
			c.mu.Unlock()
		}))
	c.nc, err = nats.Connect("", opts...)
	if err != nil {
		a.t.Fatalf("%s: connect: %v", role, err)
	}
	a.t.Cleanup(c.nc.Close)
	return c
}

// publish publishes one event through JetStream and waits for the ack.
func publish(c *conn, subject string) error {
	j, err := js.New(c.nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	_, err = j.Publish(ctx, subject, []byte(`{}`))
	return err
}

// refused checks that the server refused what was just tried on subject.
func refused(t *testing.T, c *conn, err error, subject string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted, want refused", subject)
	}
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(c.violations(), subject) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no permissions violation from the server (err %v; got %q)", subject, err, c.violations())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(strings.ToLower(c.violations()), "permissions violation") {
		t.Fatalf("%s: want a permissions violation, got %q", subject, c.violations())
	}
}

func (a *authServer) openLog(role string) (*conn, *jetstream.Log) {
	a.t.Helper()
	c := a.as(role)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := jetstream.Open(ctx, c.nc, jetstream.StreamConfig{})
	if err != nil {
		a.t.Fatalf("%s: open the log: %v (%s)", role, err, c.violations())
	}
	return c, l
}

func lastSeq(t *testing.T, l *jetstream.Log) uint64 {
	t.Helper()
	s, err := l.LastSeq(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestNoCredentialsRefused: a client without credentials cannot connect,
// so it can publish nothing; nor can one with another directory's keys (a
// job has a credential of its own, TestJobCredential).
func TestNoCredentialsRefused(t *testing.T) {
	a := newAuthServer(t)
	_, err := nats.Connect(a.srv.URL(), nats.NoReconnect())
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("connect without credentials: %v, want an authorization violation", err)
	}
	// A key that is not one of the roles' is refused too.
	other := filepath.Join(t.TempDir(), "other")
	if _, err := auth.Init(other, nil, nil); err != nil {
		t.Fatal(err)
	}
	cr, _ := auth.LoadCreds(auth.CredsPath(other, "admin"))
	opts, _ := cr.Options()
	if _, err := nats.Connect(a.srv.URL(), opts...); err == nil {
		t.Fatal("another directory's admin key connected, want refused")
	}
}

func TestRolesEnforcedByServer(t *testing.T) {
	a := newAuthServer(t)
	_, admin := a.openLog("admin")
	task := "gpuq.task.01a22962-7813-7583-8cf9-b646a9f5e718."

	allowed := map[string]struct {
		role    string
		subject string
	}{
		"submitter appends submitted":     {"submitter", task + "submitted"},
		"submitter appends cancelled":     {"submitter", task + "cancelled"},
		"submitter drains a node":         {"submitter", "gpuq.node.node-1.drained"},
		"scheduler appends dispatched":    {"scheduler", task + "dispatched"},
		"scheduler declares a node lost":  {"scheduler", "gpuq.node.node-2.lost"},
		"agent reports its node":          {"agent-node-1", "gpuq.node.node-1.available"},
		"agent reports a start":           {"agent-node-1", task + "started"},
		"agent reports a completion":      {"agent-node-2", task + "completed"},
		"advisor publishes advice":        {"advisor", "gpuq.advice.01a22962-7813-7583-8cf9-b646a9f5e718"},
		"admin may append (audit import)": {"admin", task + "checklist_updated"},
	}
	for name, tc := range allowed {
		t.Run("allowed/"+name, func(t *testing.T) {
			c := a.as(tc.role)
			if tc.role == "advisor" {
				if _, err := a.advisorStream(c); err != nil {
					t.Fatal(err)
				}
			}
			if err := publish(c, tc.subject); err != nil {
				t.Fatalf("%s on %s: %v (%s)", tc.role, tc.subject, err, c.violations())
			}
		})
	}

	forbidden := map[string]struct {
		role    string
		subject string
	}{
		"ci appends to the log":                {"ci-vision", task + "submitted"},
		"ci forges a completion":               {"ci-vision", task + "completed"},
		"an agent writes another node's event": {"agent-node-1", "gpuq.node.node-2.available"},
		"an agent drains its own node":         {"agent-node-1", "gpuq.node.node-1.undrained"},
		"an agent dispatches":                  {"agent-node-1", task + "dispatched"},
		"an agent puts another's heartbeat":    {"agent-node-1", "$KV.gpuq_heartbeats.node-2"},
		"the submitter dispatches":             {"submitter", task + "dispatched"},
		"the submitter forges a completion":    {"submitter", task + "completed"},
		"the scheduler submits":                {"scheduler", task + "submitted"},
		"the scheduler forges a start":         {"scheduler", task + "started"},
		"the advisor appends":                  {"advisor", task + "requeued"},
		"the auditor appends":                  {"auditor", task + "cancelled"},
	}
	before := lastSeq(t, admin)
	t.Run("forbidden", func(t *testing.T) {
		for name, tc := range forbidden {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				c := a.as(tc.role)
				refused(t, c, publish(c, tc.subject), tc.subject)
			})
		}
	})
	if after := lastSeq(t, admin); after != before {
		t.Fatalf("the log grew from %d to %d through refused appends", before, after)
	}
}

func (a *authServer) advisorStream(c *conn) (js.Stream, error) {
	j, _ := js.New(c.nc)
	l, err := jetstream.Open(context.Background(), c.nc, jetstream.StreamConfig{})
	if err != nil {
		return nil, err
	}
	_ = j
	return l.JetStream().CreateOrUpdateStream(context.Background(), events.AdviceStream(1))
}

func TestNobodyPurgesOrDeletesTheLog(t *testing.T) {
	a := newAuthServer(t)
	a.openLog("admin")
	for _, role := range []string{"admin", "scheduler", "submitter", "auditor", "agent-node-1", "ci-vision"} {
		t.Run(role, func(t *testing.T) {
			t.Parallel()
			c := a.as(role)
			j, _ := js.New(c.nc)
			ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
			defer cancel()
			err := j.DeleteStream(ctx, events.StreamName)
			refused(t, c, err, "$JS.API.STREAM.DELETE."+events.StreamName)
			s, err := j.Stream(ctx, events.StreamName)
			if err == nil {
				err = s.Purge(ctx)
			}
			if err == nil {
				t.Fatalf("%s purged the audit stream", role)
			}
		})
	}
}

func TestCIScopedToItsTeam(t *testing.T) {
	a := newAuthServer(t)
	vision := a.as("ci-vision")
	// Its own team's subjects go through (no responder here: that is not a
	// permissions error).
	_, err := vision.nc.Request("gpuq.api.v1.team.vision.queue", []byte(`{}`), 300*time.Millisecond)
	if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("own team's API: %v", err)
	}
	if v := vision.violations(); v != "" {
		t.Fatalf("own team's API refused: %s", v)
	}
	for _, subj := range []string{"gpuq.api.v1.team.nlp.submit", "gpuq.api.v1.submit", "gpuq.api.v1.logs.node-1"} {
		err := vision.nc.Publish(subj, []byte(`{}`))
		if err == nil {
			err = vision.nc.Flush()
		}
		refused(t, vision, errors.New("published"), subj)
	}
	// Nobody reads another role's replies.
	if _, err := vision.nc.SubscribeSync("_INBOX_ci-nlp.>"); err == nil {
		_ = vision.nc.Flush()
	}
	refused(t, vision, errors.New("subscribed"), "_INBOX_ci-nlp.>")
	// Nor the log.
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	_, err = jetstream.Attach(ctx, vision.nc, "")
	refused(t, vision, err, "$JS.API.STREAM.INFO."+events.StreamName)
}

func TestAuditorReadsTheLog(t *testing.T) {
	a := newAuthServer(t)
	sc, l := a.openLog("submitter")
	if err := publish(sc, "gpuq.task.01a22962-7813-7583-8cf9-b646a9f5e718.submitted"); err != nil {
		t.Fatal(err)
	}
	au := a.as("auditor")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	al, err := jetstream.Attach(ctx, au.nc, "")
	if err != nil {
		t.Fatalf("auditor attach: %v (%s)", err, au.violations())
	}
	n := 0
	if _, err := al.Read(ctx, 1, events.TaskPrefix+">", func(events.Stored) error { n++; return nil }); err != nil {
		t.Fatalf("auditor read: %v (%s)", err, au.violations())
	}
	if want := int(lastSeq(t, l)); n != want {
		t.Fatalf("auditor read %d records, want %d", n, want)
	}
}

func TestInitFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a")
	roles, err := auth.Init(dir, []string{"vision"}, []string{"gpu-a1"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range roles {
		names = append(names, r.Name)
	}
	want := "admin advisor agent-gpu-a1 auditor ci-vision notifier scheduler submitter"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("roles %q, want %q", got, want)
	}
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := auth.LoadCreds(auth.CredsPath(dir, "ci-vision"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Role != "ci-vision" || c.Team != "vision" || c.Inbox != "_INBOX_ci-vision" || !strings.HasPrefix(c.User, "U") {
		t.Fatalf("creds %+v", c)
	}
	if _, err := auth.Init(dir, nil, nil); err == nil {
		t.Fatal("a second Init over existing credentials succeeded")
	}
	for _, bad := range []string{"a.b", "*", "a b", "", "x\x1b[31m"} {
		if _, err := auth.Init(filepath.Join(t.TempDir(), "b"), []string{bad}, nil); err == nil {
			t.Errorf("team %q accepted", bad)
		}
	}
}

// TestServerConfigIncluded: the production setup of docs/operations.md —
// a nats-server configuration that includes nats-auth.conf — parses into
// operator mode: one trusted operator, the system account, and a memory
// resolver that knows the gpuq account, whose scoped signing keys are the
// agents' (one per node).
func TestServerConfigIncluded(t *testing.T) {
	dir := t.TempDir()
	if _, err := auth.Init(dir, []string{"vision"}, []string{"gpu-a1", "gpu-a2"}); err != nil {
		t.Fatal(err)
	}
	main := filepath.Join(dir, "nats.conf")
	conf := "server_name: gpuq-nats\njetstream { store_dir: " + strconv.Quote(filepath.Join(dir, "js")) + " }\ninclude ./" + auth.ConfigFile + "\n"
	if err := os.WriteFile(main, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(main)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.TrustedOperators) != 1 || opts.SystemAccount == "" || len(opts.Nkeys) != 0 || len(opts.Users) != 0 {
		t.Fatalf("%d operators, system account %q, %d nkey users, %d users: want operator mode only",
			len(opts.TrustedOperators), opts.SystemAccount, len(opts.Nkeys), len(opts.Users))
	}
	signer, err := auth.LoadJobSigner(auth.JobSignerPath(dir, "gpu-a2"))
	if err != nil {
		t.Fatal(err)
	}
	opts.DontListen, opts.NoSigs, opts.NoLog = true, true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	accJWT, err := opts.AccountResolver.Fetch(signer.Account)
	if err != nil {
		t.Fatalf("the resolver does not know the gpuq account: %v", err)
	}
	ac, err := jwt.DecodeAccountClaims(accJWT)
	if err != nil {
		t.Fatal(err)
	}
	if ac.Name != auth.AccountName || len(ac.SigningKeys) != 2 || !ac.Limits.JetStreamLimits.IsUnlimited() {
		t.Fatalf("account %q with %d signing keys, JetStream %+v", ac.Name, len(ac.SigningKeys), ac.Limits.JetStreamLimits)
	}
}

// TestAccountKey: the gpuq account of an auth directory, the same after
// a rotation (JetStream's data lives under it).
func TestAccountKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	if _, err := auth.Init(dir, []string{"vision"}, []string{"node-1"}); err != nil {
		t.Fatal(err)
	}
	key, err := auth.AccountKey(dir)
	if err != nil || len(key) != 56 || key[0] != 'A' {
		t.Fatalf("AccountKey = %q, %v; want an account public key", key, err)
	}
	if _, err := auth.Rotate(dir, []string{"submitter"}); err != nil {
		t.Fatal(err)
	}
	if again, err := auth.AccountKey(dir); err != nil || again != key {
		t.Errorf("after a rotation: %q, %v; want %q", again, err, key)
	}
	if _, err := auth.AccountKey(t.TempDir()); err == nil {
		t.Error("a directory without a configuration: no error")
	}
}
