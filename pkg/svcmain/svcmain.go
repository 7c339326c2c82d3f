package svcmain

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/policy/policyflag"
)

// DefaultNATSURL is where services look for NATS when neither --nats nor
// GPUQ_NATS_URL says otherwise.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// StartupTimeout bounds how long Connect waits for NATS and JetStream.
const StartupTimeout = 60 * time.Second

// LogLevels are the accepted --log-level values (zerolog's names).
var LogLevels = []string{"trace", "debug", "info", "warn", "error", "fatal", "panic", "disabled"}

// Flags is the command line of a service: a cobra command whose flags
// default to an environment variable, so that the services and the gpuq
// CLI share one flag library (cobra and its pflag) and one help format.
type Flags struct {
	cmd    *cobra.Command
	fs     *pflag.FlagSet
	name   string
	envErr map[string]string // flag name -> message, for env values that did not parse
}

// NewFlags returns an empty flag set for the binary called name.
func NewFlags(name string) *Flags {
	cmd := &cobra.Command{
		Use:           name + " [flags]",
		Short:         name,
		Long:          "Usage of " + name + ": every flag also reads the environment variable named in brackets; a flag given on the command line wins.",
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs, // checked by parse, to name the field
		// Completion is the CLI's business; a service has only flags.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	cmd.Flags().SortFlags = false
	return &Flags{cmd: cmd, fs: cmd.Flags(), name: name, envErr: map[string]string{}}
}

// envDefault reads env into def with parse; a bad value is remembered and
// reported by Parse unless the flag is given on the command line.
func envDefault[T any](f *Flags, name, env string, def T, parse func(string) (T, error)) T {
	s, ok := os.LookupEnv(env)
	if !ok || s == "" {
		return def
	}
	v, err := parse(s)
	if err != nil {
		f.envErr[name] = fmt.Sprintf("%s=%q: %v", env, s, unwrapNum(err))
		return def
	}
	return v
}

func unwrapNum(err error) error {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return ne.Err
	}
	return err
}

func usage(env, u string) string { return fmt.Sprintf("%s [%s]", u, env) }

// String defines a string flag with an environment fallback.
func (f *Flags) String(p *string, name, env, def, u string) {
	f.fs.StringVar(p, name, envDefault(f, name, env, def, func(s string) (string, error) { return s, nil }), usage(env, u))
}

// Int defines an int flag with an environment fallback.
func (f *Flags) Int(p *int, name, env string, def int, u string) {
	f.fs.IntVar(p, name, envDefault(f, name, env, def, strconv.Atoi), usage(env, u))
}

// Float defines a float64 flag with an environment fallback.
func (f *Flags) Float(p *float64, name, env string, def float64, u string) {
	parse := func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }
	f.fs.Float64Var(p, name, envDefault(f, name, env, def, parse), usage(env, u))
}

// Duration defines a duration flag (e.g. 5s, 24h) with an environment
// fallback.
func (f *Flags) Duration(p *time.Duration, name, env string, def time.Duration, u string) {
	f.fs.DurationVar(p, name, envDefault(f, name, env, def, time.ParseDuration), usage(env, u))
}

// Bool defines a bool flag with an environment fallback (1/0, true/false).
func (f *Flags) Bool(p *bool, name, env string, def bool, u string) {
	f.fs.BoolVar(p, name, envDefault(f, name, env, def, strconv.ParseBool), usage(env, u))
}

// Common are the flags every service takes.
type Common struct {
	NATSURL      string
	Replicas     int
	DedupeWindow time.Duration
	LogLevel     string
	Creds        string        // NATS credentials file of this service's role ("" = none)
	TLS          auth.TLSFiles // NATS over TLS: the CA, and a client certificate for mutual TLS
}

// Common defines the shared flags; their values are set by Parse.
func (f *Flags) Common() *Common {
	c := &Common{}
	f.String(&c.NATSURL, "nats", "GPUQ_NATS_URL", DefaultNATSURL, "NATS server URL(s), comma-separated")
	f.Int(&c.Replicas, "stream-replicas", "GPUQ_STREAM_REPLICAS", 1, "replicas of every stream, bucket and object store (3 on a 3-node NATS cluster)")
	f.Duration(&c.DedupeWindow, "dedupe-window", "GPUQ_DEDUPE_WINDOW", events.DefaultDedupeWindow, "how long an idempotency key de-duplicates in the stream")
	f.String(&c.LogLevel, "log-level", "GPUQ_LOG_LEVEL", "info", "log level: "+strings.Join(LogLevels, ", "))
	f.String(&c.Creds, "creds", "GPUQ_NATS_CREDS", "", "NATS credentials of this service's role (creds/<role>.creds of gpuq auth init)")
	f.String(&c.TLS.CA, "nats-ca", "GPUQ_NATS_CA", "", "PEM CA to verify the NATS server with")
	f.String(&c.TLS.Cert, "nats-cert", "GPUQ_NATS_CERT", "", "PEM client certificate for NATS (mutual TLS; with --nats-key)")
	f.String(&c.TLS.Key, "nats-key", "GPUQ_NATS_KEY", "", "PEM key of --nats-cert")
	return c
}

