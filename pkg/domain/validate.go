package domain

import (
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Limits bound what a submission may ask for.
type Limits struct {
	MaxGPUs  int     // per task; default 64
	MaxHours float64 // default 168 (a week)
	// NotifyLocal lets a task's --notify URL name a loopback or
	// link-local host (gpuq dev, where the receiver runs on the same
	// machine); elsewhere such a URL is refused at submission, as the
	// notifier's --webhook-allow refuses it at delivery.
	NotifyLocal bool
}

// DefaultLimits are the limits when none are configured.
var DefaultLimits = Limits{MaxGPUs: 64, MaxHours: 168}

// FieldError names the field and the rule it broke.
type FieldError struct {
	Field string
	Rule  string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Rule }

// Request is what a person or CI asks to run.
type Request struct {
	Name           string  `json:"name"`
	Team           string  `json:"team"`
	Priority       string  `json:"priority"`
	GPUs           int     `json:"gpus"`
	Hours          float64 `json:"hours"`
	Hypothesis     string  `json:"hypothesis"`
	Command        string  `json:"command"`
	NoPreempt      bool    `json:"no_preempt,omitempty"`
	PreemptSignal  string  `json:"preempt_signal,omitempty"`
	GraceS         float64 `json:"grace_s,omitempty"`
	GPUModel       string  `json:"gpu_model,omitempty"`
	MinGPUMemMiB   int     `json:"min_gpu_mem_mib,omitempty"`
	IdempotencyKey string  `json:"idempotency_key,omitempty"`
	// Env is exported to the job (like Slurm's --export); Dir is its
	// working directory when it exists on the node.
	Env map[string]string `json:"env,omitempty"`
	Dir string            `json:"dir,omitempty"`
	// Deadline is the finish-by time (gpuq submit --deadline), absolute;
	// CheckDeadline bounds it. Notify lists the task's own webhook
	// destinations (gpuq submit --notify), checked by Validate.
	Deadline *time.Time `json:"deadline,omitempty"`
	Notify   []string   `json:"notify,omitempty"`
	// AllowUnplaceable queues a task that no node of the cluster as it is
	// could hold (for a cluster about to grow); without it the submitter
	// refuses such a task. It is not recorded.
	AllowUnplaceable bool `json:"allow_unplaceable,omitempty"`
}

// MaxEnvBytes bounds the exported environment of one task.
const MaxEnvBytes = 64 << 10

// MaxArgBytes bounds the command and each exported variable (NAME=value):
// the command runs as one argument of `sh -c`, and Linux refuses to exec
// an argument or environment string longer than MAX_ARG_STRLEN (128 KiB,
// with its terminating NUL).
const MaxArgBytes = 128<<10 - 1

// What a submission gets for gpus and hours when it does not give them
// (on every transport, as `gpuq submit` without --gpus and --hours).
const (
	DefaultGPUs  = 1
	DefaultHours = 4.0
)

// MinHours is the shortest estimate a task may give: one second.
const MinHours = 1.0 / 3600

// MaxGraceS bounds the grace period a task may ask for, in seconds.
const MaxGraceS = 3600

// ExportExcluded reports whether an environment variable is never
// exported with a task: what the agent sets itself, and names that look
// like secrets (SecretName) — the audit log keeps every submission forever.
func ExportExcluded(name string) bool {
	u := strings.ToUpper(name)
	if strings.HasPrefix(u, "GPUQ_") || u == "CUDA_VISIBLE_DEVICES" || u == "NVIDIA_VISIBLE_DEVICES" {
		return true
	}
	_, secret := SecretName(name)
	return secret
}

// SecretName reports whether an environment variable's name looks like a
// secret's, in any case, and why: it contains TOKEN, SECRET, PASSWORD,
// PASSWD, CREDENTIAL, PRIVATE, API_KEY, ACCESS_KEY, AUTH, COOKIE, SESSION
// or DSN, or is KEY or ends in _KEY or _KEYS.
func SecretName(name string) (why string, ok bool) {
	u := strings.ToUpper(name)
	for _, s := range []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE", "API_KEY", "ACCESS_KEY", "AUTH", "COOKIE", "SESSION", "DSN"} {
		if strings.Contains(u, s) {
			return "contains " + s, true
		}
	}
	switch {
	case u == "KEY":
		return "is KEY", true
	case strings.HasSuffix(u, "_KEY"):
		return "ends in _KEY", true
	case strings.HasSuffix(u, "_KEYS"):
		return "ends in _KEYS", true
	}
	return "", false
}

