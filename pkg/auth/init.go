package auth

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// Files under an auth directory.
const (
	ConfigFile = "nats-auth.conf" // the server's operator, accounts and resolver
	CredsDir   = "creds"          // <role>.creds: one user JWT and seed per role; agent-<node>.jobs.nk
	KeysDir    = "keys"           // operator.nk, account.nk, system.nk: what signs the rest
	TokensDir  = "tokens"         // <team>, admin: HTTP bearer tokens
	AdminToken = "admin"
	// AccountName is the NATS account every gpuq role and job is a user of.
	AccountName = "GPUQ"
)

// CredsPath is the credentials file of role under dir.
func CredsPath(dir, role string) string { return filepath.Join(dir, CredsDir, role+".creds") }

// JobSignerPath is the job signing key of node's agent under dir.
func JobSignerPath(dir, node string) string {
	return filepath.Join(dir, CredsDir, "agent-"+node+".jobs.nk")
}

// Response permission of a role that answers requests: one reply per
// request, within nats-server's default of two minutes.
var responses = &jwt.ResponsePermission{MaxMsgs: 1, Expires: 2 * time.Minute}

// Init writes under dir, every file with mode 0600 (directories 0700),
// with NATS's decentralised (JWT) authentication:
//
//   - ConfigFile: the operator JWT, the system account, and a memory
//     resolver preloaded with the two account JWTs (the system account's
//     and AccountName's); include it in a nats-server configuration;
//   - creds/<role>.creds: each role's user JWT (its permissions, signed by
//     the account) and seed, as the nats CLI reads them (--creds), with the
//     role, its inbox prefix and its team in comment lines;
//   - creds/agent-<node>.jobs.nk: the scoped signing key of node's agent,
//     with which it mints its jobs' credentials (JobRole, MintJob);
//   - keys/operator.nk, keys/account.nk, keys/system.nk: the seeds that
//     signed the JWTs, for re-signing (rotation, revocation); keep them
//     offline;
//   - tokens/<team> and tokens/admin, the HTTP bearer tokens.
//
// It refuses a directory that already holds credentials: rotating is a
// new directory (or removing the old files first), so that nothing is
// overwritten by accident.
func Init(dir string, teams, nodes []string) ([]Role, error) {
	for _, t := range teams {
		if err := CheckName("team", t); err != nil {
			return nil, err
		}
		if t == AdminToken {
			return nil, fmt.Errorf("team %q: the name is reserved for the admin token", t)
		}
	}
	for _, n := range nodes {
		if err := CheckName("node", n); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{CredsDir, KeysDir} {
		if _, err := os.Stat(filepath.Join(dir, d)); err == nil {
			return nil, fmt.Errorf("%s already exists: move it away (or remove it) to make new credentials", filepath.Join(dir, d))
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	for _, d := range []string{dir, filepath.Join(dir, CredsDir), filepath.Join(dir, KeysDir), filepath.Join(dir, TokensDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	op, err := nkeys.CreateOperator()
	if err != nil {
		return nil, err
	}
	sys, err := nkeys.CreateAccount()
	if err != nil {
		return nil, err
	}
	acc, err := nkeys.CreateAccount()
	if err != nil {
		return nil, err
	}
	opPub, _ := op.PublicKey()
	sysPub, _ := sys.PublicKey()
	accPub, _ := acc.PublicKey()

	// The gpuq account: JetStream without limits of its own, and a scoped
	// signing key per agent for its jobs.
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = AccountName
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit,
		Streams: jwt.NoLimit, Consumer: jwt.NoLimit, MaxAckPending: jwt.NoLimit,
		MemoryMaxStreamBytes: jwt.NoLimit, DiskMaxStreamBytes: jwt.NoLimit}
	for _, n := range nodes {
		sk, err := nkeys.CreateAccount()
		if err != nil {
			return nil, err
		}
		skPub, _ := sk.PublicKey()
		ac.SigningKeys.AddScopedSigner(jobScope(skPub, n))
		seed, _ := sk.Seed()
		if err := writeFile(JobSignerPath(dir, n), jobSignerText(n, accPub, skPub, seed)); err != nil {
			return nil, err
		}
	}
	accJWT, err := ac.Encode(op)
	if err != nil {
		return nil, err
	}
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(op)
	if err != nil {
		return nil, err
	}
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "gpuq"
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(op)
	if err != nil {
		return nil, err
	}

	roles := Roles(teams, nodes)
	for _, r := range roles {
		text, err := roleCreds(r, acc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Name, err)
		}
		if err := writeFile(CredsPath(dir, r.Name), text); err != nil {
			return nil, err
		}
	}
	if err := writeFile(filepath.Join(dir, ConfigFile), ServerConfig(opJWT, sysPub, map[string]string{sysPub: sysJWT, accPub: accJWT})); err != nil {
		return nil, err
	}
	for name, kp := range map[string]nkeys.KeyPair{"operator": op, "account": acc, "system": sys} {
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		text := fmt.Sprintf("# gpuq %s identity key: signs the JWTs of nats-auth.conf and creds/; keep it offline (mode 0600)\n# key: %s\n%s\n", name, pub, seed)
		if err := writeFile(filepath.Join(dir, KeysDir, name+".nk"), text); err != nil {
			return nil, err
		}
	}
	for _, name := range append(append([]string{}, teams...), AdminToken) {
		tok, err := NewToken()
		if err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(dir, TokensDir, name), tok+"\n"); err != nil {
			return nil, err
		}
	}
	return roles, nil
}

// jobSignerText is the file of node's job signing key.
func jobSignerText(node, accPub, skPub string, seed []byte) string {
	return fmt.Sprintf("# gpuq job signing key of agent-%s: keep secret (mode 0600)\n"+
		"# The agent signs its jobs' credentials with it (gpuq-agent --job-signer THIS_FILE).\n"+
		"# node: %s\n# account: %s\n# key: %s\n%s\n", node, node, accPub, skPub, seed)
}

// jobScope is the scoped signing key of node's agent: a user it signs has
// JobRole(node)'s permissions and no others, whatever its JWT says.
func jobScope(key, node string) *jwt.UserScope {
	s := jwt.NewUserScope()
	s.Key, s.Role = key, "jobs-"+node
	s.Description = "gpuq jobs started on " + node
	r := JobRole(node)
	s.Template.Pub.Allow.Add(r.PubAllow...)
	s.Template.Sub.Allow.Add(r.SubAllow...)
	return s
}

// roleCreds is r's credentials file: a new user key, its JWT with r's
// permissions signed by the account key, and what gpuq reads besides in
// comment lines.
func roleCreds(r Role, acc nkeys.KeyPair) (string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", err
	}
	defer kp.Wipe()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	uc := jwt.NewUserClaims(pub)
	uc.Name = r.Name
	uc.Pub.Allow.Add(r.PubAllow...)
	uc.Pub.Deny.Add(r.PubDeny...)
	uc.Sub.Allow.Add(r.SubAllow...)
	if r.Responses {
		uc.Resp = responses
	}
	tok, err := uc.Encode(acc)
	if err != nil {
		return "", err
	}
	return credsText(map[string]string{"role": r.Name, "inbox": Inbox(r.Name), "team": r.Team, "user": pub}, tok, seed)
}

// credsText is a .creds file (jwt.FormatUserConfig, what the nats CLI
// reads with --creds) after comment lines "# key: value" (LoadCreds).
func credsText(meta map[string]string, tok string, seed []byte) (string, error) {
	body, err := jwt.FormatUserConfig(tok, seed)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("# gpuq credentials: keep secret (mode 0600)\n")
	keys := make([]string, 0, len(meta))
	for k, v := range meta {
		if v != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "# %s: %s\n", k, meta[k])
	}
	if in := meta["inbox"]; in != "" {
		fmt.Fprintf(&b, "# nats CLI: nats --creds THIS_FILE --inbox-prefix %s ...\n", in)
	}
	b.WriteString("\n")
	b.Write(body)
	return b.String(), nil
}

