package auth_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/events"
)

// asFile connects with a credentials file.
func (a *authServer) asFile(path, name string) (*conn, *auth.Creds) {
	a.t.Helper()
	cr, err := auth.LoadCreds(path)
	if err != nil {
		a.t.Fatal(err)
	}
	opts, err := cr.Options()
	if err != nil {
		a.t.Fatal(err)
	}
	c := &conn{}
	opts = append(opts, nats.InProcessServer(a.srv.NS), nats.Name(name),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.mu.Lock()
			c.errs = append(c.errs, err.Error())
			c.mu.Unlock()
		}))
	c.nc, err = nats.Connect("", opts...)
	if err != nil {
		a.t.Fatalf("%s: connect: %v", name, err)
	}
	a.t.Cleanup(c.nc.Close)
	return c, cr
}

// mint writes a job credential signed by node's agent key.
func (a *authServer) mint(node, task string, run uint64, expires time.Time) string {
	a.t.Helper()
	s, err := auth.LoadJobSigner(auth.JobSignerPath(a.dir, node))
	if err != nil {
		a.t.Fatal(err)
	}
	path := filepath.Join(a.t.TempDir(), auth.JobCredsFile)
	if err := s.MintJob(path, task, run, expires); err != nil {
		a.t.Fatal(err)
	}
	return path
}

// TestJobCredential: a job's own credential, minted with its agent's
// scoped signing key, may ask the submitter for its own run's checkpoint
// and history and read the answers — and the real server refuses it
// everything else.
func TestJobCredential(t *testing.T) {
	a := newAuthServer(t)
	_, admin := a.openLog("admin")
	const task, other = "01a22962-7813-7583-8cf9-b646a9f5e718", "01a22962-7813-7583-8cf9-b646a9f5e719"
	const run = 42
	// The submitter's side of the job API: it answers whatever reaches it
	// (the checks of the task's state are the submitter's, services/submitter).
	sub := a.as("submitter")
	got := make(chan string, 8)
	for _, op := range api.JobOps {
		if _, err := sub.nc.Subscribe(api.JobPrefix+"*.*.*."+op, func(m *nats.Msg) {
			got <- m.Subject
			b, _ := json.Marshal(api.Reply{Result: json.RawMessage(`{}`)})
			_ = m.Respond(b)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sub.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	path := a.mint("node-1", task, run, time.Now().Add(time.Hour))
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("job credentials %s: %v, mode %v; want 0600", path, err, fi.Mode().Perm())
	}

	t.Run("allowed", func(t *testing.T) {
		job, cr := a.asFile(path, "job")
		if j := cr.Job(); j == nil || *j != (api.Job{Node: "node-1", Task: task, Run: run}) || cr.Inbox != auth.JobInbox(task) {
			t.Fatalf("creds %+v, job %+v", cr, cr.Job())
		}
		cl := &api.Client{NC: job.nc, Job: cr.Job(), Timeout: 5 * time.Second}
		for _, op := range api.JobOps {
			if err := cl.Call(op, api.CheckpointRequest{TaskID: task, Ref: "step-1"}, nil); err != nil {
				t.Fatalf("%s: %v (%s)", op, err, job.violations())
			}
			if s := <-got; s != api.JobSubject("node-1", task, run, op) {
				t.Fatalf("the submitter got %s", s)
			}
		}
	})

	before := lastSeq(t, admin)
	pubs := map[string]string{
		"append dispatched":                 events.TaskPrefix + task + ".dispatched",
		"append its own checkpointed":       events.TaskPrefix + task + ".checkpointed",
		"append another task's completed":   events.TaskPrefix + other + ".completed",
		"another task's checkpoint request": api.JobSubject("node-1", other, run, api.OpCheckpoint),
		"another task's history":            api.JobSubject("node-1", other, run, api.OpHistory),
		"another run of its own task":       api.JobSubject("node-1", task, run+1, api.OpCheckpoint),
		"its task as another node's job":    api.JobSubject("node-2", task, run, api.OpCheckpoint),
		"the unscoped request API":          api.SubjectPrefix + api.OpCheckpoint,
		"a team's request API":              api.TeamPrefix + "vision.submit",
		"read the log":                      "$JS.API.STREAM.INFO." + events.StreamName,
		"read the log by direct get":        "$JS.API.DIRECT.GET." + events.StreamName,
		"another node's logs":               api.LogsSubject("node-2"),
	}
	t.Run("refused publish", func(t *testing.T) {
		for name, subj := range pubs {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				job, _ := a.asFile(path, "job")
				var err error
				if strings.HasPrefix(subj, events.TaskPrefix) {
					err = publish(job, subj)
				} else if err = job.nc.Publish(subj, []byte(`{}`)); err == nil {
					err = job.nc.Flush()
					if err == nil {
						err = errors.New("published")
					}
				}
				refused(t, job, err, subj)
			})
		}
	})
	subs := map[string]string{
		"another task's inbox": auth.JobInbox(other) + ".>",
		"a role's inbox":       auth.Inbox("submitter") + ".>",
		"the task's events":    events.TaskPrefix + task + ".>",
		"every subject":        ">",
	}
	t.Run("refused subscribe", func(t *testing.T) {
		for name, subj := range subs {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				job, _ := a.asFile(path, "job")
				if _, err := job.nc.SubscribeSync(subj); err == nil {
					_ = job.nc.Flush()
				}
				refused(t, job, errors.New("subscribed"), subj)
			})
		}
	})
	if after := lastSeq(t, admin); after != before {
		t.Fatalf("the log grew from %d to %d through a job's credential", before, after)
	}
	select {
	case s := <-got:
		t.Fatalf("a refused request reached the submitter: %s", s)
	default:
	}
}

