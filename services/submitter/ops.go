package submitter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// opError is an operation's failure as both transports report it.
type opError struct {
	Status   int // HTTP status
	Msg      string
	Field    string // set when the caller's input is at fault
	NotFound bool
}

func (e *opError) Error() string {
	if e.Field != "" {
		return e.Field + ": " + e.Msg
	}
	return e.Msg
}

func invalid(field, rule string) error {
	return &opError{Status: http.StatusBadRequest, Field: field, Msg: rule}
}

// tooLarge refuses a body of n bytes (n < 0: unknown, over the limit)
// larger than maxBody.
func tooLarge(n int) error {
	msg := fmt.Sprintf("is larger than the limit of %d bytes (the log's record limit)", maxBody)
	if n >= 0 {
		msg = fmt.Sprintf("is %d bytes, larger than the limit of %d bytes (the log's record limit)", n, maxBody)
	}
	return &opError{Status: http.StatusRequestEntityTooLarge, Field: "body", Msg: msg}
}

func notFound(id string) error {
	return &opError{Status: http.StatusNotFound, NotFound: true, Msg: "task " + id + " not found"}
}

// asOpError classifies any error: opErrors and domain.FieldErrors are the
// caller's; everything else is the server's (500).
func asOpError(err error) *opError {
	var oe *opError
	if errors.As(err, &oe) {
		return oe
	}
	var fe *domain.FieldError
	if errors.As(err, &fe) {
		return &opError{Status: http.StatusBadRequest, Field: fe.Field, Msg: fe.Rule}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &opError{Status: http.StatusServiceUnavailable, Msg: "request timed out: " + err.Error()}
	}
	return &opError{Status: http.StatusInternalServerError, Msg: "internal error: " + err.Error()}
}

// errStop ends a log read after the first message.
var errStop = errors.New("stop")

// sync waits until the fold has reached the log's last sequence: every
// write acknowledged before the call is visible afterwards.
func (s *server) sync(ctx context.Context) error {
	last, err := s.lastSeq.get(ctx, s.log)
	if err != nil {
		return fmt.Errorf("reading the log's last sequence: %w", err)
	}
	return s.m.waitFor(ctx, last, s.syncTimeout)
}

// checkID refuses an empty id or one that submit could not have given
// (field task_id).
func checkID(id string) error {
	return api.CheckTaskID(id)
}

// view renders a task; call it with the state locked. The checklist map is
// copied so the view can be encoded after the lock is released.
func view(t *domain.Task) api.TaskView {
	v := api.View(t)
	v.Checklist = maps.Clone(v.Checklist)
	return v
}