// DefaultExport is what `gpuq submit` exports by default: an allowlist of
// names (a trailing * is a prefix) that locate software and set the
// locale, and hold no secrets. Everything else needs --export NAME, or
// --export ALL.
var DefaultExport = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ", "LANG", "LANGUAGE", "LC_*", "TMPDIR",
	"PYTHONPATH", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV", "CONDA_*",
	"LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
	"HF_HOME", "TORCH_HOME", "XDG_CACHE_HOME",
}

// DefaultExported reports whether name is in DefaultExport (and not
// excluded).
func DefaultExported(name string) bool {
	if ExportExcluded(name) {
		return false
	}
	for _, a := range DefaultExport {
		if p, ok := strings.CutSuffix(a, "*"); ok && strings.HasPrefix(name, p) || a == name {
			return true
		}
	}
	return false
}

// CredentialInURL reports whether a value carries credentials in a URL:
// scheme://user:password@… anywhere in it (a DATABASE_URL, a pip index
// URL, a git remote with a token).
func CredentialInURL(v string) bool {
	for rest := v; ; {
		i := strings.Index(rest, "://")
		if i < 0 {
			return false
		}
		rest = rest[i+3:]
		// The authority ends at the first '/', '?', '#' or space.
		auth := rest
		if j := strings.IndexAny(auth, "/?# \t\n"); j >= 0 {
			auth = auth[:j]
		}
		if at := strings.LastIndex(auth, "@"); at >= 0 && strings.Contains(auth[:at], ":") {
			return true
		}
	}
}

