// Package submitter is gpuq's write gateway for people and CI. It validates
// requests, appends the facts they cause (submitted, amended, cancelled,
// checklist_updated, checkpointed) to the audit log, and answers queries
// from a read model that is a fold of that log.
//
// # Transports
//
// The same internal operations are served two ways. Over NATS,
// request/reply on gpuq.api.v1.<op> (queue group api.QueueGroup), ops
// submit, show, queue, cancel, amend, checklist, checkpoint and history;
// every answer is an api.Reply. Over HTTP, when Config.HTTPAddr is set:
//
//	POST /v1/tasks                 submit      201, 200 for a duplicate
//	GET  /v1/tasks[?all=true]      queue
//	GET  /v1/tasks/{id}            show
//	POST /v1/tasks/{id}/cancel     cancel      body optional: {"by": "..."}
//	POST /v1/tasks/{id}/amend      amend
//	POST /v1/tasks/{id}/checklist  checklist
//	POST /v1/tasks/{id}/checkpoint checkpoint  {"ref": "..."}, from the task's job
//	GET  /v1/tasks/{id}/history    the task's events, in log order
//	GET  /v1/events                the live stream (Server-Sent Events), below
//	GET  /                         the dashboard (web/, embedded), no token needed
//	GET  /healthz                  200 {"status":"ok"} once ready, 503 before
//
// Until the read model has caught up, every HTTP route but /healthz answers
// 503, and the NATS subscriptions do not exist yet. /healthz also consults
// Config.Health when set.
//
// queue lists non-terminal tasks (all tasks with all=true) in three groups:
// tasks holding or about to hold GPUs (dispatched, running, preempting),
// then queued tasks, both in queue order (domain.Task.Before), then terminal
// tasks by the time they ended. The checklist may be marked in any state;
// amend applies to queued tasks only; cancel to any task not yet ended;
// checkpoint to running or preempting tasks only (the job reports where it
// saved one; any other state answers 409 naming task_id, as nothing runs
// that could have saved it). A checkpoint's ref must be non-blank, at most
// api.MaxCheckpointRef bytes and free of control characters (it becomes the
// next run's GPUQ_RESUME_FROM); it is kept as given.
//
// A success answers the result JSON itself; a failure answers
// {"error": "...", "field": "...", "not_found": true} with 400 (a field or the
// body is wrong), 404 (no such task or route), 405, 409 (a checkpoint of a
// task that is not running or preempting, with field task_id; or, without a
// field, the task kept changing under a cancel, amend or checkpoint), 413
// (body over 1 MiB), 503 (starting, or the read model is behind the log) or
// 500. Over NATS the same errors carry the same field and not_found.
//
// # Read model and consistency
//
// On start the service folds the whole log into a domain.State, then follows
// the log from the next sequence, applying each record under a mutex. Every
// query first asks the log for its last sequence and waits (at most
// syncTimeout) until the fold has reached it: read-your-writes, so `show`
// right after `submit` sees the task, on any replica of the service.
// Records that do not decode are skipped, logged and counted; the fold still
// advances past them.
//
// # Writes
//
// Submissions are validated with domain.Request.Validate. An idempotency key
// is checked against the fold's index first (it outlives JetStream's
// de-duplication window); otherwise the submitted event carries the message
// id "submit:<team>:<key>", so concurrent retries are de-duplicated by the
// stream, and a duplicate ack is answered with the original task's id.
//
// Cancel, amend and checkpoint append with an expected last sequence on the
// task's subjects (gpuq.task.<id>.>): if another writer (the scheduler, an
// agent, another submitter) appended to the task meanwhile, the append is
// refused, the service catches up, decides again and retries a few times. A
// checkpoint is not de-duplicated: a job's retry appends it again (the
// latest wins, and its time is the one that counts for lost work).
//
// # The live stream
//
// GET /v1/events answers text/event-stream. Every log record the caller
// may see (with a team's token, its team's tasks' records and every
// node's; with the admin's or without tokens, all) is one event:
//
//	id: <log sequence>
//	event: <record type>           submitted, dispatched, started, available, …
//	data: {"seq":…,"type":…,"time":…,"subject":…,"task_id":…,"node":…,"team":…,"data":{the event}}
//
// Beside them, without an id (they do not move Last-Event-ID): hello (the
// first event: the sequence the stream goes on from, and the team),
// advice (the advisor's latest advice for a task, as published on
// gpuq.advice.<task_id>; a new follower first gets the latest advice of
// every waiting task it may see), node (a node's view, as GET /v1/nodes
// without the heartbeat, after records that changed it or what its GPUs
// hold) and reset (the stream could not resume: Last-Event-ID is past the
// log's end or more than StreamConfig.MaxResume records behind; the
// client reloads and the stream goes on live). Keep-alive comments come
// every 15 s.
//
// Last-Event-ID (or ?after=N; the header wins) resumes after that
// sequence: nothing repeated, nothing missed. The records since then come
// from a ring of the last StreamConfig.Ring records the hub framed, and,
// further back, from the log by sequence (events.Getter: a direct get, no
// consumer per follower); then the follower goes on live.
//
// Everything is fanned out in memory (stream.go) from this submitter's
// one fold (its Applied hook) and one core NATS subscription to
// gpuq.advice.>. Each follower has a bounded queue (StreamConfig.Buffer
// frames, shared, not copied); the hub never waits: a follower whose
// queue is full is dropped (its response ends with a comment saying
// why) and its client resumes. Past StreamConfig.MaxFollowers followers
// a new one gets 503 with Retry-After. A stream sets its own write
// deadline per write and none on reads, so the server's ReadTimeout and
// WriteTimeout do not end it; shutdown ends every stream at once.
//
// # Concurrency and shutdown
//
// NATS requests are handled concurrently (bounded); HTTP requests by
// net/http. When Run's context ends the service stops taking requests,
// lets in-flight ones finish (bounded), stops following the log and returns
// nil. Handlers never panic on bad input; a panic in a handler is recovered
// and answered as a 500.
package submitter
