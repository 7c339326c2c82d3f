package auth

import (
	"fmt"
	"regexp"
	"sort"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/events"
)

// Role is one NATS user's permissions. Subjects not allowed are denied by
// the server; Deny refines an Allow wildcard.
type Role struct {
	Name      string
	Team      string // ci-<team> only: the team its API subjects are scoped to
	PubAllow  []string
	PubDeny   []string
	SubAllow  []string
	Responses bool // may answer requests it received (allow_responses)
	Doc       string
}

// Inbox is the role's own inbox prefix: replies to a role's requests
// (JetStream API answers, acks, request/reply) go there, and only the role
// may subscribe to it, so no one reads another's replies.
func Inbox(role string) string { return "_INBOX_" + role }

// JobInbox is a job's inbox prefix: only its own credential may
// subscribe there.
func JobInbox(task string) string { return "_INBOX_job_" + task }

// JobRole is what a job's credential may do, as the scoped signing key of
// node's agent grants it (the server fills in the templates from the
// user JWT: its name is the task id, its tag run:<n> the run): request its
// own run's checkpoint and history from the submitter (api.JobSubject),
// and read the replies in its own inbox. Nothing else: not the log, not
// another task, not another run of its own task.
func JobRole(node string) Role {
	return Role{Name: "job", Doc: "a job's own credential (minted at its start by the agent of " + node + ", valid while its run lasts): its own run's checkpoint and history through the submitter",
		PubAllow: prefixed(api.JobPrefix+node+".{{name()}}.{{tag(run)}}.", api.JobOps),
		SubAllow: []string{JobInbox("{{name()}}") + ".>"}}
}

// API subjects (pkg/api).
const (
	apiPrefix     = api.SubjectPrefix
	TeamAPIPrefix = api.TeamPrefix
)

// SubmitterOps are the operations the submitter answers; AdvisorOps the
// advisor's. ReadOps are the ones that change nothing.
var (
	SubmitterOps = []string{"submit", "show", "queue", "cancel", "amend", "checklist", "history", "checkpoint", "nodes", "drain", "undrain"}
	AdvisorOps   = []string{"estimate", "stats"}
	ReadOps      = []string{"show", "queue", "history", "nodes", "estimate", "stats"}
	// TeamOnlyOps the submitter answers only team-scoped: a task's output,
	// which it asks of the task's agent for a team (gpuq.api.v1.team.<team>.logs).
	TeamOnlyOps = []string{"logs"}
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// CheckName refuses a team or node name that is not a safe subject token
// and file name.
func CheckName(field, s string) error {
	if !nameRE.MatchString(s) {
		return fmt.Errorf("%s %q: must be 1-64 letters, digits, '-' or '_', starting with a letter or digit", field, s)
	}
	return nil
}

const stream = events.StreamName

// readDirect lets a client read stream s without creating anything on
// the server: stream info, message get and direct get by sequence (what
// pkg/events/jetstream's direct reads use). A role with only this creates
// no consumer at all, so it cannot fill the stream's consumer limit.
func readDirect(s string) []string {
	return []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO." + s,
		"$JS.API.STREAM.MSG.GET." + s,
		"$JS.API.DIRECT.GET." + s, "$JS.API.DIRECT.GET." + s + ".>",
	}
}

// readStream is readDirect and ordered consumers, for the services that
// follow the log with them (submitter, scheduler, advisor) and for object
// stores: consumer create (the named form nats.go uses), info, delete,
// next, flow control. The legacy durable form
// ($JS.API.CONSUMER.DURABLE.CREATE) is denied to every role (consumerDeny).
func readStream(s string) []string {
	return cat(readDirect(s), []string{
		"$JS.API.CONSUMER.CREATE." + s, "$JS.API.CONSUMER.CREATE." + s + ".>",
		"$JS.API.CONSUMER.INFO." + s + ".>",
		"$JS.API.CONSUMER.DELETE." + s + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + s + ".>",
		"$JS.FC." + s + ".>",
	})
}

// followWake lets a direct reader subscribe to the log's subjects on core
// NATS: it learns of a new record at once instead of at its next poll (it
// reads the record itself by direct get). What it sees there it may read
// in the log anyway.
var followWake = []string{events.TaskPrefix + ">", events.NodePrefix + ">"}

