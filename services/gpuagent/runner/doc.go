// Package runner owns running one task's command as a real process on the
// agent's host: starting it with `sh -c` in its own process group, appending
// its stdout and stderr to the task's log file, keeping the last lines of
// stderr for failure reports, delivering signals to the whole process group,
// and the preemption escalation (first signal, grace, SIGTERM, SIGKILL).
//
// What the command runs with (GPU assignment, GPUQ_* variables, checkpoint
// directories) is decided by the caller and passed in Spec.Env; reporting
// start and exit as events is the agent's business, not this package's.
package runner