// submit validates req and appends a submitted event, unless the team's
// idempotency key names an existing task: then it answers that task with
// Duplicate set.
func (s *server) submit(ctx context.Context, req domain.Request) (api.SubmitReply, error) {
	if err := mayTeam(ctx, &req.Team); err != nil {
		return api.SubmitReply{}, err
	}
	if err := req.Validate(s.limits); err != nil {
		return api.SubmitReply{}, err
	}
	if req.Deadline != nil {
		if err := domain.CheckDeadline(req.Deadline, s.now()); err != nil {
			return api.SubmitReply{}, err
		}
	}
	key := req.IdempotencyKey
	if key != "" {
		// 1. The fold remembers every key, beyond the stream's dedupe window.
		if err := s.sync(ctx); err != nil {
			return api.SubmitReply{}, err
		}
		var (
			rep api.SubmitReply
			ok  bool
		)
		s.m.read(func(st *domain.State) {
			id, found := st.Idem[domain.IdemKey(req.Team, key)]
			if t := st.Tasks[id]; found && t != nil {
				rep, ok = api.SubmitReply{TaskID: id, Duplicate: true, Seq: t.SubmitSeq}, true
			}
		})
		if ok {
			// The same key with another payload is refused, not answered
			// with a task that is not what was asked for.
			orig, err := s.submittedAt(ctx, rep.Seq)
			if err != nil {
				return api.SubmitReply{}, err
			}
			if err := samePayload(orig, submittedOf(req, "", time.Time{})); err != nil {
				return api.SubmitReply{}, err
			}
			return rep, nil
		}
	}

	// 2. Refuse a task no node could ever hold, unless asked not to; the
	// policy says what "could" means.
	if !req.AllowUnplaceable {
		if key == "" {
			if err := s.sync(ctx); err != nil {
				return api.SubmitReply{}, err
			}
		}
		var fe *domain.FieldError
		s.m.read(func(st *domain.State) {
			fe = policy.Unplaceable(st, &domain.Task{GPUs: req.GPUs, GPUModel: req.GPUModel, MinGPUMemMiB: req.MinGPUMemMiB})
		})
		if fe != nil {
			return api.SubmitReply{}, invalid(fe.Field, "cannot run on this cluster: "+fe.Rule+"; submit with allow_unplaceable (--allow-unplaceable) to queue it anyway")
		}
	}

	// 3. Append; the message id covers concurrent retries.
	id, err := uuid.NewV7()
	if err != nil {
		return api.SubmitReply{}, err
	}
	now := s.now()
	e := submittedOf(req, id.String(), now)
	// The record, as the log would hold it, must fit the log's limit: a
	// record the log refuses is never acknowledged.
	subj, data, _, err := events.Encode(e, events.Meta{Time: now})
	if err != nil {
		return api.SubmitReply{}, err
	}
	if len(data) > events.MaxRecordBytes {
		return api.SubmitReply{}, &opError{Status: http.StatusRequestEntityTooLarge, Field: "body",
			Msg: fmt.Sprintf("makes a record of %d bytes, larger than the log's limit of %d bytes: shorten the command, the environment or the text", len(data), events.MaxRecordBytes)}
	}
	msgIDs := []string{""}
	if key != "" {
		msgIDs = []string{submitMsgID(req.Team, key), submitMsgIDLong(req.Team, key)}
	}
	for _, msgID := range msgIDs {
		ack, err := s.log.Append(ctx, events.Msg{Subject: subj, Data: data, MsgID: msgID})
		if err != nil {
			return api.SubmitReply{}, err
		}
		if !ack.Duplicate {
			s.logger.Info().Str("task_id", e.TaskID).Str("team", e.Team).Str("priority", e.Priority).
				Int("gpus", e.GPUs).Uint64("seq", ack.Seq).Msg("submitted")
			return api.SubmitReply{TaskID: e.TaskID, Seq: ack.Seq}, nil
		}
		// A concurrent retry won: answer with the original.
		orig, err := s.submittedAt(ctx, ack.Seq)
		if err != nil {
			return api.SubmitReply{}, err
		}
		if orig.Team == req.Team && orig.IdempotencyKey == key {
			if err := samePayload(orig, e); err != nil {
				return api.SubmitReply{}, err
			}
			return api.SubmitReply{TaskID: orig.TaskID, Duplicate: true, Seq: ack.Seq}, nil
		}
		// The short id of another (team, key) pair collided with ours (a team
		// name with ':'); try the unambiguous one.
		s.logger.Warn().Str("team", req.Team).Str("other_team", orig.Team).Msg("idempotency message id collision")
	}
	return api.SubmitReply{}, &opError{Status: http.StatusInternalServerError,
		Msg: "internal error: idempotency message id collides with another team's"}
}

// submittedOf is the submitted event of a validated request.
func submittedOf(req domain.Request, id string, now time.Time) events.Submitted {
	e := events.Submitted{
		TaskID: id, Name: req.Name, Team: req.Team, Priority: req.Priority, GPUs: req.GPUs,
		Hours: req.Hours, Hypothesis: req.Hypothesis, Command: req.Command, Preemptible: !req.NoPreempt,
		PreemptSignal: req.PreemptSignal, GraceS: req.GraceS, GPUModel: req.GPUModel,
		MinGPUMemMiB: req.MinGPUMemMiB, IdempotencyKey: req.IdempotencyKey, SubmittedAt: now.UTC(), Env: req.Env, Dir: req.Dir,
		Notify: req.Notify,
	}
	if req.Deadline != nil {
		d := req.Deadline.UTC()
		e.Deadline = &d
	}
	return e
}

