package auth_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/auth"
)

// keep copies a credentials file away, as a leaked copy would be kept.
func keep(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRotate: gpuq auth rotate, then a server reload: the old files of the
// rotated roles and the job credentials of a rotated signing key are
// refused, the new ones and every other role's work, new roles are added,
// and the log is where it was (the account did not change).
func TestRotate(t *testing.T) {
	a := newAuthServer(t)
	_, admin := a.openLog("admin")
	sub := a.as("submitter")
	if err := publish(sub, "gpuq.task.01a22962-7813-7583-8cf9-b646a9f5e718.submitted"); err != nil {
		t.Fatal(err)
	}
	const task = "01a22962-7813-7583-8cf9-b646a9f5e718"
	oldSub := keep(t, auth.CredsPath(a.dir, "submitter"))
	oldJob := a.mint("node-1", task, 3, time.Now().Add(time.Hour))
	otherJob := a.mint("node-2", task, 3, time.Now().Add(time.Hour))
	oldJobConn, _ := a.asFile(oldJob, "old job")
	before := lastSeq(t, admin)

	rot, err := auth.Rotate(a.dir, []string{"submitter", auth.JobKeyName("node-1"), "ci-robotics", "agent-node-3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rot.Revoked) != 1 || len(rot.Removed) != 1 {
		t.Fatalf("rotated %+v", rot)
	}
	for _, f := range rot.Files {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v (%v)", f, err, fi.Mode())
		}
	}
	if err := a.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	newJob := a.mint("node-1", task, 4, time.Now().Add(time.Hour))
	cases := map[string]struct {
		path string
		ok   bool
	}{
		"the old submitter file":          {oldSub, false},
		"the new submitter file":          {auth.CredsPath(a.dir, "submitter"), true},
		"a job of the old node-1 key":     {oldJob, false},
		"a job of the new node-1 key":     {newJob, true},
		"a job of node-2's unrotated key": {otherJob, true},
		"an unrotated role":               {auth.CredsPath(a.dir, "scheduler"), true},
		"a new team":                      {auth.CredsPath(a.dir, "ci-robotics"), true},
		"a new node":                      {auth.CredsPath(a.dir, "agent-node-3"), true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cr, err := auth.LoadCreds(c.path)
			if err != nil {
				t.Fatal(err)
			}
			opts, _ := cr.Options()
			nc, err := nats.Connect(a.srv.URL(), append(opts, nats.NoReconnect())...)
			if c.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !c.ok && (err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization")) {
				t.Fatalf("connect: %v, want an authorization violation", err)
			}
			if nc != nil {
				nc.Close()
			}
		})
	}
	// The connections of the revoked user and of the removed key were
	// closed by the reload.
	for name, nc := range map[string]*nats.Conn{"the old submitter's": sub.nc, "a job's of the removed key": oldJobConn.nc} {
		deadline := time.Now().Add(5 * time.Second)
		for nc.Status() == nats.CONNECTED {
			if time.Now().After(deadline) {
				t.Fatalf("%s connection is still connected", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, p := range []string{filepath.Join(a.dir, auth.TokensDir, "robotics"), auth.JobSignerPath(a.dir, "node-3")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("a new role's file: %v", err)
		}
	}
	// The new submitter appends to the same log.
	c, _ := a.asFile(auth.CredsPath(a.dir, "submitter"), "new submitter")
	if err := publish(c, "gpuq.task."+task+".cancelled"); err != nil {
		t.Fatalf("new submitter: %v (%s)", err, c.violations())
	}
	if after := lastSeq(t, admin); after != before+1 {
		t.Fatalf("the log went from %d to %d, want one more record in the same stream", before, after)
	}
	if _, err := auth.Rotate(a.dir, []string{"root"}); err == nil {
		t.Fatal("rotating an unknown role succeeded")
	}
}
