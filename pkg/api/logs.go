package api

import (
	"encoding/json"
	"errors"
	"fmt"

	"time"

	"github.com/nats-io/nats.go"
)

// OpLogs is the agents' log operation. Each agent answers it for its own
// node on LogsSubject(node), not under the submitter's queue group: a
// task's output lives on the node that ran it, and only that node's agent
// can read it. The subject is under gpuq.api (request/reply, in no
// stream), not gpuq.node.<node>.…, which the audit stream captures.
const OpLogs = "logs"

// MaxLogChunk bounds the output one logs reply carries, in bytes (well
// under NATS's default 1 MiB payload).
const MaxLogChunk = 256 << 10

// LogsSubject is the subject a node's agent answers log requests on.
func LogsSubject(node string) string { return SubjectPrefix + OpLogs + "." + node }

// LogsRequest asks a node's agent for a task's output: from byte Offset
// (0: the start), or, with Tail > 0, the last Tail lines. At most
// MaxBytes (0 or more than MaxLogChunk: MaxLogChunk) come back; ask again
// from Next for the rest.
type LogsRequest struct {
	TaskID   string `json:"task_id"`
	Offset   int64  `json:"offset,omitempty"`
	Tail     int    `json:"tail,omitempty"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}

// LogsReply is a piece of a task's output.log: Data is the bytes from
// Offset to Next (cut at a UTF-8 boundary); Size is the file's size when
// it was read, so Next < Size means there is more.
type LogsReply struct {
	TaskID string `json:"task_id"`
	Node   string `json:"node"`
	Path   string `json:"path"`
	Offset int64  `json:"offset"`
	Next   int64  `json:"next"`
	Size   int64  `json:"size"`
	Data   string `json:"data"`
}

// Logs asks node's agent for a piece of a task's output.
func (c *Client) Logs(node string, req LogsRequest) (LogsReply, error) {
	var out LogsReply
	body, err := json.Marshal(req)
	if err != nil {
		return out, err
	}
	to := c.Timeout
	if to == 0 {
		to = 10 * time.Second
	}
	subj := LogsSubject(node)
	if c.Team != "" {
		// A team's credential may not ask the agents itself: the
		// submitter asks for it, for the team's own tasks
		// (gpuq.api.v1.team.<team>.logs).
		subj = Subject(c.Team, OpLogs)
	}
	m, err := c.request(subj, "logs", body, to)
	if err != nil {
		var ae *Error
		if errors.As(err, &ae) {
			return out, err
		}
		if errors.Is(err, nats.ErrNoResponders) {
			return out, &unanswered{fmt.Sprintf("no gpuq agent is answering for node %s on %s (is its gpuq-agent running?)", node, LogsSubject(node)), err}
		}
		return out, fmt.Errorf("asking node %s for the output: %w", node, err)
	}
	var r Reply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return out, fmt.Errorf("bad reply from node %s: %w", node, err)
	}
	if r.Error != "" {
		return out, &Error{Msg: r.Error, Field: r.Field, NotFound: r.NotFound, Status: r.Status}
	}
	return out, json.Unmarshal(r.Result, &out)
}
