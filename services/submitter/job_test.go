package submitter

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestJobAPI: a request on a run's job subject (what the job's own
// credential may publish) acts for that run only, and only while it
// lasts: its checkpoint and history go through while the task runs on
// that node from that dispatch; another task, another run, another node,
// another operation, or the same run once the task ended are refused.
func TestJobAPI(t *testing.T) {
	type ids struct{ task, other, node string }
	type tc struct {
		setup      func(h *harness, id, other string) // the task is running when setup is nil
		subject    func(x ids, run uint64) string
		body       func(x ids) any
		wantStatus int // 0: accepted
		wantMsg    string
	}
	own := func(op string) func(x ids, run uint64) string {
		return func(x ids, run uint64) string { return api.JobSubject(x.node, x.task, run, op) }
	}
	ckpt := func(x ids) any { return api.CheckpointRequest{Ref: "/ckpt/7"} }
	cases := map[string]tc{
		"its checkpoint":                 {subject: own(api.OpCheckpoint), body: ckpt},
		"its checkpoint naming its task": {subject: own(api.OpCheckpoint), body: func(x ids) any { return api.CheckpointRequest{TaskID: x.task, Ref: "/c"} }},
		"its history":                    {subject: own(api.OpHistory), body: func(ids) any { return api.IDRequest{} }},
		"its checkpoint while preempting": {subject: own(api.OpCheckpoint), body: ckpt,
			setup: func(h *harness, id, _ string) {
				h.appendEvent(events.PreemptRequested{TaskID: id, For: "other", Policy: "critical-only", Reason: "r"})
			}},
		"another task's checkpoint in the body": {subject: own(api.OpCheckpoint), wantStatus: 403, wantMsg: "may not act on task",
			body: func(x ids) any { return api.CheckpointRequest{TaskID: x.other, Ref: "/c"} }},
		"another task's history in the body": {subject: own(api.OpHistory), wantStatus: 403, wantMsg: "may not act on task",
			body: func(x ids) any { return api.IDRequest{TaskID: x.other} }},
		"another task's subject": {wantStatus: 403, wantMsg: "runs as dispatch", body: ckpt,
			subject: func(x ids, run uint64) string { return api.JobSubject(x.node, x.other, run, api.OpCheckpoint) }},
		"another run": {wantStatus: 403, wantMsg: "a run that is over", body: ckpt,
			subject: func(x ids, run uint64) string { return api.JobSubject(x.node, x.task, run-1, api.OpCheckpoint) }},
		"another node": {wantStatus: 403, wantMsg: "a run that is over", body: ckpt,
			subject: func(x ids, run uint64) string { return api.JobSubject("node-x", x.task, run, api.OpCheckpoint) }},
		"another operation": {wantStatus: 403, wantMsg: "a job's credential may ask only for", body: func(ids) any { return api.IDRequest{} },
			subject: own(api.OpCancel)},
		"a subject that does not parse": {wantStatus: 404, body: ckpt,
			subject: func(x ids, _ uint64) string { return api.JobPrefix + x.node + "." + x.task + ".x." + api.OpCheckpoint }},
		"checkpoint once the task completed": {subject: own(api.OpCheckpoint), body: ckpt, wantStatus: 409, wantMsg: "is completed",
			setup: func(h *harness, id, _ string) {
				h.appendEvent(events.Completed{TaskID: id, Node: "node-" + id[len(id)-6:]})
			}},
		"history once the task failed": {subject: own(api.OpHistory), body: func(ids) any { return api.IDRequest{} }, wantStatus: 409, wantMsg: "good only while its run lasts",
			setup: func(h *harness, id, _ string) {
				h.appendEvent(events.Failed{TaskID: id, Node: "node-" + id[len(id)-6:], ExitCode: 1})
			}},
		"checkpoint once the task was cancelled": {subject: own(api.OpCheckpoint), body: ckpt, wantStatus: 409,
			setup: func(h *harness, id, _ string) { h.appendEvent(events.Cancelled{TaskID: id, By: "t"}) }},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			id := h.submit(validReq()).TaskID
			other := h.submit(validReq()).TaskID
			toRunning(h, id)
			toRunning(h, other)
			var run uint64
			h.show(id) // caught up
			h.s.m.read(func(st *domain.State) { run = st.Tasks[id].DispatchSeq })
			if c.setup != nil {
				c.setup(h, id, other)
			}
			x := ids{task: id, other: other, node: "node-" + id[len(id)-6:]}
			data, _ := json.Marshal(c.body(x))
			subject := c.subject(x, run)
			ctx, op := natsCaller(h.ctx, subject)
			r := h.s.handleNATS(ctx, op, data)
			if c.wantStatus == 0 {
				if r.Error != "" {
					t.Fatalf("%s: refused: %s", subject, r.Error)
				}
				return
			}
			if r.Error == "" || !strings.Contains(r.Error, c.wantMsg) {
				t.Fatalf("%s: reply %+v, want an error with %q", subject, r, c.wantMsg)
			}
			_, err := h.s.dispatch(ctx, op, data)
			if oe := asOpError(err); oe.Status != c.wantStatus {
				t.Fatalf("%s: status %d (%s), want %d", subject, oe.Status, oe.Msg, c.wantStatus)
			}
		})
	}
}