// samePayload refuses a keyed submission whose payload is not the one the
// key was first used with: 409, field idempotency_key, naming the first
// field that differs by its request wire name (as Stripe and the IETF
// Idempotency-Key draft do; silently answering the first task would hand
// the caller a task that is not what it asked for).
//
// The payload compared is the request as the log records it, after
// validation (trimmed name and team, the priority's canonical spelling,
// defaults filled in): every field of the submitted event but task_id,
// submitted_at and the key itself. The original is the submitted event
// itself, read back by its sequence — not the task in the fold, which
// amends change — so records written before this check compare too and the
// log needs no digest. allow_unplaceable is not recorded and not compared:
// it decides whether a request is accepted, not what the task is. A
// deadline is compared only for being there or not: a relative one
// (--deadline 6h) is another time at each retry, and the first stands.
func samePayload(orig, req events.Submitted) error {
	diff := ""
	switch {
	case orig.Name != req.Name:
		diff = "name"
	case orig.Team != req.Team:
		diff = "team"
	case orig.Priority != req.Priority:
		diff = "priority"
	case orig.GPUs != req.GPUs:
		diff = "gpus"
	case orig.Hours != req.Hours:
		diff = "hours"
	case orig.Hypothesis != req.Hypothesis:
		diff = "hypothesis"
	case orig.Command != req.Command:
		diff = "command"
	case orig.Preemptible != req.Preemptible:
		diff = "no_preempt"
	case orig.PreemptSignal != req.PreemptSignal:
		diff = "preempt_signal"
	case orig.GraceS != req.GraceS:
		diff = "grace_s"
	case orig.GPUModel != req.GPUModel:
		diff = "gpu_model"
	case orig.MinGPUMemMiB != req.MinGPUMemMiB:
		diff = "min_gpu_mem_mib"
	case !maps.Equal(orig.Env, req.Env):
		diff = "env"
	case orig.Dir != req.Dir:
		diff = "dir"
	case !slices.Equal(orig.Notify, req.Notify):
		diff = "notify"
	case (orig.Deadline == nil) != (req.Deadline == nil):
		// Only whether there is one: a relative --deadline 6h resolves to
		// another time at each retry; the first one stands.
		diff = "deadline"
	default:
		return nil
	}
	return &opError{Status: http.StatusConflict, Field: "idempotency_key",
		Msg: fmt.Sprintf("%q was used for task %s with another payload (%s differs); send the same request to get that task, or use a new key for a new task",
			req.IdempotencyKey, orig.TaskID, diff)}
}

// submitMsgID is the Nats-Msg-Id of a keyed submission.
func submitMsgID(team, key string) string { return "submit:" + team + ":" + key }

// submitMsgIDLong is unambiguous (the team's length is spelled out); it is
// used only when submitMsgID collided with another team's, which needs a ':'
// in a team name.
func submitMsgIDLong(team, key string) string {
	return "submit#" + strconv.Itoa(len(team)) + ":" + team + ":" + key
}

// submittedAt reads the submitted event at seq: by a direct get where the
// log has one (no consumer), else by a read from seq.
func (s *server) submittedAt(ctx context.Context, seq uint64) (events.Submitted, error) {
	var rec events.Record
	found := false
	_, err := s.reads.Read(ctx, seq, "", func(m events.Stored) error {
		r, err := events.Decode(m)
		if err != nil {
			return err
		}
		rec, found = r, true
		return errStop
	})
	if err != nil && !errors.Is(err, errStop) {
		return events.Submitted{}, fmt.Errorf("reading the original submission at %d: %w", seq, err)
	}
	sub, ok := rec.Event.(events.Submitted)
	if !found || rec.Seq != seq || !ok {
		return events.Submitted{}, fmt.Errorf("the duplicate ack names seq %d, which is not a submitted event", seq)
	}
	return sub, nil
}

// show answers one task.
func (s *server) show(ctx context.Context, id string) (api.TaskView, error) {
	if err := checkID(id); err != nil {
		return api.TaskView{}, err
	}
	if err := s.sync(ctx); err != nil {
		return api.TaskView{}, err
	}
	var (
		v       api.TaskView
		ok      bool
		started bool    // the task has started at least once
		at      startAt // where it last started, when the read model knows
		known   bool
	)
	s.m.read(func(st *domain.State) {
		if t := st.Tasks[id]; t != nil {
			v, ok = view(t), true
			s.m.predictedEnd(&v, t, time.Now())
			started = !t.FirstStarted.IsZero()
			at, known = s.m.starts[id]
		}
	})
	if !ok {
		return api.TaskView{}, notFound(id)
	}
	if err := mayTask(ctx, id, v.Team); err != nil {
		return api.TaskView{}, err
	}
	switch {
	case known:
		setLog(&v, at.node, at.dir)
	case started: // before a restored snapshot: one direct get
		if err := s.withLog(ctx, &v); err != nil {
			return api.TaskView{}, err
		}
	}
	return v, nil
}