// TestJobCredentialNotBeyondItsScope: what the scoped key signs gets the
// scope's permissions or nothing: an expired credential, and a JWT that
// asks for permissions of its own, are refused at connect.
func TestJobCredentialNotBeyondItsScope(t *testing.T) {
	a := newAuthServer(t)
	const task = "01a22962-7813-7583-8cf9-b646a9f5e718"
	data, err := os.ReadFile(auth.JobSignerPath(a.dir, "node-1"))
	if err != nil {
		t.Fatal(err)
	}
	sk, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := auth.LoadJobSigner(auth.JobSignerPath(a.dir, "node-1"))
	if err != nil {
		t.Fatal(err)
	}
	wide := func() string {
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		seed, _ := kp.Seed()
		uc := jwt.NewUserClaims(pub)
		uc.Name, uc.IssuerAccount = task, signer.Account
		uc.Pub.Allow.Add(">")
		tok, err := uc.Encode(sk)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := jwt.FormatUserConfig(tok, seed)
		p := filepath.Join(t.TempDir(), "wide.creds")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := map[string]string{
		"expired":                 a.mint("node-1", task, 7, time.Now().Add(-time.Minute)),
		"with its own permission": wide(),
	}
	for name, path := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := nats.Connect(a.srv.URL(), nats.UserCredentials(path), nats.NoReconnect())
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
				t.Fatalf("connect: %v, want an authorization violation", err)
			}
		})
	}
}

// TestLoadCredsFormats: what LoadCreds takes — a role's .creds of Init, a
// job's of MintJob, a bare .nk user seed (a server with nkey users) — and
// what it refuses.
func TestLoadCredsFormats(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a")
	if _, err := auth.Init(dir, []string{"vision"}, []string{"node-1"}); err != nil {
		t.Fatal(err)
	}
	s, err := auth.LoadJobSigner(auth.JobSignerPath(dir, "node-1"))
	if err != nil {
		t.Fatal(err)
	}
	const task = "01a22962-7813-7583-8cf9-b646a9f5e718"
	jobPath := filepath.Join(t.TempDir(), auth.JobCredsFile)
	if err := s.MintJob(jobPath, task, 9, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	role, _ := os.ReadFile(auth.CredsPath(dir, "ci-vision"))
	other, _ := os.ReadFile(auth.CredsPath(dir, "admin"))
	// The JWT of one file with the seed of another.
	mixed := string(role[:strings.Index(string(role), "-----BEGIN USER NKEY SEED")]) + string(other[strings.Index(string(other), "-----BEGIN USER NKEY SEED"):])
	cases := map[string]struct {
		path    string
		want    auth.Creds // Path and User left out unless set
		wantErr string
	}{
		"a role's .creds":   {path: auth.CredsPath(dir, "ci-vision"), want: auth.Creds{Role: "ci-vision", Team: "vision", Inbox: "_INBOX_ci-vision", JWT: true}},
		"a job's .creds":    {path: jobPath, want: auth.Creds{Role: "job", Inbox: auth.JobInbox(task), JWT: true, Node: "node-1", Task: task, Run: 9}},
		"a bare .nk seed":   {path: write("u.nk", string(seed)+"\n"), want: auth.Creds{User: pub}},
		"a job signing key": {path: auth.JobSignerPath(dir, "node-1"), wantErr: "not an nkey user seed"},
		"another's seed":    {path: write("mixed.creds", mixed), wantErr: "not the JWT's user"},
		"garbage":           {path: write("g", "hello\n"), wantErr: "no nkey seed"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := auth.LoadCreds(c.path)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.want.User == "" {
				c.want.User = got.User
			}
			c.want.Path = c.path
			if *got != c.want {
				t.Fatalf("got %+v\nwant %+v", *got, c.want)
			}
			if _, err := got.Options(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