// consumerDeny: no role but the admin creates a durable consumer by the
// legacy subject.
var consumerDeny = []string{"$JS.API.CONSUMER.DURABLE.CREATE.>"}

// createStream lets a client create s when it does not exist. Updating
// (which could shorten limits) is the admin's; delete and purge of the
// audit stream nobody's.
func createStream(s string) []string { return []string{"$JS.API.STREAM.CREATE." + s} }

func kv(bucket string) string  { return "KV_" + bucket }
func obj(bucket string) string { return "OBJ_" + bucket }

func taskEvents(types ...events.Type) []string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = events.TaskPrefix + "*." + string(t)
	}
	return out
}

func nodeEvents(node string, types ...events.Type) []string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = events.NodePrefix + node + "." + string(t)
	}
	return out
}

func cat(lists ...[]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, l := range lists {
		for _, s := range l {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

func prefixed(prefix string, ops []string) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = prefix + op
	}
	return out
}

// adviceRead lets a client read the latest advice (gpuq estimate).
var adviceRead = []string{"$JS.API.INFO", "$JS.API.STREAM.INFO." + events.AdviceStreamName,
	"$JS.API.STREAM.MSG.GET." + events.AdviceStreamName, "$JS.API.DIRECT.GET." + events.AdviceStreamName,
	"$JS.API.DIRECT.GET." + events.AdviceStreamName + ".>"}

// adviceLast lets the submitter read a task's latest advice, and no more
// (its user JWT, sent whole in CONNECT, must stay under the server's
// 4 KiB control line).
var adviceLast = []string{"$JS.API.STREAM.INFO." + events.AdviceStreamName, "$JS.API.STREAM.MSG.GET." + events.AdviceStreamName}

// heartbeatRead lets a client read the heartbeat bucket's keys.
var heartbeatRead = []string{"$JS.API.STREAM.INFO." + kv(events.HeartbeatBucket),
	"$JS.API.STREAM.MSG.GET." + kv(events.HeartbeatBucket), "$JS.API.DIRECT.GET." + kv(events.HeartbeatBucket) + ".>"}

// snapshotStore lets a service keep its snapshots in its own bucket (and
// only there: a snapshot is trusted state).
func snapshotStore(bucket string) []string {
	return cat(readStream(obj(bucket)), createStream(obj(bucket)),
		[]string{"$JS.API.STREAM.PURGE." + obj(bucket), "$O." + bucket + ".>"})
}

// auditDeny is what no role, the admin included, may ask of the audit
// stream (which denies delete and purge itself as well).
var auditDeny = []string{"$JS.API.STREAM.DELETE." + stream, "$JS.API.STREAM.PURGE." + stream, "$JS.API.STREAM.MSG.DELETE." + stream}

// Roles returns every role for the given teams and nodes, sorted by name.
func Roles(teams, nodes []string) []Role {
	teamAPI := func(ops []string) []string { return prefixed(TeamAPIPrefix+"*.", ops) }
	rs := []Role{
		{Name: "submitter", Responses: true,
			Doc: "the submitter service: appends submitted, amended, cancelled, checklist_updated, checkpointed and drained/undrained; serves the request API; hears and reads the advice for the live stream; asks the advisor's stats for the dashboard; keeps its snapshots",
			PubAllow: cat(readStream(stream), createStream(stream), heartbeatRead,
				taskEvents(events.TypeSubmitted, events.TypeAmended, events.TypeCancelled, events.TypeChecklistUpdated, events.TypeCheckpointed),
				nodeEvents("*", events.TypeDrained, events.TypeUndrained),
				[]string{apiPrefix + "logs.*", apiPrefix + "stats"}, snapshotStore(events.SnapshotBucketOf("submitter")), adviceLast),
			// the live stream (GET /v1/events) passes the advice on
			SubAllow: cat(prefixed(apiPrefix, SubmitterOps), teamAPI(SubmitterOps), teamAPI(TeamOnlyOps), prefixed(api.JobPrefix+"*.*.*.", api.JobOps),
				[]string{events.AdvicePrefix + ">"})},
		{Name: "scheduler",
			Doc: "the scheduler: appends dispatched, preempt_requested, requeued and lost; holds the leader lease; watches heartbeats; keeps snapshots",
			PubAllow: cat(readStream(stream), createStream(stream),
				taskEvents(events.TypeDispatched, events.TypePreemptRequested, events.TypeRequeued),
				nodeEvents("*", events.TypeLost),
				readStream(kv(events.LeaderBucket)), createStream(kv(events.LeaderBucket)), []string{"$KV." + events.LeaderBucket + ".>"},
				readStream(kv(events.HeartbeatBucket)), createStream(kv(events.HeartbeatBucket)),
				snapshotStore(events.SnapshotBucket))},
		{Name: "advisor", Responses: true,
			Doc: "the advisor: reads the log, publishes advice (GPUQ_ADVICE), answers estimate and stats; keeps its snapshots",
			PubAllow: cat(readStream(stream), createStream(stream), createStream(events.AdviceStreamName), adviceRead,
				[]string{events.AdvicePrefix + ">"}, snapshotStore(events.SnapshotBucketOf("advisor"))),
			SubAllow: cat(prefixed(apiPrefix, AdvisorOps), teamAPI(AdvisorOps))},
		{Name: "notifier",
			Doc: "the notifier: reads the log and the advice, keeps its cursor, deliveries and the teams' destinations (gpuq_notify_* buckets); appends nothing",
			PubAllow: cat(readStream(stream), createStream(stream), createStream(events.AdviceStreamName), readStream(events.AdviceStreamName),
				readStream(kv(events.NotifyStateBucket)), createStream(kv(events.NotifyStateBucket)), []string{"$KV." + events.NotifyStateBucket + ".>"},
				readStream(kv(events.NotifyDeliveryBucket)), createStream(kv(events.NotifyDeliveryBucket)), []string{"$KV." + events.NotifyDeliveryBucket + ".>"},
				readStream(kv(events.NotifyDestBucket)), createStream(kv(events.NotifyDestBucket)), []string{"$KV." + events.NotifyDestBucket + ".>"})},
		{Name: "auditor",
			Doc:      "read-only: the log (by direct gets: no consumer), advice, heartbeats, the scheduler's lease (its state digest, for audit verify), and the read operations of the API",
			PubAllow: cat(readDirect(stream), adviceRead, heartbeatRead, readDirect(kv(events.LeaderBucket)), prefixed(apiPrefix, ReadOps)),
			SubAllow: followWake},
		{Name: "admin",
			Doc:      "everything but deleting or purging the audit stream: stream administration, every API operation, task output",
			PubAllow: []string{">"}, PubDeny: auditDeny, SubAllow: []string{">"}, Responses: true},
	}
	for _, n := range nodes {
		rs = append(rs, Role{Name: "agent-" + n, Responses: true,
			Doc: "the agent of node " + n + ": reads the log by direct gets (no consumer); its own node's available/unhealthy and heartbeat; started, checkpointed, preempted, completed, failed, progress_reported (the fold accepts them only for tasks placed on " + n + "); answers log requests for " + n + "; keeps its snapshots",
			PubAllow: cat(readDirect(stream), createStream(stream),
				nodeEvents(n, events.TypeAvailable, events.TypeUnhealthy),
				taskEvents(events.TypeStarted, events.TypeCheckpointed, events.TypePreempted, events.TypeCompleted, events.TypeFailed, events.TypeProgressReported),
				[]string{"$JS.API.STREAM.INFO." + kv(events.HeartbeatBucket)}, createStream(kv(events.HeartbeatBucket)),
				[]string{"$KV." + events.HeartbeatBucket + "." + n}, snapshotStore(events.SnapshotBucketOf("agent_"+n))),
			SubAllow: cat([]string{apiPrefix + "logs." + n}, followWake)})
	}
	for _, t := range teams {
		rs = append(rs, Role{Name: "ci-" + t, Team: t,
			Doc:      "team " + t + " (CI and people): the request API scoped to " + t + " (gpuq.api.v1.team." + t + ".>), the latest advice; never the log",
			PubAllow: cat([]string{TeamAPIPrefix + t + ".>"}, adviceRead)})
	}
	for i := range rs {
		rs[i].SubAllow = cat([]string{Inbox(rs[i].Name) + ".>"}, rs[i].SubAllow)
		if rs[i].Name != "admin" {
			rs[i].PubDeny = cat(auditDeny, consumerDeny)
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name })
	return rs
}
