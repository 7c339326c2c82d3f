package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/events"
)

// The identity of a data directory's event log. The embedded server
// keeps JetStream's data by NATS account (<data>/jetstream/jetstream/
// <account>/): without --auth the global account "$G", with --auth the
// gpuq account of the auth directory (its public key). So `gpuq dev
// --auth A --data D` on a D first used without --auth found no stream
// under its account and made a new, empty log beside the other one — and
// its agents met the other log's runs under D/agents (issue 22). gpuq dev
// records which log a data directory holds in D/log.json on first use
// and refuses another auth mode (or another auth directory's account) on
// it.

// identityFile is the record, under the data directory.
const identityFile = "log.json"

// Auth modes of a data directory.
const (
	authNone = "none"
	authOn   = "auth"
)

// noAuthAccount is the NATS account of a server without accounts.
const noAuthAccount = "$G"

// dataIdentity is <data>/log.json.
type dataIdentity struct {
	Auth    string `json:"auth"`               // authNone or authOn
	Account string `json:"account"`            // the NATS account holding the log
	AuthDir string `json:"auth_dir,omitempty"` // --auth when written (informative)
	Server  string `json:"server"`             // the embedded server's name
	Stream  string `json:"stream"`             // the audit stream
	// Log is the stream's identity (events.Identifier: its name and
	// creation instant), the one the agents record in their runs.
	Log   string    `json:"log,omitempty"`
	Since time.Time `json:"since"` // first use
}

// wantIdentity is the identity of the log this gpuq dev would use.
func wantIdentity(f devFlags) (dataIdentity, error) {
	id := dataIdentity{Auth: authNone, Account: noAuthAccount, Server: "gpuq-dev", Stream: events.StreamName}
	if f.auth == "" {
		return id, nil
	}
	key, err := auth.AccountKey(f.auth)
	if err != nil {
		return id, invalid("auth", err.Error())
	}
	dir, _ := filepath.Abs(f.auth)
	id.Auth, id.Account, id.AuthDir = authOn, key, dir
	return id, nil
}

// describe names the way of running gpuq dev that uses the log of id.
func (id dataIdentity) describe() string {
	if id.Auth != authOn {
		return fmt.Sprintf("gpuq dev without --auth (NATS account %s)", id.Account)
	}
	s := "gpuq dev --auth"
	if id.AuthDir != "" {
		s += " " + id.AuthDir
	}
	return fmt.Sprintf("%s (NATS account %s)", s, id.Account)
}

// checkDataIdentity refuses (exit 2) a data directory whose log is
// another account's than want's, naming both and the way out. It returns
// the directory's record (nil when it has none yet). A directory written
// before the record existed is judged by its JetStream store: the
// accounts that hold the audit stream there.
func checkDataIdentity(dir string, want dataIdentity) (*dataIdentity, error) {
	var rec *dataIdentity
	b, err := os.ReadFile(filepath.Join(dir, identityFile))
	switch {
	case err == nil:
		rec = &dataIdentity{}
		if err := json.Unmarshal(b, rec); err != nil || rec.Account == "" {
			return nil, &exitError{exitInvalid, fmt.Errorf("data directory %s: %s is not a record of gpuq dev (%v); move it away, or give this one another --data",
				dir, identityFile, err)}
		}
		if rec.Account == want.Account {
			return rec, nil
		}
		return nil, otherLog(dir, *rec, want)
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	held := storedAccounts(dir)
	if len(held) == 0 || slices.Contains(held, want.Account) {
		return nil, nil
	}
	found := dataIdentity{Auth: authOn, Account: held[0]}
	if held[0] == noAuthAccount {
		found.Auth = authNone
	}
	return nil, otherLog(dir, found, want)
}

// otherLog is the refusal of a data directory holding have's log to a
// gpuq dev that would use want's.
func otherLog(dir string, have, want dataIdentity) error {
	return &exitError{exitInvalid, fmt.Errorf("data directory %s holds the event log of `%s`; this `%s` would start another, empty log beside it, "+
		"and its agents would meet the first log's runs: give it a data directory of its own (another --data), or run it as before",
		dir, have.describe(), want.describe())}
}

// storedAccounts are the NATS accounts whose audit stream the JetStream
// store under dir holds, sorted ($G first).
func storedAccounts(dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, "jetstream", "jetstream", "*", "streams", events.StreamName))
	var out []string
	for _, p := range m {
		out = append(out, filepath.Base(filepath.Dir(filepath.Dir(p))))
	}
	slices.Sort(out)
	return out
}

// writeDataIdentity records id in dir (atomically: a temporary file
// renamed).
func writeDataIdentity(dir string, id dataIdentity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, identityFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, identityFile))
}

// recordIdentity writes the data directory's record once its log is
// open: on first use, and whenever the log's identity changed (its store
// was removed or replaced: said in the log, since the agents then leave
// the old log's runs alone).
func recordIdentity(ctx context.Context, dir string, want dataIdentity, rec *dataIdentity, l events.Identifier, logger zerolog.Logger) error {
	id, err := l.Identity(ctx)
	if err != nil {
		return fmt.Errorf("event log identity: %w", err)
	}
	want.Log, want.Since = id, time.Now().UTC()
	if rec != nil {
		if rec.Log == id && rec.Auth == want.Auth && rec.AuthDir == want.AuthDir {
			return nil
		}
		if rec.Log != "" && rec.Log != id {
			logger.Warn().Str("data", dir).Str("was", rec.Log).Str("now", id).
				Msg("gpuq dev: the data directory's event log is not the one it recorded (its JetStream store was removed or replaced); runs of the old log are left alone")
		} else {
			want.Since = rec.Since
		}
	}
	return writeDataIdentity(dir, want)
}