// queue lists the non-terminal tasks (all tasks with all), in this order:
//
//  1. tasks holding or about to hold GPUs (dispatched, running,
//     preempting), in queue order (domain.Task.Before);
//  2. queued tasks, in queue order — the order the scheduler considers them;
//  3. with all, terminal tasks by the time they ended, oldest first.
func (s *server) queue(ctx context.Context, all bool) ([]api.TaskView, error) {
	if err := s.sync(ctx); err != nil {
		return nil, err
	}
	out := []api.TaskView{}
	s.m.read(func(st *domain.State) {
		var ts []*domain.Task
		for _, t := range st.Tasks {
			if all || !t.State.Terminal() {
				ts = append(ts, t)
			}
		}
		sort.Slice(ts, func(i, j int) bool { return listBefore(ts[i], ts[j]) })
		for _, t := range ts {
			out = append(out, redact(ctx, view(t)))
		}
	})
	return out, nil
}

// redact keeps of another team's task what the queue needs to be read
// (who, what class, how big, where, since when, why) and drops what its
// job wrote or may read: the command, the stderr tail, checkpoint refs.
func redact(ctx context.Context, v api.TaskView) api.TaskView {
	if c, ok := callerOf(ctx); ok && !c.May(v.Team) {
		v.Command, v.StderrTail, v.Checkpoint, v.ResumeFrom = "", "", "", ""
	}
	return v
}

func listGroup(t *domain.Task) int {
	switch {
	case t.State.Terminal():
		return 2
	case t.State == domain.Queued:
		return 1
	default:
		return 0
	}
}

func listBefore(a, b *domain.Task) bool {
	ga, gb := listGroup(a), listGroup(b)
	if ga != gb {
		return ga < gb
	}
	if ga == 2 {
		if !a.EndedAt.Equal(b.EndedAt) {
			return a.EndedAt.Before(b.EndedAt)
		}
		return a.SubmitSeq < b.SubmitSeq
	}
	return a.Before(b)
}

// decision is what a write decides on a task's current state: the event to
// append and, when it must not act on stale state, the expected sequence.
type decision struct {
	event  events.Event
	expect *events.Expect
}

// mutate catches up, lets decide look at the task (with the state locked;
// decide must not block), appends what it decided and answers the task as
// it is afterwards. When the append is refused because the task changed,
// it catches up and decides again, at most appendAttempts times.
func (s *server) mutate(ctx context.Context, id string, decide func(t *domain.Task) (decision, error)) (api.TaskView, error) {
	v, _, err := s.mutateSeq(ctx, id, decide)
	return v, err
}

// mutateSeq is mutate that also answers the sequence of the appended event.
func (s *server) mutateSeq(ctx context.Context, id string, decide func(t *domain.Task) (decision, error)) (api.TaskView, uint64, error) {
	if err := checkID(id); err != nil {
		return api.TaskView{}, 0, err
	}
	now := s.now()
	for attempt := 1; ; attempt++ {
		if err := s.sync(ctx); err != nil {
			return api.TaskView{}, 0, err
		}
		var (
			d     decision
			err   error
			found bool
		)
		s.m.read(func(st *domain.State) {
			if t := st.Tasks[id]; t != nil {
				found = true
				if err = mayTask(ctx, id, t.Team); err == nil {
					d, err = decide(t)
				}
			}
		})
		if !found {
			return api.TaskView{}, 0, notFound(id)
		}
		if err != nil {
			return api.TaskView{}, 0, err
		}
		ack, err := events.Append(ctx, s.log, d.event, events.Meta{Time: now}, "", d.expect)
		if errors.Is(err, events.ErrConflict) {
			if attempt < appendAttempts {
				s.logger.Debug().Str("task_id", id).Int("attempt", attempt).Msg("task changed meanwhile; deciding again")
				continue
			}
			return api.TaskView{}, 0, &opError{Status: http.StatusConflict,
				Msg: fmt.Sprintf("task %s kept changing during %d attempts; try again", id, attempt)}
		}
		if err != nil {
			return api.TaskView{}, 0, err
		}
		s.logger.Info().Str("task_id", id).Str("event", string(d.event.EventType())).Uint64("seq", ack.Seq).Msg("appended")
		if err := s.m.waitFor(ctx, ack.Seq, s.syncTimeout); err != nil {
			return api.TaskView{}, 0, err
		}
		var v api.TaskView
		s.m.read(func(st *domain.State) { v = view(st.Tasks[id]) })
		return v, ack.Seq, nil
	}
}

// expectTask guards an append on the task's last event.
func expectTask(t *domain.Task) *events.Expect {
	return &events.Expect{Filter: events.TaskSubjects(t.ID), LastSeq: t.LastSeq}
}

