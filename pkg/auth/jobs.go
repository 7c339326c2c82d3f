package auth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// JobRoleName is the role of a job's own credential.
const JobRoleName = "job"

// JobCredsFile is the name of a job's credentials file in its run
// directory.
const JobCredsFile = "job.creds"

// JobSigner is an agent's scoped signing key (creds/agent-<node>.jobs.nk):
// every user JWT it signs gets JobRole(Node)'s permissions from the
// account, whatever the JWT itself says, so the agent can mint its jobs'
// credentials and nothing more powerful.
type JobSigner struct {
	Node    string
	Account string // the account's public key (the JWTs' issuer account)
	kp      nkeys.KeyPair
}

// LoadJobSigner reads a job signing key written by Init.
func LoadJobSigner(path string) (*JobSigner, error) {
	kp, meta, err := loadSeedMeta(path)
	if err != nil {
		return nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicAccountKey(pub) {
		return nil, fmt.Errorf("%s: not an account signing key seed (it must start with SA)", path)
	}
	s := &JobSigner{Node: meta["node"], Account: meta["account"], kp: kp}
	if err := CheckName("node", s.Node); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !nkeys.IsValidPublicAccountKey(s.Account) {
		return nil, fmt.Errorf("%s: no account public key in it (# account: A...)", path)
	}
	return s, nil
}

// MintJob writes the credentials of one run of task (dispatched at
// sequence run) to path, mode 0600: a new user key and its JWT, named
// after the task and tagged run:<run>, signed by the scoped key, expiring
// at expires. The server gives it JobRole(s.Node)'s permissions with the
// task and run filled in; the submitter answers it only while that run is
// the task's and it runs.
func (s *JobSigner) MintJob(path, task string, run uint64, expires time.Time) error {
	if err := CheckName("task", task); err != nil {
		return err
	}
	if run == 0 {
		return errors.New("auth: a job credential needs the run's dispatch sequence")
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return err
	}
	defer kp.Wipe()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	uc := jwt.NewUserClaims(pub)
	// No permissions and no limits of its own (the server refuses a scoped
	// user with any): the scope's template is all it gets.
	uc.UserPermissionLimits = jwt.UserPermissionLimits{}
	uc.Name = task
	uc.IssuerAccount = s.Account
	uc.Tags.Add("run:" + strconv.FormatUint(run, 10))
	uc.Expires = expires.Unix()
	tok, err := uc.Encode(s.kp)
	if err != nil {
		return err
	}
	text, err := credsText(map[string]string{"role": JobRoleName, "inbox": JobInbox(task), "node": s.Node, "task": task,
		"run": strconv.FormatUint(run, 10), "user": pub, "expires": expires.UTC().Format(time.RFC3339)}, tok, seed)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if err := writeFile(tmp, text); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
