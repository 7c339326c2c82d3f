// Package tasksock owns the task socket: a Unix socket per run, in the
// run's directory, that the node's agent serves to the job
// (GPUQ_TASK_SOCKET), speaking HTTP/1.1 and JSON. Through it a job learns
// about its own task and its preemption, and reports its checkpoints and
// progress, with no NATS credential and while NATS is out of reach
// (it answers with what the node knows).
//
//	GET  /v1/task                  id, name, attempt, resume_from and its step, grace, GPUs
//	GET  /v1/preemption[?wait=30s] requested, reason, deadline (RFC 3339: when SIGTERM comes),
//	                               grace_s, by_task, by_priority, policy; a long-poll until
//	                               the request comes or the wait ends
//	POST /v1/checkpoint            {"ref": PATH, "step": N}: a committed checkpoint
//	POST /v1/progress              {"step": N, "total": M} or {"fraction": F}
//	GET  /v1/progress              the latest progress reported
//
// Bad input gets a 4xx with {"error", "field"} naming the field; bodies are
// bounded (MaxBody), so are the long-polls waiting at once on one socket
// (MaxWaiting) and a wait (MaxWait).
//
// Isolation: the socket's directory is 0700 and the socket 0600, so no
// other user reaches it. Tasks of one node run as the agent's user, so
// file modes cannot keep one task from another: each connection's peer
// (SO_PEERCRED) is checked instead, and a process of another task of
// this node (a descendant of another run's supervisor) is refused (403).
// A process outside every task — the operator's shell, the agent's own
// user — may read and write any socket, as it may read every run
// directory anyway; and a task could still reach another one by ptrace,
// which same-user processes allow unless the node restricts it
// (kernel.yama.ptrace_scope).
//
// The agent opens a run's socket before it starts the job and again when
// it adopts the run after a restart; what a socket answers comes from the
// agent (Open's Task, SetPreemption), checkpoints go to the agent's
// Backend.
package tasksock