// cancel withdraws a task that has not ended. A running task keeps its GPUs
// until its agent reports the process gone.
func (s *server) cancel(ctx context.Context, req api.IDRequest) (api.TaskView, error) {
	if err := domain.CheckText("by", req.By, false); err != nil {
		return api.TaskView{}, err
	}
	return s.mutate(ctx, req.TaskID, func(t *domain.Task) (decision, error) {
		if t.State.Terminal() {
			return decision{}, invalid("task_id", "task is already "+string(t.State))
		}
		return decision{cancelled(ctx, t.ID, req.By), expectTask(t)}, nil
	})
}

// cancelled is the event of a cancel: by is the authenticated credential
// (actor) and what the caller said goes into note; without
// authentication by is what the caller said, as before.
func cancelled(ctx context.Context, id, said string) events.Cancelled {
	e := events.Cancelled{TaskID: id, By: said}
	if who, ok := actor(ctx); ok {
		e.By, e.Note = who, said
	}
	e.Reason = "cancelled"
	if e.By != "" {
		e.Reason = "cancelled by " + e.By
	}
	if e.Note != "" {
		e.Reason += fmt.Sprintf(" (note: %q)", e.Note)
	}
	return e
}

// amend changes a queued task's gpus, priority, hours or hypothesis. The
// task keeps its SubmittedAt (its place among tasks of its class). The
// changed task must pass the same rules as a submission.
func (s *server) amend(ctx context.Context, req api.AmendRequest) (api.TaskView, error) {
	if req.GPUs == 0 && req.Priority == "" && req.Hours == 0 && req.Hypothesis == "" {
		if err := checkID(req.TaskID); err != nil {
			return api.TaskView{}, err
		}
		return api.TaskView{}, invalid("body", "nothing to amend: give gpus, priority, hours or hypothesis")
	}
	// More GPUs than the cluster could ever give is refused as at submit
	// (a task submitted with --allow-unplaceable keeps its right to wait).
	if req.GPUs != 0 && checkID(req.TaskID) == nil {
		if err := s.sync(ctx); err != nil {
			return api.TaskView{}, err
		}
		var fe *domain.FieldError
		s.m.read(func(st *domain.State) {
			if t := st.Tasks[req.TaskID]; t != nil && req.GPUs > t.GPUs && policy.Unplaceable(st, t) == nil {
				fe = policy.Unplaceable(st, &domain.Task{GPUs: req.GPUs, GPUModel: t.GPUModel, MinGPUMemMiB: t.MinGPUMemMiB})
			}
		})
		if fe != nil {
			return api.TaskView{}, invalid(fe.Field, "cannot run on this cluster: "+fe.Rule)
		}
	}
	return s.mutate(ctx, req.TaskID, func(t *domain.Task) (decision, error) {
		if t.State != domain.Queued {
			return decision{}, invalid("task_id", "task is "+string(t.State)+"; only queued tasks can be amended")
		}
		r := requestOf(t)
		if req.GPUs != 0 {
			r.GPUs = req.GPUs
		}
		if req.Priority != "" {
			r.Priority = req.Priority
		}
		if req.Hours != 0 {
			r.Hours = req.Hours
		}
		if req.Hypothesis != "" {
			r.Hypothesis = req.Hypothesis
		}
		if err := r.Validate(s.limits); err != nil {
			return decision{}, err
		}
		e := events.Amended{TaskID: t.ID}
		if req.GPUs != 0 {
			e.GPUs = r.GPUs
		}
		if req.Priority != "" {
			e.Priority = r.Priority // normalised by Validate
		}
		if req.Hours != 0 {
			e.Hours = r.Hours
		}
		if req.Hypothesis != "" {
			e.Hypothesis = r.Hypothesis
		}
		return decision{e, expectTask(t)}, nil
	})
}

// requestOf is the submission a task would be now.
func requestOf(t *domain.Task) domain.Request {
	return domain.Request{
		Name: t.Name, Team: t.Team, Priority: t.Priority.String(), GPUs: t.GPUs, Hours: t.Hours,
		Hypothesis: t.Hypothesis, Command: t.Command, NoPreempt: !t.Preemptible, PreemptSignal: t.PreemptSignal,
		GraceS: t.GraceS, GPUModel: t.GPUModel, MinGPUMemMiB: t.MinGPUMemMiB, IdempotencyKey: t.IdempotencyKey,
	}
}

