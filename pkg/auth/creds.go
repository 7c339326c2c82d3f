package auth

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Creds is a credentials file written by Init: an nkey seed with the
// role, inbox prefix and team in comment lines.
type Creds struct {
	Path  string
	Role  string
	Inbox string // "" when the file names none (a plain .nk seed)
	Team  string // ci-<team>: the team the request API is scoped to
	User  string // the public key
}

// LoadCreds reads and checks a credentials file. A file with a user JWT
// (a .creds file of an operator/account setup) is accepted as is.
func LoadCreds(path string) (*Creds, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	defer wipe(data)
	c := &Creds{Path: path}
	if bytes.Contains(data, []byte("BEGIN NATS USER JWT")) {
		return c, nil
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer kp.Wipe()
	if c.User, err = kp.PublicKey(); err != nil || !nkeys.IsValidPublicUserKey(c.User) {
		return nil, fmt.Errorf("%s: not an nkey user seed (it must start with SU)", path)
	}
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
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "role":
			c.Role = v
		case "inbox":
			c.Inbox = v
		case "team":
			c.Team = v
		}
	}
	if c.Inbox != "" && (strings.ContainsAny(c.Inbox, " \t*>") || strings.HasSuffix(c.Inbox, ".")) {
		return nil, fmt.Errorf("%s: inbox %q is not a subject prefix", path, c.Inbox)
	}
	return c, nil
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}

// Options are the connection options of these credentials: the nkey (or
// the JWT and seed) and the role's inbox prefix.
func (c *Creds) Options() ([]nats.Option, error) {
	if c == nil {
		return nil, nil
	}
	if c.User == "" {
		return []nats.Option{nats.UserCredentials(c.Path)}, nil
	}
	o, err := nats.NkeyOptionFromSeed(c.Path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Path, err)
	}
	opts := []nats.Option{o}
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
