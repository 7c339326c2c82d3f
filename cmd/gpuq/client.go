package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/svcmain"
)

// clientFlags are shared by every client command.
type clientFlags struct {
	url   string
	json  bool
	creds string
	tls   auth.TLSFiles
	team  string   // from a ci-<team> credentials file: the API is scoped to it
	job   *api.Job // from a job's own credentials: the job API of its run
	// refused gets the server's permission errors (api.Client.Refused).
	refused chan error
}

func (f *clientFlags) add(c *cobra.Command) {
	def := os.Getenv("GPUQ_NATS_URL")
	if def == "" {
		def = "nats://127.0.0.1:4222"
	}
	c.Flags().StringVar(&f.url, "nats", def, "NATS server URL (env GPUQ_NATS_URL)")
	c.Flags().BoolVar(&f.json, "json", false, "print JSON")
	c.Flags().StringVar(&f.creds, "creds", os.Getenv("GPUQ_NATS_CREDS"), "NATS credentials file (env GPUQ_NATS_CREDS), e.g. creds/ci-<team>.creds of gpuq auth init; in a job, its own")
	c.Flags().StringVar(&f.tls.CA, "nats-ca", os.Getenv("GPUQ_NATS_CA"), "PEM CA to verify the NATS server with (env GPUQ_NATS_CA)")
	c.Flags().StringVar(&f.tls.Cert, "nats-cert", os.Getenv("GPUQ_NATS_CERT"), "PEM client certificate for NATS (env GPUQ_NATS_CERT)")
	c.Flags().StringVar(&f.tls.Key, "nats-key", os.Getenv("GPUQ_NATS_KEY"), "PEM key of --nats-cert (env GPUQ_NATS_KEY)")
}

func (f *clientFlags) connect() (*nats.Conn, error) {
	opts, err := svcmain.NATSOptions(f.creds, f.tls)
	if err != nil {
		field := "creds"
		if f.creds == "" {
			field = "nats-ca"
		}
		return nil, invalid(field, err.Error())
	}
	if f.creds != "" {
		c, _ := auth.LoadCreds(f.creds)
		f.team, f.job = c.Team, c.Job()
	}
	f.refused = make(chan error, 8)
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case f.refused <- err:
			default:
			}
			return
		}
		fmt.Fprintln(os.Stderr, "gpuq: nats:", err)
	}))
	nc, err := nats.Connect(f.url, append(opts, nats.Name("gpuq-cli"), nats.Timeout(5*time.Second))...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w (start one with `gpuq dev`, or set --nats / GPUQ_NATS_URL)", f.url, err)
	}
	return nc, nil
}

// scoped reports whether the credentials are a team's (ci-<team>) or a
// job's: they reach the request API for that team, or the job API of that
// run, never the log itself.
func (f *clientFlags) scoped() bool {
	if f.creds == "" {
		return false
	}
	c, err := auth.LoadCreds(f.creds)
	return err == nil && (c.Team != "" || c.Job() != nil)
}

func (f *clientFlags) client() (*api.Client, func(), error) {
	nc, err := f.connect()
	if err != nil {
		return nil, nil, err
	}
	return &api.Client{NC: nc, Timeout: 15 * time.Second, Team: f.team, Job: f.job, Refused: f.refused}, nc.Close, nil
}

// withClient connects, runs fn with the API client and closes the
// connection after: the shell of every command that makes API calls.
func (f *clientFlags) withClient(fn func(*api.Client) error) error {
	cl, done, err := f.client()
	if err != nil {
		return err
	}
	defer done()
	return fn(cl)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
