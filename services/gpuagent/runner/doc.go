// Package runner owns running one task's command as a real process on the
// agent's host, so that it outlives the agent: each run has a supervisor
// — the agent's own binary re-executed (supervise.go), in its own session
// — that starts `sh -c Command` in its own process group, appends its
// stdout and stderr to the task's log file, keeps the last lines of stderr,
// waits for it, stops whatever is left of it, and writes the run's
// records in the run directory: spec.json (what to run), proc.json (the
// supervisor's and the job's pid, start ticks and boot id) and exit.json
// (how it ended). A restarted agent adopts a run from those records
// (Adopt): a live job is watched as before, an ended one yields its real
// exit code, and a pid that now names another process, or a record from
// another boot, is never taken for the job. With a Fence the supervisor
// stops its job itself, by the preemption protocol, once no agent has been
// alive for the node timeout.
//
// A task is every process its command started: the supervisor is their
// child subreaper, so the task is the supervisor's descendants, whether
// they stayed in the job's process group or left it (tree_linux.go; no
// cgroup is used). Signals reach all of them (Signal); Preempt sends the
// preemption signal the same way, the wrapping shell included, so the rest
// of a shell chain never runs after it; Stop is the escalation (first
// signal, grace, SIGTERM, SIGKILL). A command that ends by itself takes
// what is left of its task with it; a task being stopped ends when its
// last process ends. The supervisor records the task's processes every
// 2 s (procs.json): should it be killed, its orphans go to init, and the
// agent sweeps them from that record (by pid and start ticks).
//
// What the command runs with (GPU assignment, GPUQ_* variables, checkpoint
// directories) is decided by the caller and passed in Spec.Env; reporting
// start and exit as events is the agent's business, not this package's.
package runner