// Parse parses os.Args[1:] and checks the common flags (c may be nil when
// Common was not called). It exits 0 after -h/--help and 2 on a bad flag
// or environment value, naming the field.
func (f *Flags) Parse(c *Common) {
	err := f.parse(os.Args[1:], c)
	var fe *FieldError
	switch {
	case err == nil:
	case errors.Is(err, errHelp):
		os.Exit(0)
	case errors.As(err, &fe):
		f.Invalid(fe.Field, fe.Msg)
	default:
		fmt.Fprintf(os.Stderr, "%s: %v\n", f.name, err)
		fmt.Fprintf(os.Stderr, "Run '%s --help' for the flags.\n", f.name)
		os.Exit(2)
	}
}

// errHelp is parse's answer to -h/--help, after the help was printed.
var errHelp = errors.New("help requested")

// FieldError is a bad value of one flag (or of its environment variable).
type FieldError struct {
	Field string // the flag's name, without dashes
	Msg   string
}

func (e *FieldError) Error() string { return fmt.Sprintf("invalid --%s: %s", e.Field, e.Msg) }

func (f *Flags) parse(args []string, c *Common) error {
	var checked error
	ran := false
	f.cmd.RunE = func(_ *cobra.Command, rest []string) error {
		ran = true
		checked = f.check(rest, c)
		return nil
	}
	f.cmd.SetArgs(args)
	if err := f.cmd.Execute(); err != nil {
		var ive *pflag.InvalidValueError
		if errors.As(err, &ive) {
			return &FieldError{ive.GetFlag().Name, fmt.Sprintf("%q: %v", ive.GetValue(), unwrapNum(ive.Unwrap()))}
		}
		return err
	}
	if !ran {
		return errHelp
	}
	return checked
}

