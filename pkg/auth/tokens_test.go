package auth_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/auth"
)

// TestBearerSchemeCaseInsensitive: the scheme of an Authorization header
// is case-insensitive (RFC 9110 section 11.1); before, only "Bearer " was
// accepted and "bearer X" was refused as no token.
func TestBearerSchemeCaseInsensitive(t *testing.T) {
	dir := t.TempDir()
	const vision, admin = "vision-token-0123456789", "admin-token-0123456789"
	for name, tok := range map[string]string{"vision": vision, auth.AdminToken: admin} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	toks, err := auth.LoadTokens(dir)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		header  string
		want    auth.Caller
		wantErr error
	}{
		"Bearer":                {header: "Bearer " + vision, want: auth.Caller{Team: "vision"}},
		"bearer in lower case":  {header: "bearer " + vision, want: auth.Caller{Team: "vision"}},
		"BEARER in upper case":  {header: "BEARER " + admin, want: auth.Caller{Admin: true}},
		"mixed case":            {header: "bEaReR " + vision, want: auth.Caller{Team: "vision"}},
		"several spaces":        {header: "Bearer   " + vision, want: auth.Caller{Team: "vision"}},
		"a tab":                 {header: "Bearer\t" + vision, want: auth.Caller{Team: "vision"}},
		"empty":                 {header: "", wantErr: auth.ErrNoToken},
		"scheme alone":          {header: "Bearer", wantErr: auth.ErrNoToken},
		"scheme and blanks":     {header: "Bearer   ", wantErr: auth.ErrNoToken},
		"no space after scheme": {header: "Bearer" + vision, wantErr: auth.ErrNoToken},
		"another scheme":        {header: "Basic " + vision, wantErr: auth.ErrNoToken},
		"unknown token":         {header: "bearer not-a-token-of-ours", wantErr: auth.ErrBadToken},
		"token of another case": {header: "Bearer VISION-TOKEN-0123456789", wantErr: auth.ErrBadToken},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := toks.Caller(tc.header)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Caller(%q): error %v, want %v", tc.header, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Caller(%q) (-want +got):\n%s", tc.header, diff)
			}
		})
	}
}

// TestCallerName: who a credential is, as the log records it.
func TestCallerName(t *testing.T) {
	cases := map[string]struct {
		c    auth.Caller
		want string
	}{
		"admin": {auth.Caller{Admin: true}, "admin"},
		"team":  {auth.Caller{Team: "vision"}, "team:vision"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.c.Name(); got != tc.want {
				t.Errorf("Name() = %q, want %q", got, tc.want)
			}
		})
	}
}