// NewToken is 32 random bytes, hex.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "gpuq_" + hex.EncodeToString(b), nil
}

func writeFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// MaxControlLine is the nats-server max_control_line gpuq's roles need:
// their CONNECT lines carry user JWTs of up to about 4.5 KiB (the default
// limit is 4 KiB). gpuq dev's embedded server sets it too.
const MaxControlLine = 16 << 10

// ServerConfig is the part of a nats-server configuration that sets up
// operator mode: the operator JWT, the system account, and a memory
// resolver preloaded with the account JWTs (public key → JWT). Clients
// without a user JWT of one of these accounts, signed by the account or
// one of its signing keys, are refused.
func ServerConfig(operatorJWT, systemAccount string, accounts map[string]string) string {
	var b strings.Builder
	b.WriteString("# gpuq's NATS operator and accounts (generated by `gpuq auth init`). It holds\n")
	b.WriteString("# JWTs and public keys only. Include it in a nats-server configuration:\n")
	b.WriteString("#   include ./" + ConfigFile + "\n")
	b.WriteString("# The roles are users of account " + AccountName + "; their permissions are in their\n")
	b.WriteString("# JWTs (creds/<role>.creds), a job's in the scoped signing key of its agent.\n")
	// A role's CONNECT carries its user JWT, permissions and all: the
	// largest (the notifier's, the scheduler's) pass nats-server's default
	// 4 KiB control line, which closes the connection without a word.
	b.WriteString("max_control_line: " + strconv.Itoa(MaxControlLine) + "\n")
	fmt.Fprintf(&b, "operator: %q\n", operatorJWT)
	fmt.Fprintf(&b, "system_account: %q\n", systemAccount)
	b.WriteString("resolver: MEMORY\nresolver_preload: {\n")
	keys := make([]string, 0, len(accounts))
	for k := range accounts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %q: %q\n", k, accounts[k])
	}
	b.WriteString("}\n")
	return b.String()
}
