// Package submitter is gpuq's write gateway for people and CI. It validates
// requests, appends the facts they cause (submitted, amended, cancelled,
// checklist_updated, checkpointed) to the audit log, and answers queries
// from a read model that is a fold of that log.
//
// # Transports
//
// The same internal operations are served two ways. Over NATS,
// request/reply on gpuq.api.v1.<op> (queue group api.QueueGroup), ops
// submit, show, queue, cancel, amend, checklist, checkpoint and history,
// and logs on the team-scoped subjects only (a team's credential may not
// ask the agents itself; the unscoped gpuq.api.v1.logs.<node> are the
// agents'); every answer is an api.Reply. queue answers a page
// (api.QueueRequest: limit, after; the reply's next is the next page's
// after). Over HTTP, when Config.HTTPAddr is set:
//
//	POST /v1/tasks                 submit      201, 200 for a duplicate
//	GET  /v1/tasks[?all=true]      queue       every task
//	GET  /v1/tasks?limit=N&after=ID            a page; Link rel="next"
//	GET  /v1/tasks/{id}            show
//	POST /v1/tasks/{id}/cancel     cancel      body optional: {"by": "..."} (see Who acted)
//	POST /v1/tasks/{id}/amend      amend
//	POST /v1/tasks/{id}/checklist  checklist
//	POST /v1/tasks/{id}/checkpoint checkpoint  {"ref": "..."}, from the task's job
//	GET  /v1/tasks/{id}/history    the task's events, in log order
//	GET  /v1/events                the live stream (Server-Sent Events), below
//	GET  /v1/plan[?hours=&limit=&offset=] the policy's next hours per node and GPU (dashboard.go)
//	GET  /v1/teams                 guarantee, used, borrowed, waiting GPU-hours per team
//	GET  /v1/tasks/{id}/explain    the wait broken down, as `gpuq explain`
//	GET  /v1/tasks/{id}/estimates  the start estimates heard since this submitter started
//	GET  /v1/stats                 the advisor's calibration, sampled each minute
//	GET  /                         the dashboard (web/, embedded), no token needed
//	GET  /healthz                  200 {"status":"ok"} once ready, 503 before
//	GET  /metrics                  Prometheus text (Config.Metrics), before ready too
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
// # Browser safety and auth
//
// Every HTTP route first refuses what a web page may have made a browser
// send (browser.go): a Host that is not a name of the listener (421, field
// Host; DNS rebinding), an Origin other than the request's own or one of
// Config.HTTPOrigins (403, field Origin), and a POST, PUT, PATCH or DELETE
// without Content-Type application/json (415, field Content-Type; a page
// can post text/plain without a preflight). Then, with Config.Tokens, the
// bearer token (scheme in any case): 401 without a known one, 403 for a
// team's token on another team's task; /metrics wants the admin token
// (Config.MetricsAddr serves it without one, on an address the operator
// chose).
//
// Who acted: a cancel's by is the authenticated credential (auth.Caller.Name:
// "admin", "team:<team>") — an HTTP token, or over NATS with
// Config.NATSAuth the team subject's team or, on an unscoped subject, the
// admin — and the caller's own by goes into the event's note. Without
// authentication by is what the caller sent.
//
// A success answers the result JSON itself; a failure answers
// {"error": "...", "field": "...", "not_found": true} with 400 (a field or the
// body is wrong), 404 (no such task or route), 405, 409 (a checkpoint of a
// task that is not running or preempting, with field task_id; or, without a
// field, the task kept changing under a cancel, amend or checkpoint), 413
// (field body: a body over events.MaxRecordBytes, 512 KiB, or a submission
// whose encoded submitted record would be — nothing is acknowledged that the
// log would refuse), 415, 421, 503 (starting, or the read model is behind
// the log) or 500. A 409 with field idempotency_key refuses a key reused
// with another payload. Over NATS the same errors carry the same field and not_found.
//
// # Bounded decoding
//
// Every request body, HTTP and NATS, goes first through one pass of
// pkg/jsonguard, with work and memory linear in its length: nesting deeper
// than 64 levels (field body), a repeated key, invalid UTF-8, a lone
// surrogate escape and a number beyond a float64 are refused naming the
// field, before encoding/json decodes it (which would keep the last key and
// turn bad text into U+FFFD). Decoding a 1 MiB body of any adversarial
// shape allocates at most 32 times its size (TestDecodeMemory). A
// submission that leaves out gpus or hours gets domain.DefaultGPUs (1) and
// domain.DefaultHours (4.0), as `gpuq submit` does; an explicit 0 is
// refused. A task id in a request must be of the shape submit mints
// (api.IsTaskID: a lower-case UUID), else 400 naming task_id.
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
// No request opens a JetStream consumer: show, queue and logs are answered
// from the read model (which also keeps where each task last started),
// history and a duplicate submission's original are read by direct gets
// (pkg/events/jetstream: batched $JS.API.DIRECT.GET, nothing left on the
// server) — a task's history is kept for its last sequence, so polling an
// unchanged task reads nothing — and concurrent requests share one ask of
// the log's last sequence. The service's one consumer is its fold's follow; when the
// server refuses it (its consumer limit, a permission) /healthz answers
// 503 naming why while the fold retries.
//
// # Writes
//
// Submissions are validated with domain.Request.Validate. An idempotency key
// (the body's idempotency_key, or over HTTP the Idempotency-Key header;
// both and different: 400 naming Idempotency-Key) is checked against the
// fold's index first (it outlives JetStream's de-duplication window);
// otherwise the submitted event carries the message id
// "submit:<team>:<key>", so concurrent retries are de-duplicated by the
// stream, and a duplicate ack is answered with the original task's id.
// Either way the original submitted event is read back by its sequence (a
// direct get) and compared with the request, validated and normalised,
// field by field (samePayload): another payload is refused, 409 with field
// idempotency_key naming the field that differs. The log stores no digest:
// comparing against the recorded event works for records older than the
// check, and amends (which change the task in the fold) do not count.
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
// further back, from the log with the submitter's direct reads (batched
// direct gets by sequence: no consumer per follower); then the follower
// goes on live.
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
