package alarm

import (
	"fmt"
	"sort"
	"time"
)

// Cause is why scheduling is broken: the code of an alarm. Codes grow only
// at the end; decisions read the code, never the text.
type Cause string

// Broken causes.
const (
	// SchedulerStalled: tasks the policy would start waited with no
	// scheduling decision at all for longer than the Tracker's StallGrace
	// (no leader, a scheduler that hangs).
	SchedulerStalled Cause = "scheduler_stalled"
	// IdleCapacity: the scheduler decided other things, but left capacity
	// idle that the policy would have given to waiting tasks.
	IdleCapacity Cause = "idle_capacity"
	// NodesLost: nodes lost (missed heartbeats) or drained took GPUs out
	// of scheduling.
	NodesLost Cause = "nodes_lost"
	// GPUsUnhealthy: GPUs of schedulable nodes are marked unhealthy.
	GPUsUnhealthy Cause = "gpus_unhealthy"
	// Unexplained: no cause the breakdown knows accounts for the wait
	// (dispatched tasks whose agents never start them, or time the
	// breakdown could not attribute).
	Unexplained Cause = "unexplained"
)

// Causes lists every broken cause, in code order.
var Causes = []Cause{SchedulerStalled, IdleCapacity, NodesLost, GPUsUnhealthy, Unexplained}

// Legitimate reasons for a late start: the estimate was wrong, scheduling
// was not.
const (
	// HigherClass: tasks of a higher class (most of them arrived after the
	// estimate) went first.
	HigherClass = "higher_class_ahead"
	// GuaranteeReclaim: teams below their guaranteed share went first, or
	// took their GPUs back by preemption.
	GuaranteeReclaim = "guarantee_reclaim"
	// HoldersOverran: the GPUs' holders ran past their predicted ends.
	HoldersOverran = "holders_overran"
	// Reserved: the free GPUs were held for the backfill reservation of
	// tasks ahead.
	Reserved = "reserved_for_ahead"
	// Fragmented: GPUs were free, but not where the task fits.
	Fragmented = "fragmented"
	// Preempted: the task was preempted before it ever ran to the end of
	// its first start (only a task judged by its first wait has it).
	Preempted = "preempted"
)

// Operators is whom a broken cause names: the people who run the
// cluster and the scheduler, not the task's owner.
const Operators = "operators"

// Breakdown is one late task's wait, as the Tracker added it up.
type Breakdown struct {
	// WaitS: the wait so far; EstimateS: the P50 wait estimated at
	// submission; ThresholdS: the wait past which it is late
	// (AlertFactor × EstimateS, at least the minimum wait).
	WaitS, EstimateS, ThresholdS float64
	// Broken: seconds of the wait spent while a broken cause held (the
	// cluster's, or the task's own: startable but not started, blocked
	// only by missing nodes or GPUs), including the backlog a broken
	// spell left behind (Tracker).
	Broken map[Cause]float64
	// Legit: seconds by legitimate reason.
	Legit map[string]float64
	// OtherS: observed seconds with no known cause (starting on a node
	// that never starts it, a cause this build does not know).
	OtherS float64
}

// Verdict is the classification of a late wait.
type Verdict struct {
	// Alarm: scheduling is broken; Cause says how and Tell whom to tell.
	Alarm bool   `json:"alarm"`
	Cause Cause  `json:"cause,omitempty"`
	Tell  string `json:"tell,omitempty"`
	// Reason: the legitimate reason of a late wait that is no alarm (the
	// one that took most of the wait).
	Reason string `json:"reason,omitempty"`
	// WaitS, ThresholdS: the wait and the threshold it passed; BrokenS:
	// the seconds of it that a broken cause (or nothing known) explains.
	WaitS      float64 `json:"wait_s"`
	ThresholdS float64 `json:"threshold_s"`
	BrokenS    float64 `json:"broken_s"`
}

// Classify judges a wait that passed its threshold. The rule: take away
// the seconds that broken causes hold (and those nothing explains); if
// what is left would not have passed the threshold, scheduling is broken
// — an alarm naming the broken cause of most seconds (Unexplained when
// the unexplained seconds are more). Otherwise the estimate was wrong for
// a legitimate reason — the one of most seconds (HoldersOverran when none
// was observed).
func Classify(b Breakdown) Verdict {
	v := Verdict{WaitS: b.WaitS, ThresholdS: b.ThresholdS}
	var broken float64
	for _, s := range b.Broken {
		broken += s
	}
	v.BrokenS = broken + b.OtherS
	if b.WaitS-broken-b.OtherS <= b.ThresholdS {
		v.Alarm, v.Tell = true, Operators
		v.Cause = Unexplained
		if c, s := top(b.Broken); s >= b.OtherS && s > 0 {
			v.Cause = c
		}
		return v
	}
	v.Reason = HoldersOverran
	if r, s := top(b.Legit); s > 0 {
		v.Reason = r
	}
	return v
}

// top is the key with the most seconds (the first in key order on ties).
func top[K ~string](m map[K]float64) (K, float64) {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	var best K
	var bs float64
	for _, k := range keys {
		if m[k] > bs {
			best, bs = k, m[k]
		}
	}
	return best, bs
}

// Text is the verdict in a sentence for people: for an alarm, what is
// broken and whom to tell; else why the estimate was wrong.
func (v Verdict) Text() string {
	w := (time.Duration(v.WaitS) * time.Second).Round(time.Second)
	if !v.Alarm {
		return fmt.Sprintf("waited %s, past the %s it should not have passed, for a reason that is not a fault: %s; the estimate is revised", w,
			(time.Duration(v.ThresholdS) * time.Second).Round(time.Second), reasonText[v.Reason])
	}
	return fmt.Sprintf("waited %s, more than %s, and %s of it because %s: scheduling is broken — tell the %s",
		w, (time.Duration(v.ThresholdS) * time.Second).Round(time.Second), (time.Duration(v.BrokenS) * time.Second).Round(time.Second),
		causeText[v.Cause], v.Tell)
}

var causeText = map[Cause]string{
	SchedulerStalled: "no scheduler decided anything while tasks could start (scheduler_stalled)",
	IdleCapacity:     "GPUs stayed idle that the policy would have used (idle_capacity)",
	NodesLost:        "nodes were lost or drained (nodes_lost)",
	GPUsUnhealthy:    "GPUs were unhealthy (gpus_unhealthy)",
	Unexplained:      "of nothing the wait's breakdown explains (unexplained)",
}

var reasonText = map[string]string{
	HigherClass:      "tasks of a higher class went first",
	GuaranteeReclaim: "teams below their guaranteed share went first",
	HoldersOverran:   "the GPUs' holders ran past their predicted ends",
	Reserved:         "the free GPUs were reserved for tasks ahead",
	Fragmented:       "GPUs were free, but not where the task fits",
	Preempted:        "it was preempted",
}
