package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// Rotated is what Rotate wrote: the files, and the public keys it revoked
// or removed from the account.
type Rotated struct {
	Files   []string
	Revoked []string // old users' public keys, revoked in the account JWT
	Removed []string // old job signing keys, removed from the account
}

// Rotate makes new credentials for each name under dir, an auth directory
// of Init, keeping its operator, system and gpuq accounts (keys/), so
// that the server's JetStream data, which lives under the account's
// public key, stays where it is:
//
//   - a role (submitter, scheduler, advisor, notifier, auditor, admin, agent-<node>,
//     ci-<team>): a new user key and JWT in creds/<role>.creds, and the
//     old user revoked in the account JWT; a role that does not exist yet
//     is added (a new ci-<team> with its HTTP token, a new agent-<node>
//     with its job signing key);
//   - jobs-<node>: a new scoped signing key for node's agent in
//     creds/agent-<node>.jobs.nk, and the old one removed from the account
//     (the credentials it minted stop working).
//
// It rewrites nats-auth.conf with the account JWT signed again by the
// operator. The server applies it on a configuration reload (SIGHUP,
// nats-server --signal reload): revoked users and users of a removed key
// are disconnected. Each rotated service is then restarted with its new
// file.
func Rotate(dir string, names []string) (*Rotated, error) {
	if len(names) == 0 {
		return nil, errors.New("name at least one role (or jobs-<node>) to rotate")
	}
	conf, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, err
	}
	opJWT, sysPub, accounts, err := parseServerConfig(string(conf))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ConfigFile), err)
	}
	op, err := loadSeed(filepath.Join(dir, KeysDir, "operator.nk"))
	if err != nil {
		return nil, err
	}
	acc, err := loadSeed(filepath.Join(dir, KeysDir, "account.nk"))
	if err != nil {
		return nil, err
	}
	accPub, _ := acc.PublicKey()
	accJWT, ok := accounts[accPub]
	if !ok {
		return nil, fmt.Errorf("%s does not hold the account of keys/account.nk (%s)", ConfigFile, accPub)
	}
	ac, err := jwt.DecodeAccountClaims(accJWT)
	if err != nil {
		return nil, err
	}
	out := &Rotated{}
	write := func(path, text string) error {
		tmp := path + ".new"
		_ = os.Remove(tmp)
		if err := writeFile(tmp, text); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		out.Files = append(out.Files, path)
		return nil
	}
	newJobKey := func(node string) error {
		path := JobSignerPath(dir, node)
		if old, err := LoadJobSigner(path); err == nil {
			if pub, _ := old.kp.PublicKey(); pub != "" {
				ac.SigningKeys.Remove(pub)
				out.Removed = append(out.Removed, pub)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		sk, err := nkeys.CreateAccount()
		if err != nil {
			return err
		}
		skPub, _ := sk.PublicKey()
		seed, _ := sk.Seed()
		ac.SigningKeys.AddScopedSigner(jobScope(skPub, node))
		return write(path, jobSignerText(node, accPub, skPub, seed))
	}
	for _, name := range names {
		if node, ok := strings.CutPrefix(name, "jobs-"); ok {
			if err := CheckName("node", node); err != nil {
				return nil, err
			}
			if err := newJobKey(node); err != nil {
				return nil, err
			}
			continue
		}
		r, err := roleNamed(name)
		if err != nil {
			return nil, err
		}
		path := CredsPath(dir, r.Name)
		old, err := LoadCreds(path)
		switch {
		case err == nil:
			ac.RevokeAt(old.User, time.Now())
			out.Revoked = append(out.Revoked, old.User)
		case errors.Is(err, fs.ErrNotExist):
			// A new team or node.
			if r.Team != "" {
				if tp := filepath.Join(dir, TokensDir, r.Team); !exists(tp) {
					tok, err := NewToken()
					if err != nil {
						return nil, err
					}
					if err := write(tp, tok+"\n"); err != nil {
						return nil, err
					}
				}
			}
			if node, ok := strings.CutPrefix(r.Name, "agent-"); ok && !exists(JobSignerPath(dir, node)) {
				if err := newJobKey(node); err != nil {
					return nil, err
				}
			}
		default:
			return nil, err
		}
		text, err := roleCreds(r, acc)
		if err != nil {
			return nil, err
		}
		if err := write(path, text); err != nil {
			return nil, err
		}
	}
	if accounts[accPub], err = ac.Encode(op); err != nil {
		return nil, err
	}
	if err := write(filepath.Join(dir, ConfigFile), ServerConfig(opJWT, sysPub, accounts)); err != nil {
		return nil, err
	}
	return out, nil
}

// roleNamed is the role of that name (its team or node taken from it).
func roleNamed(name string) (Role, error) {
	var teams, nodes []string
	if t, ok := strings.CutPrefix(name, "ci-"); ok {
		teams = []string{t}
	} else if n, ok := strings.CutPrefix(name, "agent-"); ok {
		nodes = []string{n}
	}
	for _, l := range [][]string{teams, nodes} {
		for _, s := range l {
			if err := CheckName("name", s); err != nil {
				return Role{}, err
			}
		}
	}
	for _, r := range Roles(teams, nodes) {
		if r.Name == name {
			return r, nil
		}
	}
	return Role{}, fmt.Errorf("%q is not a role: submitter, scheduler, advisor, notifier, auditor, admin, agent-<node>, ci-<team> (or jobs-<node>, a job signing key)", name)
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

func loadSeed(path string) (nkeys.KeyPair, error) {
	kp, _, err := loadSeedMeta(path)
	return kp, err
}

// loadSeedMeta reads a seed file: the key pair and the file's "# key:
// value" comments (see comments); the file's bytes are wiped after.
func loadSeedMeta(path string) (nkeys.KeyPair, map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	defer wipe(data)
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return kp, comments(data), nil
}

var (
	confOperator = regexp.MustCompile(`(?m)^operator: "([^"]+)"$`)
	confSystem   = regexp.MustCompile(`(?m)^system_account: "([^"]+)"$`)
	confAccount  = regexp.MustCompile(`(?m)^\s+"(A[A-Z0-9]+)": "([^"]+)"$`)
)

// parseServerConfig reads back what ServerConfig wrote.
func parseServerConfig(s string) (operatorJWT, systemAccount string, accounts map[string]string, err error) {
	o, sys := confOperator.FindStringSubmatch(s), confSystem.FindStringSubmatch(s)
	if o == nil || sys == nil {
		return "", "", nil, errors.New("no operator or system_account in it: not written by gpuq auth init (an older one wrote nkey users; make a new directory)")
	}
	accounts = map[string]string{}
	for _, m := range confAccount.FindAllStringSubmatch(s, -1) {
		accounts[m[1]] = m[2]
	}
	return o[1], sys[1], accounts, nil
}