// checklist marks a waiting-playbook item done or undone, in any state.
func (s *server) checklist(ctx context.Context, req api.ChecklistRequest) (api.TaskView, error) {
	if !slices.Contains(domain.ChecklistItems, req.Item) {
		if err := checkID(req.TaskID); err != nil {
			return api.TaskView{}, err
		}
		return api.TaskView{}, invalid("item", "must be one of "+strings.Join(domain.ChecklistItems, ", ")+
			fmt.Sprintf(" (got %q)", req.Item))
	}
	return s.mutate(ctx, req.TaskID, func(t *domain.Task) (decision, error) {
		return decision{event: events.ChecklistUpdated{TaskID: t.ID, Item: req.Item, Done: req.Done}}, nil
	})
}

// checkpoint records the checkpoint a task's job saved, only while the task
// is running or preempting: a queued or ended task has no job that could
// have saved one, and its next run (or none) must not resume from a ref
// anyone else made up. The append is guarded like cancel's, so a task that
// ended or was requeued between the check and the append is decided again.
// A retry of the same ref is appended again: the latest checkpoint wins and
// its time moves, which is right when a job overwrites one path.
func (s *server) checkpoint(ctx context.Context, req api.CheckpointRequest) (api.CheckpointReply, error) {
	if err := jobTask(ctx, &req.TaskID); err != nil {
		return api.CheckpointReply{}, err
	}
	if err := checkID(req.TaskID); err != nil {
		return api.CheckpointReply{}, err
	}
	if err := req.Validate(); err != nil {
		return api.CheckpointReply{}, err
	}
	var state domain.TaskState
	_, seq, err := s.mutateSeq(ctx, req.TaskID, func(t *domain.Task) (decision, error) {
		if t.State != domain.Running && t.State != domain.Preempting {
			return decision{}, &opError{Status: http.StatusConflict, Field: "task_id",
				Msg: fmt.Sprintf("task %s is %s: a checkpoint is accepted only while it runs or is being preempted", t.ID, t.State)}
		}
		if err := mayJob(ctx, t); err != nil {
			return decision{}, err
		}
		state = t.State
		return decision{events.Checkpointed{TaskID: t.ID, Ref: req.Ref, Step: req.Step}, expectTask(t)}, nil
	})
	if err != nil {
		return api.CheckpointReply{}, err
	}
	return api.CheckpointReply{TaskID: req.TaskID, Ref: req.Ref, Seq: seq, State: string(state)}, nil
}

// history lists a task's events in log order.
func (s *server) history(ctx context.Context, id string) ([]api.HistoryEntry, error) {
	if err := jobTask(ctx, &id); err != nil {
		return nil, err
	}
	if _, err := s.show(ctx, id); err != nil {
		return nil, err
	}
	if jobOf(ctx) != nil {
		// A job reads its task only while its run lasts.
		var err error
		s.m.read(func(st *domain.State) {
			if t := st.Tasks[id]; t != nil {
				err = mayJob(ctx, t)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	var last, to uint64 // the task's last record; what the fold has seen
	s.m.read(func(st *domain.State) {
		if t := st.Tasks[id]; t != nil {
			last = t.LastSeq
		}
		to = st.Seq
	})
	return s.histories.get(id, last, func() ([]api.HistoryEntry, error) {
		out := []api.HistoryEntry{}
		err := s.readTo(ctx, 0, to, events.TaskSubjects(id), func(m events.Stored) error {
			var env events.Envelope
			if err := json.Unmarshal(m.Data, &env); err != nil || !json.Valid(env.Data) {
				s.logger.Error().Err(err).Uint64("seq", m.Seq).Msg("history: skipping undecodable record")
				return nil
			}
			out = append(out, api.HistoryEntry{Seq: m.Seq, Type: string(env.Type), Time: env.Time, ID: env.ID,
				CausationID: env.CausationID, Data: env.Data})
			return nil
		})
		return out, err
	})
}

// readTo reads the records from sequence from up to to (which the fold
// has reached) matching filter: by direct gets when the log can, with no
// consumer and without asking the log for its last sequence.
func (s *server) readTo(ctx context.Context, from, to uint64, filter string, fn func(events.Stored) error) error {
	if r, ok := s.reads.(interface {
		ReadTo(ctx context.Context, from, last uint64, filter string, fn func(events.Stored) error) error
	}); ok {
		return r.ReadTo(ctx, from, to, filter, fn)
	}
	_, err := s.reads.Read(ctx, from, filter, func(m events.Stored) error {
		if m.Seq > to {
			return errStop
		}
		return fn(m)
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}
