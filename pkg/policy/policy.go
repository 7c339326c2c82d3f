package policy

import (
	"fmt"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// Kind is what a decision asks for.
type Kind string

// Decision kinds.
const (
	Dispatch Kind = "dispatch"
	Preempt  Kind = "preempt"
)

// Decision is one command the caller turns into an event.
type Decision struct {
	Kind       Kind
	TaskID     string
	Placements []events.Placement // Dispatch
	For        string             // Preempt: the task the victim yields to
	Reason     string
	Backfill   bool // Dispatch: started ahead of a reservation
	Reclaim    bool // Preempt: for a team below its guarantee (else for a higher class)
}

// Preemption policies.
const (
	CriticalOnly = "critical-only" // the default: only CRITICAL preempts
	Ladder       = "ladder"        // each class may preempt strictly lower ones
	// Drain names the preemptions of a node drained with --preempt (the
	// scheduler's protocol, not a policy choice: preemptible, non-CRITICAL
	// tasks on that node only).
	Drain = "drain"
	// GPUUnhealthy names the preemption of a task holding a GPU that
	// turned unhealthy (the scheduler's protocol, any class: the GPU is
	// gone, the task resumes elsewhere from its checkpoint).
	GPUUnhealthy = "gpu-unhealthy"
)

// Choices of victims among the candidates of one class (Options.Victims).
const (
	// LeastLost (the default): the least work lost since the victims'
	// last checkpoint (GPUs × time since it, or since the start).
	LeastLost = "least-lost"
	// Newest: the most recently started, as Kueue chooses (its
	// candidates are sorted by priority, then start time, newest first).
	Newest = "newest"
)

// Orders within a class.
const (
	FIFO              = "fifo"
	ShortestPredicted = "shortest-predicted"
)

// Orders of the backfill candidates (under FIFO within class).
const (
	// BackfillQueue (the default): the tasks behind the first blocked one
	// are tried in queue order (classic EASY).
	BackfillQueue = "queue"
	// BackfillShortest: the tasks behind the first blocked one are tried
	// shortest predicted service (GPUs × run time) first, within their
	// tier and class — EASY with shortest-job backfill (Tsafrir, Etsion
	// and Feitelson, 2007). The reservation still goes to the first
	// blocked task in FIFO order, so nobody is overtaken for good. On the
	// standard Philly scenario it cuts the average JCT from 1.21× to 1.09×
	// the SJF oracle's, but the advisor's start estimates get much worse
	// (P90 coverage 0.87, median P50 error 1,552 s against 729 s): later
	// short arrivals overtake a waiting task, which a forward simulation
	// from the queue of the moment cannot see (docs/performance.md). So it
	// is not the default.
	BackfillShortest = "shortest"
)

// Options configure the policy. The zero value is the default policy:
// critical-only preemption, FIFO within class, EASY backfill, no teams.
type Options struct {
	Preemption  string // CriticalOnly (default) or Ladder
	WithinClass string // FIFO (default) or ShortestPredicted
	// AgingTau: under ShortestPredicted a task's key is its predicted
	// service (GPUs × predicted run time, as Helios' QSSF) divided by
	// (1 + wait/AgingTau), so a long task's place improves with its wait
	// (default DefaultAgingTau).
	AgingTau time.Duration
	// MaxWait: a task that waited this long goes ahead of every non-aged
	// task of its class, in submit order — the starvation guard (default
	// DefaultMaxWait).
	MaxWait time.Duration
	// ClassAging is the starvation guard across classes (0: off, classes
	// strictly ordered): waiting ClassAging makes up for one class. Under
	// FIFO within class, the queue below CRITICAL (within each tier) is
	// ordered by submit time less ClassAging per class above LOW: a task
	// goes behind a lower class's task only once that one has waited
	// ClassAging per class more, so as long as waits stay under
	// ClassAging the order is the strict class order, and a task is
	// overtaken by no task submitted more than 2 × ClassAging after it.
	// It changes only the queue's order under FIFO within class (the
	// default; ShortestPredicted keeps strict class order, with its MaxWait
	// guard within the class): preemption and the choice of victims keep
	// the real class, except that the ladder preempts by class only a
	// victim its preemptor is ahead of in this order.
	ClassAging time.Duration
	// StarvationWait bounds the wait below CRITICAL (0: off): under FIFO
	// within class, a task that has waited this long and never started
	// goes ahead of every other task below CRITICAL — across the teams'
	// tiers and the classes — in submit order (CRITICAL first, as always).
	// Until a task waits that long nothing changes, so it is a threshold,
	// not an ageing: class order and the teams' guarantees hold in the
	// common case. Preemption keeps the real classes and teams.
	StarvationWait time.Duration
	// PreemptPatience is how long a task below CRITICAL may wait for a
	// cheaper preemption (0: off, it preempts at once): it preempts only
	// once its victims would lose at most as much work since their last
	// checkpoints as it has waited, GPU for GPU (lost GPU-seconds ≤ its
	// wait since submission × its GPUs), or once it has waited
	// PreemptPatience. Meanwhile a victim may checkpoint (and lose nothing
	// more) or a holder end (and free its GPUs without a preemption).
	// CRITICAL always preempts at once.
	PreemptPatience time.Duration
	// Victims is how preemption chooses among victims of the same classes:
	// LeastLost (default) or Newest.
	Victims string
	// Teams are the guaranteed shares; nil means none.
	Teams Teams
	// BackfillDepth bounds how many queued tasks behind the first blocked
	// one a pass examines for backfill (Slurm's bf_max_job_test; default
	// 500). Tasks deeper in the queue wait for a later pass.
	BackfillDepth int
	// Backfill is the order of the backfill candidates under FIFO:
	// BackfillQueue (default) or BackfillShortest. Under ShortestPredicted
	// the candidates keep the queue's order (already shortest first).
	Backfill string
	// NoBackfill turns EASY backfill off (strict order: the first task that
	// does not fit blocks all behind it).
	NoBackfill bool
	// Explain fills Result.Waiting for every queued task; without it a pass
	// stops as soon as nothing more can start.
	Explain bool
}

// Defaults of the shortest-predicted order, chosen on the standard Philly
// scenario (docs/performance.md): a 2 h aging time and a 48 h guard gave
// an average JCT 1.11× the SJF oracle's; 8 h and 5 days give 0.95× with
// no task waiting 6 days. A guard of two days let a wave of long tasks go
// first every time the queue backed up, blocking the short ones behind.
const (
	DefaultAgingTau = 8 * time.Hour
	DefaultMaxWait  = 120 * time.Hour
)

// DefaultClassAging is the scheduler's, the advisor's and gpuq sim's
// default ClassAging (their --class-aging flag): off, since
// DefaultStarvationWait bounds the waits better on both traces without
// it (docs/performance.md). On the mix scenario a 12 h ageing alone left
// the longest wait of a class at 8.9 days (20.9 without any guard) for
// an average JCT 0.963× the SJF oracle's; with the 4-day bound on top it
// costs JCT on both traces (Philly 0.941× → 0.969×, Alibaba 1.84× →
// 3.77× the oracle) and makes Philly's longest wait longer (4.6 → 6.2
// days).
const DefaultClassAging = 0

// DefaultStarvationWait is the scheduler's, the advisor's and gpuq sim's
// default StarvationWait (their --starvation-wait flag; the zero Options
// leave it off). Chosen on the mix scenario of both traces
// (docs/performance.md): of 72 h, 96 h, 120 h and 168 h, 96 h gave on
// Philly the longest wait of any class 4.6 days (20.9 without a guard)
// at an average JCT 0.941× the SJF oracle's (0.942× without), and on
// Alibaba 1.84× the oracle (3.93× without; 72 h 1.92×, 168 h 2.34×).
// A standard scenario (one class, no teams) orders exactly as without it.
const DefaultStarvationWait = 96 * time.Hour

// DefaultPreemptPatience is the scheduler's, the advisor's and gpuq sim's
// default PreemptPatience (their --preempt-patience flag): off. Measured
// on the Philly mix scenario (docs/performance.md, checkpoints every 30
// min), 30 min halves the work least-lost victims lose (920.8 GPU-hours
// instead of 1,983.8; 0.484× newest victims' 1,903.9 in the same run) at
// an average JCT 0.946× the SJF oracle's (0.941× without), but the
// advisor's estimates of the same run are worse: the median P50 error
// 396.9 → 468.9 s (0.247× → 0.295× the seed formula's) and LOW's third
// quarter's P90 coverage 0.832, below 0.85 (checkpoints in the forward
// simulation measured 466.8 s, and its wake-ups at the patience's end,
// Result.PatientUntil, 473.2 s: not the cause; the patience makes the
// waits longer, and the reclaims it delays cannot be foreseen). So it
// stays an option (30m is the measured choice). On Alibaba (no teams,
// only CRITICAL preempts) it changes nothing.
const DefaultPreemptPatience = 0

// OptionError is an invalid option: Field names it as its flag does
// (policy, within-class, backfill, victims, class-aging, preempt-patience,
// starvation-wait, max-wait, aging-tau, teams), so a caller can name the
// flag without reading the message.
type OptionError struct {
	Field string
	Msg   string
}

func (e *OptionError) Error() string { return e.Msg }

func optionErr(field, format string, a ...any) error {
	return &OptionError{Field: field, Msg: fmt.Sprintf(format, a...)}
}

// DefaultOptions are the default policy, the defaults of every command's
// policy flags (pkg/policy/policyflag): critical-only preemption, FIFO
// within class, EASY backfill in queue order, least-lost victims, the
// starvation bound DefaultStarvationWait, no class ageing, no preemption
// patience, no teams. The zero Options differ in one way: the
// starvation bound is off.
func DefaultOptions() Options {
	return Options{
		Preemption:      CriticalOnly,
		WithinClass:     FIFO,
		Backfill:        BackfillQueue,
		Victims:         LeastLost,
		AgingTau:        DefaultAgingTau,
		MaxWait:         DefaultMaxWait,
		ClassAging:      DefaultClassAging,
		StarvationWait:  DefaultStarvationWait,
		PreemptPatience: DefaultPreemptPatience,
	}
}

// Validate checks the option names and durations; an error is an
// *OptionError naming the field.
func (o Options) Validate() error {
	// The named choices: empty (the default) or one of two names.
	for _, c := range [...]struct{ field, v, a, b string }{
		{"policy", o.Preemption, CriticalOnly, Ladder},
		{"within-class", o.WithinClass, FIFO, ShortestPredicted},
		{"backfill", o.Backfill, BackfillShortest, BackfillQueue},
		{"victims", o.Victims, LeastLost, Newest},
	} {
		if c.v != "" && c.v != c.a && c.v != c.b {
			return optionErr(c.field, "%s %q: must be %s or %s", c.field, c.v, c.a, c.b)
		}
	}
	if o.ClassAging < 0 {
		return optionErr("class-aging", "class-aging %s: must be ≥ 0", o.ClassAging)
	}
	if o.PreemptPatience < 0 {
		return optionErr("preempt-patience", "preempt-patience %s: must be ≥ 0", o.PreemptPatience)
	}
	if o.StarvationWait < 0 {
		return optionErr("starvation-wait", "starvation-wait %s: must be ≥ 0", o.StarvationWait)
	}
	if o.MaxWait < 0 {
		return optionErr("max-wait", "max-wait %s: must be ≥ 0 (0: the default, %s)", o.MaxWait, DefaultMaxWait)
	}
	if o.AgingTau < 0 {
		return optionErr("aging-tau", "aging-tau %s: must be ≥ 0 (0: the default, %s)", o.AgingTau, DefaultAgingTau)
	}
	if err := o.Teams.Validate(); err != nil {
		return &OptionError{Field: "teams", Msg: err.Error()}
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Preemption == "" {
		o.Preemption = CriticalOnly
	}
	if o.WithinClass == "" {
		o.WithinClass = FIFO
	}
	if o.Backfill == "" {
		o.Backfill = BackfillQueue
	}
	if o.Victims == "" {
		o.Victims = LeastLost
	}
	if o.AgingTau <= 0 {
		o.AgingTau = DefaultAgingTau
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.BackfillDepth <= 0 {
		o.BackfillDepth = 500
	}
	return o
}

// Policy decides. Create it with New.
type Policy struct {
	opts Options
}

// New returns a policy with the given options (defaults filled in).
func New(o Options) *Policy { return &Policy{opts: o.withDefaults()} }

// Options returns the policy's options.
func (p *Policy) Options() Options { return p.opts }

// Name is the preemption policy's name, recorded in preemption events.
func (p *Policy) Name() string { return p.opts.Preemption }

// With returns a copy of the policy with Explain set as given.
func (p *Policy) With(explain bool) *Policy {
	o := p.opts
	o.Explain = explain
	c := *p
	c.opts = o
	return &c
}

// Input is what one pass sees. Predict gives a task's predicted total run
// time (nil: the user's estimate); it must be deterministic.
type Input struct {
	State   *domain.State
	Now     time.Time
	Predict func(*domain.Task) time.Duration
	// Ends, when not nil, holds every started holder of State (StartedAt
	// set and not after Now) at its predicted end, StartedAt + its
	// predicted run as the pass predicts it (Predict, or the user's
	// estimate where Predict gives none); the reservation walk then
	// predicts only the holders it reaches instead of every one. A caller
	// that plans many passes on one changing state keeps it (the forward
	// simulation); a holder missing or misplaced changes the pass.
	Ends *EndOrder
}

func (in Input) predict(t *domain.Task) time.Duration {
	if in.Predict != nil {
		if d := in.Predict(t); d > 0 {
			return d
		}
	}
	return t.EstimatedRun()
}

// remaining is the predicted time until a holding task ends, at least a
// second (a task past its prediction is expected to end soon, not now).
func (in Input) remaining(t *domain.Task) time.Duration {
	elapsed := time.Duration(0)
	if !t.StartedAt.IsZero() && in.Now.After(t.StartedAt) {
		elapsed = in.Now.Sub(t.StartedAt)
	}
	r := in.predict(t) - elapsed
	if r < time.Second {
		r = time.Second
	}
	return r
}

// Reasons a queued task is not running now.
const (
	ReasonNoCapacity     = "no-capacity"
	ReasonHigherAhead    = "higher-priority-ahead"
	ReasonTeamOver       = "team-over-guarantee"
	ReasonReserved       = "reserved-for-another"
	ReasonUnsatisfiable  = "constraint-unsatisfiable"
	ReasonNodesUnhealthy = "nodes-unhealthy"
	ReasonNodeDrained    = "node-drained"      // it would fit if drained nodes were back
	ReasonPreempting     = "preempting-for-it" // victims are checkpointing
)

// Wait explains one queued task.
type Wait struct {
	Position int // 1-based, in the queue order of this pass (order.go)
	Reason   string
	Blockers []string
	// ReservedAt is the reservation time when this task holds the
	// backfill reservation.
	ReservedAt time.Time
}

// Result is one pass's outcome.
type Result struct {
	Decisions []Decision
	Waiting   map[string]Wait // only with Options.Explain
	// PatientUntil is the earliest instant at which a task this pass left
	// waiting for a cheaper preemption (Options.PreemptPatience) has waited
	// out its patience and preempts, if nothing else changes first: its
	// submission + PreemptPatience. Zero when no task waited so. A caller
	// that plans only at events (the estimator's forward simulation)
	// plans again then.
	PatientUntil time.Time
	// Reservation is the EASY backfill reservation this pass holds for the
	// first blocked task (only with Options.Explain; nil when none): the
	// dashboard draws it (GET /v1/plan).
	Reservation *Reservation
}

// Reservation is when and on which GPUs the first blocked task starts at
// the earliest: until then, those GPUs take only tasks predicted to end
// before At (EASY backfill).
type Reservation struct {
	TaskID     string
	At         time.Time
	Placements []events.Placement
}

// Schedule returns the decisions of one pass; see Plan.
func (p *Policy) Schedule(in Input) []Decision { return p.Plan(in).Decisions }
