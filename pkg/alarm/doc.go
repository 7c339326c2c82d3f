// Package alarm decides whether a wait that passed 2× its estimate means
// that scheduling is broken, and says why.
//
// It owns the causes of a wait that `gpuq explain` breaks a wait into
// (CauseOf: the policy's own reason for a queued task, as a cause; pkg/audit
// folds a log with it), a Tracker that adds up each queued task's wait by
// cause as the advisor (or `gpuq sim`) observes the queue, and Classify, the
// one rule that turns a late task's breakdown into a Verdict:
//
//   - legitimate (higher classes ahead, guarantee reclaims, holders running
//     past their predictions, reservations, fragmentation, preemption): the
//     person gets a revised estimate with that reason, not an alarm;
//   - broken (no scheduler deciding, capacity idle that the policy would
//     have used, nodes lost or drained, unhealthy GPUs, or nothing explains
//     it): an alarm naming the cause and whom to tell (the operators).
//
// The advisor (pkg/estimate, Estimator.Late) and `gpuq sim` (pkg/sim) call
// the same Tracker and Classify: the simulated alarm is the advisor's.
//
// Everything here is pure: a function of the states, policy results and
// times handed in; no clock, no I/O. A Tracker is not safe for concurrent
// use (the advisor calls it under its fold's lock).
package alarm
