package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Caller is who a request acts for: a team, or the admin (every team).
type Caller struct {
	Team  string
	Admin bool
}

// May is whether the caller may see or change a task of team.
func (c Caller) May(team string) bool { return c.Admin || c.Team == team }

// Name is who the credential is, as the log records an act of it (a
// cancel's by): "admin" for the admin, "team:<team>" for a team's.
func (c Caller) Name() string {
	if c.Admin {
		return AdminToken
	}
	return "team:" + c.Team
}

// Tokens are the HTTP API's bearer tokens: the file name under the tokens
// directory is the team (admin: the admin). Only their SHA-256 digests
// are kept in memory.
type Tokens struct {
	byDigest map[[32]byte]Caller
}

// Errors of Tokens.Caller: no usable Authorization header (HTTP 401), or
// a token that is not one of ours (401 too).
var (
	ErrNoToken  = errors.New("missing bearer token: send Authorization: Bearer <token> (tokens/<team> of `gpuq auth init`)")
	ErrBadToken = errors.New("unknown bearer token")
)

// LoadTokens reads every file in dir (an auth directory's tokens/, or a
// directory of the same shape); each holds one token.
func LoadTokens(dir string) (*Tokens, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	t := &Tokens{byDigest: map[[32]byte]Caller{}}
	for _, e := range ents {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		tok := strings.TrimSpace(string(b))
		if len(tok) < 16 {
			return nil, fmt.Errorf("%s: a token must have at least 16 characters", filepath.Join(dir, e.Name()))
		}
		c := Caller{Team: e.Name()}
		if e.Name() == AdminToken {
			c = Caller{Admin: true}
		} else if err := CheckName("team", e.Name()); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, e.Name()), err)
		}
		t.byDigest[sha256.Sum256([]byte(tok))] = c
	}
	if len(t.byDigest) == 0 {
		return nil, fmt.Errorf("%s: no tokens in it", dir)
	}
	return t, nil
}

// Caller resolves an Authorization header value. The scheme is matched
// case-insensitively ("bearer", "BEARER": RFC 9110 section 11.1) and may be
// followed by several spaces or tabs. Every known digest is compared in
// constant time, so the time taken says nothing about which token came
// close.
func (t *Tokens) Caller(header string) (Caller, error) {
	tok, ok := BearerToken(header)
	if !ok {
		return Caller{}, ErrNoToken
	}
	d := sha256.Sum256([]byte(tok))
	var found Caller
	hit := 0
	for k, c := range t.byDigest {
		if subtle.ConstantTimeCompare(k[:], d[:]) == 1 {
			found, hit = c, 1
		}
	}
	if hit == 0 {
		return Caller{}, ErrBadToken
	}
	return found, nil
}

// BearerToken is the token of an Authorization header value of the Bearer
// scheme, whatever the scheme's case; false when the header is of another
// scheme or carries no token.
func BearerToken(header string) (string, bool) {
	header = strings.TrimSpace(header)
	i := strings.IndexAny(header, " \t")
	if i < 0 || !strings.EqualFold(header[:i], "Bearer") {
		return "", false
	}
	tok := strings.TrimSpace(header[i:])
	return tok, tok != ""
}
