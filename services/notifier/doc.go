// Package notifier tells people what happens to their tasks before they
// ask: it folds the log like every other service, follows the advisor's
// advice (gpuq.advice.<task_id>), decides notices from both (decide.go:
// starts_soon, eta_changed, deadline_at_risk, suggestion, alert,
// preempt_requested, started, completed, failed) and delivers each to
// every webhook destination that wants it as a signed JSON POST
// (deliver.go): the operator's, the teams' (dests.go), and the task's own
// (gpuq submit --notify, kept in its submitted event; unsigned, see
// TaskDestination); the operators' alarm channel gets the alerts alone
// (AdminDestination, --admin-webhook).
//
// Delivery is at least once across restarts: a notice is recorded in a
// JetStream KV bucket (store.go) before it is sent, and marked delivered
// after; a restart resumes what was pending and regenerates nothing it
// recorded already, because a notice's id is derived from (task, type,
// attempt or log sequence) and the log sequence up to which notices were
// recorded is kept as a cursor. Every destination has its own bounded
// queue and worker, so a slow or dead receiver delays only itself.
package notifier