// CheckEnvValues refuses an exported environment with credentials in a
// URL, naming the first such variable (in name order).
func CheckEnvValues(env map[string]string) error {
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if CredentialInURL(env[k]) {
			return &FieldError{"env", fmt.Sprintf("%s carries credentials in a URL (scheme://user:password@…); the log keeps every submission forever: give the job its credentials another way (a file on the node, a secret store)", k)}
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// HoursRule states the bounds of hours under a limit of maxHours.
func HoursRule(maxHours float64) string {
	return fmt.Sprintf("must be between 1 s (%.6f) and %g hours", MinHours, maxHours)
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// Signals a task may ask to be preempted with.
var Signals = map[string]syscall.Signal{"SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2, "SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT, "SIGHUP": syscall.SIGHUP}

// Validate checks a request against the limits; the first broken rule is
// returned as a *FieldError naming the wire field. gpus and hours must be
// set (the transports fill in DefaultGPUs and DefaultHours when a caller
// omits them); priority defaults to medium, the preemption signal to
// SIGUSR1 and the grace period to 120 s, filled in place.
func (r *Request) Validate(l Limits) error {
	if l.MaxGPUs <= 0 {
		l.MaxGPUs = DefaultLimits.MaxGPUs
	}
	if l.MaxHours <= 0 {
		l.MaxHours = DefaultLimits.MaxHours
	}
	r.Name, r.Team = strings.TrimSpace(r.Name), strings.TrimSpace(r.Team)
	for _, f := range []struct {
		field, text string
		multiline   bool
	}{{"name", r.Name, false}, {"team", r.Team, false}, {"hypothesis", r.Hypothesis, false}, {"command", r.Command, true},
		{"preempt_signal", r.PreemptSignal, false}, {"gpu_model", r.GPUModel, false}, {"idempotency_key", r.IdempotencyKey, false},
		{"dir", r.Dir, false}} {
		if err := CheckText(f.field, f.text, f.multiline); err != nil {
			return err
		}
	}
	for _, f := range []struct{ field, text string }{{"name", r.Name}, {"team", r.Team}} {
		if err := CheckVisible(f.field, f.text); err != nil {
			return err
		}
	}
	if r.Name == "" {
		return &FieldError{"name", "is required"}
	}
	if len(r.Name) > 200 {
		return &FieldError{"name", "must be at most 200 characters"}
	}
	if r.Team == "" {
		return &FieldError{"team", "is required"}
	}
	if strings.ContainsAny(r.Team, ".*>: \t\r\n") || len(r.Team) > 64 {
		return &FieldError{"team", "must be at most 64 characters without spaces, '.', ':', '*' or '>'"}
	}
	if r.Priority == "" {
		r.Priority = "medium"
	}
	p, err := ParsePriority(r.Priority)
	if err != nil {
		return &FieldError{"priority", "must be one of critical, high, medium, low (got " + fmt.Sprintf("%q", r.Priority) + ")"}
	}
	r.Priority = p.String()
	if r.GPUs < 1 || r.GPUs > l.MaxGPUs {
		return &FieldError{"gpus", fmt.Sprintf("must be between 1 and %d (got %d)", l.MaxGPUs, r.GPUs)}
	}
	if math.IsNaN(r.Hours) || math.IsInf(r.Hours, 0) {
		return &FieldError{"hours", fmt.Sprintf("must be a finite number (got %g)", r.Hours)}
	}
	if !(r.Hours >= MinHours) || r.Hours > l.MaxHours {
		return &FieldError{"hours", HoursRule(l.MaxHours) + fmt.Sprintf(" (got %g)", r.Hours)}
	}
	if strings.TrimSpace(r.Hypothesis) == "" {
		return &FieldError{"hypothesis", "is required: say what the experiment tests"}
	}
	if strings.TrimSpace(r.Command) == "" {
		return &FieldError{"command", "is required"}
	}
	if len(r.Command) > MaxArgBytes {
		return &FieldError{"command", fmt.Sprintf("must be at most %d bytes, the longest argument Linux can exec (got %d)", MaxArgBytes, len(r.Command))}
	}
	if r.PreemptSignal == "" {
		r.PreemptSignal = "SIGUSR1"
	}
	r.PreemptSignal = strings.ToUpper(r.PreemptSignal)
	if !strings.HasPrefix(r.PreemptSignal, "SIG") {
		r.PreemptSignal = "SIG" + r.PreemptSignal
	}
	if _, ok := Signals[r.PreemptSignal]; !ok {
		return &FieldError{"preempt_signal", "must be one of SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP"}
	}
	if r.GraceS == 0 {
		r.GraceS = 120
	}
	if !(r.GraceS >= 0 && r.GraceS <= MaxGraceS) {
		return &FieldError{"grace_s", fmt.Sprintf("must be between 0 and %d seconds (got %g)", MaxGraceS, r.GraceS)}
	}
	if r.MinGPUMemMiB < 0 {
		return &FieldError{"min_gpu_mem_mib", fmt.Sprintf("must be ≥ 0 (got %d)", r.MinGPUMemMiB)}
	}
	if len(r.IdempotencyKey) > 256 {
		return &FieldError{"idempotency_key", "must be at most 256 characters"}
	}
	size := 0
	for _, k := range sortedKeys(r.Env) {
		v := r.Env[k]
		if !validEnvName(k) {
			return &FieldError{"env", fmt.Sprintf("%q is not a variable name", k)}
		}
		if ExportExcluded(k) {
			delete(r.Env, k)
			continue
		}
		if i := strings.IndexByte(v, 0); i >= 0 {
			return &FieldError{"env." + k, fmt.Sprintf("must not contain a NUL byte (at byte %d): the environment cannot carry one", i)}
		}
		if n := len(k) + 1 + len(v); n > MaxArgBytes {
			return &FieldError{"env." + k, fmt.Sprintf("%s=value must be at most %d bytes, the longest variable Linux can exec (got %d)", k, MaxArgBytes, n)}
		}
		size += len(k) + len(v) + 2
	}
	if size > MaxEnvBytes {
		return &FieldError{"env", fmt.Sprintf("must be at most %d bytes in all (got %d)", MaxEnvBytes, size)}
	}
	if err := CheckEnvValues(r.Env); err != nil {
		return err
	}
	if r.Dir != "" && !strings.HasPrefix(r.Dir, "/") {
		return &FieldError{"dir", "must be an absolute path"}
	}
	return CheckNotify(r.Notify, l.NotifyLocal)
}

// Bounds of a task's own notification destinations and deadline.
const (
	MaxNotify         = 4
	MaxNotifyURLBytes = 2048
	// MaxDeadlineAhead: a deadline further away is refused (a typo,
	// or a year given for a month).
	MaxDeadlineAhead = 366 * 24 * time.Hour
)

// CheckDeadline refuses a deadline that has passed at now, or that is
// more than MaxDeadlineAhead away (nil: none, accepted). It needs the
// clock, so it is not part of Validate (which amend also runs on a
// task's recorded request): the submitter calls it on every submission,
// HTTP and NATS alike.
func CheckDeadline(d *time.Time, now time.Time) error {
	if d == nil {
		return nil
	}
	switch {
	case d.IsZero():
		return &FieldError{"deadline", "must be a time (RFC 3339, e.g. 2026-12-03T18:00:00Z)"}
	case !d.After(now):
		return &FieldError{"deadline", fmt.Sprintf("must be in the future: %s has passed (now %s)", d.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))}
	case d.Sub(now) > MaxDeadlineAhead:
		return &FieldError{"deadline", fmt.Sprintf("must be at most 366 days ahead (got %s, %.0f days)", d.UTC().Format(time.RFC3339), d.Sub(now).Hours()/24)}
	}
	return nil
}

// CheckNotify refuses a task's notification destinations that the
// notifier would never deliver to: more than MaxNotify, one listed
// twice, or one that is not an absolute http(s) URL with a host, is
// longer than MaxNotifyURLBytes, carries a user or password, or (unless
// local) names a loopback, link-local, unspecified or multicast address
// literally, or localhost. A host name is resolved only at delivery, where
// the notifier's --webhook-allow rules apply to the address dialled.
func CheckNotify(urls []string, local bool) error {
	if len(urls) > MaxNotify {
		return &FieldError{"notify", fmt.Sprintf("at most %d destinations per task (got %d); a team's destinations are for more (gpuq notify add)", MaxNotify, len(urls))}
	}
	for i, raw := range urls {
		if err := checkNotifyURL(raw, local); err != nil {
			return &FieldError{"notify", err.Error()}
		}
		for _, prev := range urls[:i] {
			if prev == raw {
				return &FieldError{"notify", fmt.Sprintf("%q is listed twice", raw)}
			}
		}
	}
	return nil
}

func checkNotifyURL(raw string, local bool) error {
	if len(raw) > MaxNotifyURLBytes {
		return fmt.Errorf("a URL must be at most %d bytes (got %d)", MaxNotifyURLBytes, len(raw))
	}
	if err := CheckText("notify", raw, false); err != nil {
		return fmt.Errorf("%q: must be one line of printable text", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL", raw)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("%q: must be an absolute http:// or https:// URL with a host", raw)
	}
	if u.User != nil {
		return fmt.Errorf("%q: must not carry a user or password: the log keeps every submission, and the team can read it", raw)
	}
	if local {
		return nil
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return fmt.Errorf("%q: a loopback host is allowed only in gpuq dev", raw)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() || ip.IsMulticast() {
			return fmt.Errorf("%q: a loopback, link-local, unspecified or multicast address is allowed only in gpuq dev", raw)
		}
	}
	return nil
}
