// Package policyflag binds the scheduling policy's options to flags: one
// table of names, environment variables, defaults (policy.DefaultOptions)
// and help texts, used by every command that runs the policy — the
// scheduler and the advisor (with environment fallbacks, pkg/svcmain),
// gpuq dev, gpuq replay, explain and audit verify, and gpuq sim (cobra).
// A flag is described once, so the commands cannot drift apart.
package policyflag

import (
	"errors"
	"time"

	"github.com/spf13/pflag"

	"github.com/gpuq/gpuq/pkg/policy"
)

// Registrar is what a command registers its flags with. pkg/svcmain's
// Flags is one (a flag falls back to its environment variable); Pflag
// adapts a cobra command's flag set (no environment).
type Registrar interface {
	String(p *string, name, env, def, usage string)
	Duration(p *time.Duration, name, env string, def time.Duration, usage string)
}

// Values hold the flags' values once the command line is parsed.
type Values struct {
	opts  policy.Options
	teams string
}

// BindOption changes what Bind registers.
type BindOption func(*bind)

type bind struct{ teams bool }

// WithoutTeams leaves out --teams, for a command whose --teams means
// something else (gpuq sim's "vc"); the command sets Options.Teams itself.
func WithoutTeams() BindOption { return func(b *bind) { b.teams = false } }

// Bind registers the policy flags with r, their defaults those of
// policy.DefaultOptions.
func Bind(r Registrar, opts ...BindOption) *Values {
	b := bind{teams: true}
	for _, o := range opts {
		o(&b)
	}
	d := policy.DefaultOptions()
	v := &Values{}
	o := &v.opts
	r.String(&o.Preemption, "policy", "GPUQ_POLICY", d.Preemption,
		"preemption policy: critical-only (only CRITICAL preempts) or ladder (each class preempts the classes below it)")
	r.String(&o.WithinClass, "within-class", "GPUQ_WITHIN_CLASS", d.WithinClass,
		"order within a class: fifo or shortest-predicted")
	r.String(&o.Backfill, "backfill", "GPUQ_BACKFILL", d.Backfill,
		"order of the backfill candidates behind the first blocked task (fifo within class): queue or shortest (predicted service first)")
	if b.teams {
		r.String(&v.teams, "teams", "GPUQ_TEAMS", "", "teams file (YAML or JSON) with guaranteed GPUs or shares")
	}
	r.Duration(&o.MaxWait, "max-wait", "GPUQ_MAX_WAIT", d.MaxWait,
		"shortest-predicted: a task waiting this long goes first in its class")
	r.Duration(&o.AgingTau, "aging-tau", "GPUQ_AGING_TAU", d.AgingTau,
		"shortest-predicted: a task's predicted service (GPUs × run time) is divided by 1 + wait/aging-tau")
	r.Duration(&o.ClassAging, "class-aging", "GPUQ_CLASS_AGING", d.ClassAging,
		"starvation guard across classes under fifo within class: each class above LOW counts as submitted this much earlier per class (0: off, strict class order)")
	r.Duration(&o.StarvationWait, "starvation-wait", "GPUQ_STARVATION_WAIT", d.StarvationWait,
		"starvation bound under fifo within class: a task that waited this long without a start goes ahead of every task below CRITICAL, across teams and classes, in submit order (0: off)")
	r.Duration(&o.PreemptPatience, "preempt-patience", "GPUQ_PREEMPT_PATIENCE", d.PreemptPatience,
		"how long a task below CRITICAL waits for a cheaper preemption: it preempts once its victims would lose at most its wait × its GPUs since their checkpoints, or once it waited this long (0: at once)")
	r.String(&o.Victims, "victims", "GPUQ_VICTIMS", d.Victims,
		"choice among victims of the same classes: least-lost (work since the last checkpoint) or newest (most recently started, as Kueue)")
	return v
}

// TeamsFile is --teams as given ("" when none, or when left out).
func (v *Values) TeamsFile() string { return v.teams }

// Options are the policy options the flags give, the teams file loaded.
// An error is a *policy.OptionError naming the flag.
func (v *Values) Options() (policy.Options, error) {
	o := v.opts
	if v.teams != "" {
		ts, err := policy.LoadTeams(v.teams)
		if err != nil {
			return o, &policy.OptionError{Field: "teams", Msg: "teams: " + err.Error()}
		}
		o.Teams = ts
	}
	if err := o.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

// Field is the flag an error of Options names ("policy" when it names
// none).
func Field(err error) string {
	var oe *policy.OptionError
	if errors.As(err, &oe) {
		return oe.Field
	}
	return "policy"
}

// Pflag adapts a pflag (cobra) flag set: the environment names are not
// used, a command line's flags are its own.
func Pflag(fs *pflag.FlagSet) Registrar { return pflagSet{fs} }

type pflagSet struct{ fs *pflag.FlagSet }

func (p pflagSet) String(v *string, name, _, def, usage string) { p.fs.StringVar(v, name, def, usage) }
func (p pflagSet) Duration(v *time.Duration, name, _ string, def time.Duration, usage string) {
	p.fs.DurationVar(v, name, def, usage)
}