func (f *Flags) check(rest []string, c *Common) error {
	if len(rest) > 0 {
		return &FieldError{"args", fmt.Sprintf("unexpected argument %q (this command takes only flags)", rest[0])}
	}
	set := map[string]bool{}
	f.fs.Visit(func(fl *pflag.Flag) { set[fl.Name] = true })
	var bad []string
	for name := range f.envErr {
		if !set[name] {
			bad = append(bad, name)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return &FieldError{bad[0], f.envErr[bad[0]]}
	}
	if c == nil {
		return nil
	}
	switch {
	case strings.TrimSpace(c.NATSURL) == "":
		return &FieldError{"nats", "must not be empty"}
	case c.Replicas < 1 || c.Replicas > 5:
		return &FieldError{"stream-replicas", "must be between 1 and 5"}
	case c.DedupeWindow < 0:
		return &FieldError{"dedupe-window", "must not be negative"}
	case !validLevel(c.LogLevel):
		return &FieldError{"log-level", fmt.Sprintf("%q is not one of %s", c.LogLevel, strings.Join(LogLevels, ", "))}
	case (c.TLS.Cert == "") != (c.TLS.Key == ""):
		return &FieldError{"nats-cert", "--nats-cert and --nats-key go together"}
	}
	if c.Creds != "" {
		if _, err := auth.LoadCreds(c.Creds); err != nil {
			return &FieldError{"creds", err.Error()}
		}
	}
	for _, p := range [][2]string{{"nats-ca", c.TLS.CA}, {"nats-cert", c.TLS.Cert}, {"nats-key", c.TLS.Key}} {
		if p[1] == "" {
			continue
		}
		if _, err := os.Stat(p[1]); err != nil {
			return &FieldError{p[0], err.Error()}
		}
	}
	return nil
}

// NATSOptions are the connection options of the credentials and TLS files.
func NATSOptions(creds string, t auth.TLSFiles) ([]nats.Option, error) {
	var opts []nats.Option
	if creds != "" {
		c, err := auth.LoadCreds(creds)
		if err != nil {
			return nil, err
		}
		if opts, err = c.Options(); err != nil {
			return nil, err
		}
	}
	to, err := t.NATSOptions()
	if err != nil {
		return nil, err
	}
	return append(opts, to...), nil
}

func validLevel(s string) bool {
	for _, l := range LogLevels {
		if s == l {
			return true
		}
	}
	return false
}

// Invalid reports a bad value of field (a flag name) and exits 2.
func (f *Flags) Invalid(field, msg string) {
	fmt.Fprintf(os.Stderr, "%s: invalid --%s: %s\n", f.name, field, msg)
	fmt.Fprintf(os.Stderr, "Run '%s --help' for the flags.\n", f.name)
	os.Exit(2)
}

// Notify receives what Connect has to say while it waits or after it has
// connected (disconnects, reconnects). A nil err is news (log at info),
// a non-nil one a problem (log at warn).
type Notify func(msg string, err error)

// Connect connects to NATS (retrying a failed first connect, reconnecting
// forever) and opens the audit log, retrying while JetStream is not ready,
// for up to StartupTimeout. The caller closes the connection.
func Connect(ctx context.Context, name string, c *Common, notify Notify) (*nats.Conn, *jetstream.Log, error) {
	if notify == nil {
		notify = func(string, error) {}
	}
	opts, err := NATSOptions(c.Creds, c.TLS)
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(c.NATSURL, append(opts,
		nats.Name(name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.ConnectHandler(func(nc *nats.Conn) { notify("nats: connected to "+nc.ConnectedUrlRedacted(), nil) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: our own Close
				notify("nats: disconnected", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { notify("nats: connected to "+nc.ConnectedUrlRedacted(), nil) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { notify("nats: async error", err) }),
	)...)
	if err != nil {
		return nil, nil, fmt.Errorf("nats %s: %w", c.NATSURL, err)
	}
	deadline := time.Now().Add(StartupTimeout)
	cfg := jetstream.StreamConfig{Replicas: c.Replicas, DedupeWindow: c.DedupeWindow}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		log, err := jetstream.Open(actx, nc, cfg)
		cancel()
		if err == nil {
			return nc, log, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			nc.Close()
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, nil, fmt.Errorf("open the audit log on %s (status %s, after %d attempts): %w", c.NATSURL, nc.Status(), attempt, err)
		}
		notify(fmt.Sprintf("waiting for NATS/JetStream at %s (status %s, attempt %d)", c.NATSURL, nc.Status(), attempt), err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// Policy registers the scheduling policy's flags (pkg/policy/policyflag),
// shared by the scheduler and the advisor (the advisor must run the
// scheduler's very policy), each with its environment fallback.
func (f *Flags) Policy() *policyflag.Values { return policyflag.Bind(f) }

// PolicyOptions builds the policy options, exiting 2 with the flag named
// when they are invalid.
func (f *Flags) PolicyOptions(p *policyflag.Values) policy.Options {
	o, err := p.Options()
	if err != nil {
		f.Invalid(policyflag.Field(err), err.Error())
	}
	return o
}

// HTTPAuthFlags are the HTTP API's security flags (the submitter's).
type HTTPAuthFlags struct {
	Tokens string // directory of bearer tokens: tokens/ of `gpuq auth init`
	TLS    auth.TLSFiles
}

// HTTPAuth registers the HTTP API's token and TLS flags.
func (f *Flags) HTTPAuth() *HTTPAuthFlags {
	h := &HTTPAuthFlags{}
	f.String(&h.Tokens, "tokens", "GPUQ_HTTP_TOKENS", "", "directory of HTTP bearer tokens, one file per team plus admin (tokens/ of gpuq auth init); unset: the HTTP API is open")
	f.String(&h.TLS.Cert, "http-cert", "GPUQ_HTTP_CERT", "", "PEM certificate: serve the HTTP API over TLS (with --http-key)")
	f.String(&h.TLS.Key, "http-key", "GPUQ_HTTP_KEY", "", "PEM key of --http-cert")
	f.String(&h.TLS.CA, "http-ca", "GPUQ_HTTP_CA", "", "PEM CA: verify HTTP client certificates when given")
	return h
}

// HTTPAuthOptions loads the tokens and the TLS configuration, exiting 2
// with the flag named when they are invalid; nil for what is not set.
func (f *Flags) HTTPAuthOptions(h *HTTPAuthFlags) (*auth.Tokens, *tls.Config) {
	var (
		tokens *auth.Tokens
		tc     *tls.Config
		err    error
	)
	if h.Tokens != "" {
		if tokens, err = auth.LoadTokens(h.Tokens); err != nil {
			f.Invalid("tokens", err.Error())
		}
	}
	if !h.TLS.Empty() {
		if tc, err = h.TLS.ServerConfig(); err != nil {
			f.Invalid("http-cert", err.Error())
		}
	}
	return tokens, tc
}

// LogTimeFormat is the time of every service's JSON log lines: RFC 3339
// with milliseconds (zerolog's default has whole seconds).
const LogTimeFormat = "2006-01-02T15:04:05.000Z07:00"

func init() { zerolog.TimeFieldFormat = LogTimeFormat }

// Logger is a service's logger at level (one of LogLevels), every line
// with svc: JSON lines (zerolog's, with task_id and node fields where a
// line is about a task or a node) when stderr is not a terminal, as under
// a supervisor, in a container or piped to a collector; on a terminal the
// same fields in zerolog's readable console form.
func Logger(svc, level string) zerolog.Logger {
	return newLogger(os.Stderr, isTerminal(os.Stderr), svc, level)
}

func newLogger(w io.Writer, terminal bool, svc, level string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	if terminal {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000"}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("svc", svc).Logger()
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
