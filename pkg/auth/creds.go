package auth

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/gpuq/gpuq/pkg/api"
)

// Creds is a credentials file: a .creds file (user JWT and seed) written
// by Init or MintJob, or a plain .nk user seed, with what gpuq needs
// besides in comment lines ("# role: ...").
type Creds struct {
	Path  string
	Role  string // "job" for a job's own credential
	Inbox string // "" when the file names none
	Team  string // ci-<team>: the team the request API is scoped to
	User  string // the public key
	JWT   bool   // a user JWT (.creds), not a bare seed
	// Node, Task and Run: the run a job credential acts for.
	Node, Task string
	Run        uint64
}

// Job is the run a job credential acts for; nil for any other.
func (c *Creds) Job() *api.Job {
	if c == nil || c.Role != JobRoleName || c.Task == "" {
		return nil
	}
	return &api.Job{Node: c.Node, Task: c.Task, Run: c.Run}
}

// LoadCreds reads and checks a credentials file.
func LoadCreds(path string) (*Creds, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	defer wipe(data)
	c := &Creds{Path: path}
	if bytes.Contains(data, []byte("BEGIN NATS USER JWT")) {
		tok, err := jwt.ParseDecoratedJWT(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		uc, err := jwt.DecodeUserClaims(tok)
		if err != nil {
			return nil, fmt.Errorf("%s: not a user JWT: %w", path, err)
		}
		kp, err := jwt.ParseDecoratedUserNKey(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		pub, _ := kp.PublicKey()
		kp.Wipe()
		if pub != uc.Subject {
			return nil, fmt.Errorf("%s: the seed is not the JWT's user", path)
		}
		c.User, c.JWT = pub, true
	} else {
		kp, err := nkeys.ParseDecoratedNKey(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer kp.Wipe()
		if c.User, err = kp.PublicKey(); err != nil || !nkeys.IsValidPublicUserKey(c.User) {
			return nil, fmt.Errorf("%s: not an nkey user seed (it must start with SU)", path)
		}
	}
	meta := comments(data)
	c.Role, c.Inbox, c.Team, c.Node, c.Task = meta["role"], meta["inbox"], meta["team"], meta["node"], meta["task"]
	if r := meta["run"]; r != "" {
		if c.Run, err = strconv.ParseUint(r, 10, 64); err != nil {
			return nil, fmt.Errorf("%s: run %q is not a sequence", path, r)
		}
	}
	if c.Inbox != "" && (strings.ContainsAny(c.Inbox, " \t*>") || strings.HasSuffix(c.Inbox, ".")) {
		return nil, fmt.Errorf("%s: inbox %q is not a subject prefix", path, c.Inbox)
	}
	return c, nil
}

// comments reads the "# key: value" lines of a credentials file.
func comments(data []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "#")
		if !ok {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if k = strings.TrimSpace(k); out[k] == "" {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}

// Options are the connection options of these credentials: the user JWT
// and seed (or the bare nkey), and the inbox prefix.
func (c *Creds) Options() ([]nats.Option, error) {
	if c == nil {
		return nil, nil
	}
	var opts []nats.Option
	if c.JWT {
		opts = append(opts, nats.UserCredentials(c.Path))
	} else {
		o, err := nats.NkeyOptionFromSeed(c.Path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Path, err)
		}
		opts = append(opts, o)
	}
	if c.Inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.Inbox))
	}
	return opts, nil
}

// TLSFiles are PEM files: CA verifies the peer, Cert and Key are this
// side's certificate (a server's; a client's for mutual TLS).
type TLSFiles struct {
	CA, Cert, Key string
}

// Empty is true when no file is given.
func (t TLSFiles) Empty() bool { return t.CA == "" && t.Cert == "" && t.Key == "" }

// NATSOptions are the client options for NATS over TLS: the CA to verify
// the server with and, with Cert and Key, a client certificate.
func (t TLSFiles) NATSOptions() ([]nats.Option, error) {
	if t.Empty() {
		return nil, nil
	}
	if (t.Cert == "") != (t.Key == "") {
		return nil, errors.New("a TLS certificate needs its key and a key its certificate")
	}
	var opts []nats.Option
	if t.CA != "" {
		if _, err := certPool(t.CA); err != nil {
			return nil, err
		}
		opts = append(opts, nats.RootCAs(t.CA))
	}
	if t.Cert != "" {
		opts = append(opts, nats.ClientCert(t.Cert, t.Key))
	}
	return opts, nil
}

// ServerConfig is a TLS configuration for a server (the HTTP API): the
// certificate and key, and with a CA, client certificates verified when
// given.
func (t TLSFiles) ServerConfig() (*tls.Config, error) {
	if t.Cert == "" || t.Key == "" {
		return nil, errors.New("a TLS server needs both a certificate and a key")
	}
	cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.CA != "" {
		pool, err := certPool(t.CA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

func certPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", path)
	}
	return pool, nil
}
