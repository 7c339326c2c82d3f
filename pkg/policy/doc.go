// Package policy is gpuq's one scheduling policy: a pure function of
// (state, now, predictions, options) to decisions — no NATS, no wall clock,
// no randomness. The live scheduler, the advisor's forward simulation and
// `gpuq sim` all call it; there is no second copy.
//
// A pass reads as stages, one file each:
//
//	order.go     who is considered first (guarantees, class, submit time)
//	feasible.go  which nodes and GPUs a task may use at all
//	place.go     where it goes: best fit on one node, or gang across nodes
//	preempt.go   whom to preempt for it, under which policy, and when
//	             (a task below CRITICAL waits, up to PreemptPatience,
//	             for victims that would lose no more than it waited)
//	backfill.go  EASY backfill around the first blocked task's reservation
//
// Glossary: a *placement* is a set of GPUs on one node; a *gang* is a task's
// placements across several nodes, taken all or nothing; a *reservation*
// is the earliest time the blocked head task can start.
package policy
