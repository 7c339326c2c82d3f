package submitter

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
)

func TestSubmitValid(t *testing.T) {
	h := newHarness(t, nil)
	req := validReq()
	req.GPUModel = "H100"
	rep := h.submit(req)
	if _, err := uuid.Parse(rep.TaskID); err != nil {
		t.Fatalf("task id %q: %v", rep.TaskID, err)
	}
	if u := uuid.MustParse(rep.TaskID); u.Version() != 7 {
		t.Errorf("task id version = %d, want 7", u.Version())
	}
	if diff := cmp.Diff(api.SubmitReply{TaskID: rep.TaskID, Seq: 1}, rep); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	want := api.TaskView{
		TaskID: rep.TaskID, Name: "bert-base", Team: "nlp", Priority: "high", GPUs: 2, Hours: 3,
		Hypothesis: "warmup 10k beats 2k", Command: "python train.py", Preemptible: true, GPUModel: "H100",
		State: "queued", SubmittedAt: t0.Add(time.Second), Seq: 1,
	}
	if diff := cmp.Diff(want, h.show(rep.TaskID)); diff != "" {
		t.Errorf("show (-want +got):\n%s", diff)
	}

	// The event carries what Validate filled in and NoPreempt inverted.
	req = validReq()
	req.NoPreempt, req.Priority = true, "CRITICAL"
	rep = h.submit(req)
	var got events.Submitted
	if _, err := events.ReadAll(h.ctx, h.log, rep.Seq, "", func(r events.Record) error {
		got = r.Event.(events.Submitted)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wantEv := events.Submitted{TaskID: rep.TaskID, Name: "bert-base", Team: "nlp", Priority: "critical", GPUs: 2,
		Hours: 3, Hypothesis: "warmup 10k beats 2k", Command: "python train.py", Preemptible: false,
		PreemptSignal: "SIGUSR1", GraceS: 120, SubmittedAt: t0.Add(2 * time.Second)}
	if diff := cmp.Diff(wantEv, got); diff != "" {
		t.Errorf("submitted event (-want +got):\n%s", diff)
	}
}

func TestSubmitInvalid(t *testing.T) {
	cases := map[string]struct {
		edit      func(r *domain.Request)
		wantField string
	}{
		"gpus 0":             {func(r *domain.Request) { r.GPUs = 0 }, "gpus"},
		"gpus above max":     {func(r *domain.Request) { r.GPUs = 9 }, "gpus"},
		"hours 0":            {func(r *domain.Request) { r.Hours = 0 }, "hours"},
		"hours above max":    {func(r *domain.Request) { r.Hours = 49 }, "hours"},
		"missing hypothesis": {func(r *domain.Request) { r.Hypothesis = " " }, "hypothesis"},
		"missing command":    {func(r *domain.Request) { r.Command = "" }, "command"},
		"priority urgent":    {func(r *domain.Request) { r.Priority = "urgent" }, "priority"},
		"missing team":       {func(r *domain.Request) { r.Team = "" }, "team"},
		"missing name":       {func(r *domain.Request) { r.Name = "" }, "name"},
		"team with a dot":    {func(r *domain.Request) { r.Team = "a.b" }, "team"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			req := validReq()
			tc.edit(&req)

			_, err := h.s.submit(h.ctx, req)
			oe := asOpError(err)
			if err == nil || oe.Field != tc.wantField || oe.Status != http.StatusBadRequest || oe.Msg == "" {
				t.Errorf("internal: err = %v (field %q, status %d), want field %q, 400", err, oe.Field, oe.Status, tc.wantField)
			}

			r := h.natsCall(api.OpSubmit, req)
			if r.Field != tc.wantField || r.Error == "" || r.Result != nil {
				t.Errorf("nats: reply = %+v, want field %q", r, tc.wantField)
			}

			w := h.httpCall("POST", "/v1/tasks", mustJSON(t, req))
			if w.Code != http.StatusBadRequest {
				t.Errorf("http: status = %d, want 400", w.Code)
			}
			if got := errReply(t, w); got.Field != tc.wantField || got.Error == "" {
				t.Errorf("http: body = %s, want field %q", w.Body, tc.wantField)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("http: content type %q", ct)
			}

			if n := h.lastSeq(); n != 0 {
				t.Errorf("log has %d events after invalid submissions, want 0", n)
			}
		})
	}
}

func TestIdempotency(t *testing.T) {
	keyed := func(team, key string) domain.Request {
		r := validReq()
		r.Team, r.IdempotencyKey = team, key
		return r
	}
	type step struct {
		req     domain.Request
		sameAs  int // index of an earlier step whose task this one must answer; -1 = a new task
		wantDup bool
	}
	cases := map[string]struct {
		// race, when set, appends a competing submission with the same
		// message id just before the service's own append (the dedupe-ack
		// path: the fold has not seen the competitor).
		race      bool
		steps     []step
		wantTasks int
	}{
		"same key twice (fold)": {
			steps:     []step{{keyed("nlp", "ci-42"), -1, false}, {keyed("nlp", "ci-42"), 0, true}},
			wantTasks: 1,
		},
		"same key, other team": {
			steps:     []step{{keyed("nlp", "ci-42"), -1, false}, {keyed("vision", "ci-42"), -1, false}},
			wantTasks: 2,
		},
		"no key submits twice": {
			steps:     []step{{keyed("nlp", ""), -1, false}, {keyed("nlp", ""), -1, false}},
			wantTasks: 2,
		},
		"key with ':' inside": {
			steps: []step{
				{keyed("a", "b:c"), -1, false},
				{keyed("a", "b:c"), 0, true},
			},
			wantTasks: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			var got []api.SubmitReply
			for i, st := range tc.steps {
				rep := h.submit(st.req)
				got = append(got, rep)
				if rep.Duplicate != st.wantDup {
					t.Errorf("step %d: duplicate = %v, want %v", i, rep.Duplicate, st.wantDup)
				}
				for j := range i {
					same := got[j].TaskID == rep.TaskID
					if same != (st.sameAs == j) {
						t.Errorf("step %d: task %s, step %d: task %s; same = %v, want %v", i, rep.TaskID, j, got[j].TaskID, same, st.sameAs == j)
					}
				}
			}
			all, err := h.s.queue(h.ctx, true)
			if err != nil {
				t.Fatal(err)
			}
			if len(all) != tc.wantTasks {
				t.Errorf("%d tasks, want %d", len(all), tc.wantTasks)
			}
		})
	}
}

// TestIdempotencyDedupeAck: a concurrent retry appended first, after this
// request's fold check; the stream's de-duplication answers with the
// original's sequence and the service answers the original task.
func TestIdempotencyDedupeAck(t *testing.T) {
	il := &interceptLog{Log: memlog.New()}
	h := newHarness(t, il)
	req := validReq()
	req.IdempotencyKey = "ci-7"
	if err := req.Validate(testLimits); err != nil {
		t.Fatal(err)
	}
	winner := uuid.Must(uuid.NewV7()).String()
	il.set(func(m events.Msg) bool { return m.MsgID != "" }, func(ctx context.Context, inner events.Log, m events.Msg) {
		e := submittedOf(req, winner, t0) // the same request, retried
		if _, err := events.Append(ctx, inner, e, events.Meta{Time: t0}, m.MsgID, nil); err != nil {
			t.Errorf("competitor: %v", err)
		}
	})
	rep := h.submit(req)
	if diff := cmp.Diff(api.SubmitReply{TaskID: winner, Duplicate: true, Seq: 1}, rep); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	if n := h.lastSeq(); n != 1 {
		t.Errorf("log has %d events, want 1", n)
	}
	if v := h.show(winner); v.State != "queued" {
		t.Errorf("winner state %q", v.State)
	}
}

func TestIdempotencyConcurrent(t *testing.T) {
	h := newHarness(t, nil)
	req := validReq()
	req.IdempotencyKey = "ci-retry"
	const n = 16
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := h.s.submit(h.ctx, req)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = rep.TaskID
		}()
	}
	wg.Wait()
	for i := range ids {
		if ids[i] != ids[0] {
			t.Errorf("submission %d got task %s, submission 0 got %s", i, ids[i], ids[0])
		}
	}
	if got := h.lastSeq(); got != 1 {
		t.Errorf("log has %d events, want 1", got)
	}
}

func TestReadYourWrites(t *testing.T) {
	h := newHarness(t, nil)
	// Another writer (another submitter replica) appends; a show right
	// after must see it.
	id := uuid.Must(uuid.NewV7()).String()
	for range 50 {
		h.appendEvent(events.ChecklistUpdated{TaskID: "other", Item: domain.ItemCodeReview})
	}
	h.appendEvent(events.Submitted{TaskID: id, Name: "x", Team: "t", Priority: "low", GPUs: 1, Hours: 1,
		Hypothesis: "h", Command: "c", SubmittedAt: t0})
	if v := h.show(id); v.State != "queued" {
		t.Errorf("state %q", v.State)
	}
}

func TestReadModelBehind(t *testing.T) {
	// A server that folded once and does not follow: queries time out
	// with 503 instead of answering stale state.
	l := memlog.New()
	s := newServer(Config{Log: l, Limits: testLimits, Logger: testLogger(t)})
	s.syncTimeout = 20 * time.Millisecond
	ctx := context.Background()
	if err := s.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := events.Append(ctx, l, events.Cancelled{TaskID: unknownID}, events.Meta{}, "", nil); err != nil {
		t.Fatal(err)
	}
	_, err := s.show(ctx, unknownID)
	if oe := asOpError(err); oe.Status != http.StatusServiceUnavailable || !strings.Contains(oe.Msg, "behind") {
		t.Errorf("err = %v (status %d), want 503 behind", err, oe.Status)
	}
}

func TestCancel(t *testing.T) {
	type setup func(h *harness, il *interceptLog, id string)
	cases := map[string]struct {
		setup     setup
		id        string // default: the submitted task
		by        string
		want      func(id string) api.TaskView // nil: an error is expected
		wantField string
		wantMsg   string
		wantNF    bool
	}{
		"queued": {
			by: "alice",
			want: func(id string) api.TaskView {
				end := t0.Add(2 * time.Second)
				return api.TaskView{TaskID: id, Name: "bert-base", Team: "nlp", Priority: "high", GPUs: 2, Hours: 3,
					Hypothesis: "warmup 10k beats 2k", Command: "python train.py", Preemptible: true,
					State: "cancelled", SubmittedAt: t0.Add(time.Second), EndedAt: &end,
					Reason: "cancelled by alice", Seq: 2}
			},
		},
		"twice": {
			setup: func(h *harness, _ *interceptLog, id string) {
				if _, err := h.s.cancel(h.ctx, api.IDRequest{TaskID: id}); err != nil {
					t.Fatal(err)
				}
			},
			wantField: "task_id", wantMsg: "task is already cancelled",
		},
		"unknown":           {id: unknownID, wantMsg: "task " + unknownID + " not found", wantNF: true},
		"id with wildcards": {id: "a.>", wantField: "task_id", wantMsg: api.TaskIDRule + ` (got "a.>")`},
		"id with a path":    {id: "x/y/z", wantField: "task_id", wantMsg: api.TaskIDRule + ` (got "x/y/z")`},
		"id in upper case":  {id: strings.ToUpper(earlyID), wantField: "task_id", wantMsg: api.TaskIDRule + ` (got "` + strings.ToUpper(earlyID) + `")`},
		"empty id":          {id: "-", wantField: "task_id", wantMsg: "is required"},
		"dispatched": {
			setup: func(h *harness, _ *interceptLog, id string) { h.dispatch(id) },
			want: func(id string) api.TaskView {
				return api.TaskView{TaskID: id, State: "cancelled", Reason: "cancelled"}
			},
		},
		"conflict, then retry": {
			setup: func(h *harness, il *interceptLog, id string) {
				il.set(func(m events.Msg) bool { return m.Expect != nil }, func(ctx context.Context, inner events.Log, _ events.Msg) {
					if _, err := events.Append(ctx, inner, events.ChecklistUpdated{TaskID: id, Item: domain.ItemDocumentation, Done: true}, events.Meta{Time: t0}, "", nil); err != nil {
						t.Error(err)
					}
				})
			},
			want: func(id string) api.TaskView {
				return api.TaskView{TaskID: id, State: "cancelled", Reason: "cancelled", Checklist: map[string]bool{"documentation": true}}
			},
		},
		"conflict with another cancel": {
			setup: func(h *harness, il *interceptLog, id string) {
				il.set(func(m events.Msg) bool { return m.Expect != nil }, func(ctx context.Context, inner events.Log, _ events.Msg) {
					if _, err := events.Append(ctx, inner, events.Cancelled{TaskID: id, By: "bob"}, events.Meta{Time: t0}, "", nil); err != nil {
						t.Error(err)
					}
				})
			},
			wantField: "task_id", wantMsg: "task is already cancelled",
		},
	}
	// Only the fields a case names are compared, except in "queued".
	pick := func(v api.TaskView, full bool) api.TaskView {
		if full {
			return v
		}
		return api.TaskView{TaskID: v.TaskID, State: v.State, Reason: v.Reason, Checklist: v.Checklist}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			il := &interceptLog{Log: memlog.New()}
			h := newHarness(t, il)
			id := h.submit(validReq()).TaskID
			if tc.setup != nil {
				tc.setup(h, il, id)
			}
			target := id
			switch tc.id {
			case "":
			case "-":
				target = ""
			default:
				target = tc.id
			}
			got, err := h.s.cancel(h.ctx, api.IDRequest{TaskID: target, By: tc.by})
			if tc.want != nil {
				if err != nil {
					t.Fatalf("cancel: %v", err)
				}
				if diff := cmp.Diff(tc.want(id), pick(got, name == "queued")); diff != "" {
					t.Errorf("view (-want +got):\n%s", diff)
				}
				return
			}
			oe := asOpError(err)
			if err == nil || oe.Field != tc.wantField || oe.Msg != tc.wantMsg || oe.NotFound != tc.wantNF {
				t.Errorf("err = %#v, want field %q msg %q notfound %v", oe, tc.wantField, tc.wantMsg, tc.wantNF)
			}
		})
	}
}

func TestCancelKeepsConflicting(t *testing.T) {
	// A writer that changes the task on every attempt exhausts the retries:
	// 409, and nothing of ours was appended.
	il := &interceptLog{Log: memlog.New()}
	h := newHarness(t, il)
	id := h.submit(validReq()).TaskID
	il.repeat = true
	il.set(func(m events.Msg) bool { return m.Expect != nil }, func(ctx context.Context, inner events.Log, _ events.Msg) {
		if _, err := events.Append(ctx, inner, events.ChecklistUpdated{TaskID: id, Item: domain.ItemCodeReview}, events.Meta{Time: t0}, "", nil); err != nil {
			t.Error(err)
		}
	})
	_, err := h.s.cancel(h.ctx, api.IDRequest{TaskID: id})
	if oe := asOpError(err); oe.Status != http.StatusConflict {
		t.Fatalf("err = %v, want 409", err)
	}
	if v := h.show(id); v.State != "queued" {
		t.Errorf("state %q, want queued", v.State)
	}
}

func TestAmend(t *testing.T) {
	cases := map[string]struct {
		dispatch  bool
		req       api.AmendRequest // TaskID filled with the task's unless set
		want      func(base api.TaskView) api.TaskView
		wantField string
		wantNF    bool
	}{
		"gpus and priority keep the place": {
			req: api.AmendRequest{GPUs: 4, Priority: "CRITICAL"},
			want: func(b api.TaskView) api.TaskView {
				b.GPUs, b.Priority, b.Seq = 4, "critical", 2
				return b
			},
		},
		"hours and hypothesis": {
			req: api.AmendRequest{Hours: 12.5, Hypothesis: "longer warmup"},
			want: func(b api.TaskView) api.TaskView {
				b.Hours, b.Hypothesis, b.Seq = 12.5, "longer warmup", 2
				return b
			},
		},
		"gpus above max":    {req: api.AmendRequest{GPUs: 9}, wantField: "gpus"},
		"negative gpus":     {req: api.AmendRequest{GPUs: -1}, wantField: "gpus"},
		"hours above max":   {req: api.AmendRequest{Hours: 100}, wantField: "hours"},
		"priority urgent":   {req: api.AmendRequest{Priority: "urgent"}, wantField: "priority"},
		"blank hypothesis":  {req: api.AmendRequest{Hypothesis: "  "}, wantField: "hypothesis"},
		"nothing to change": {req: api.AmendRequest{}, wantField: "body"},
		"not queued":        {dispatch: true, req: api.AmendRequest{GPUs: 1}, wantField: "task_id"},
		"unknown task":      {req: api.AmendRequest{TaskID: unknownID, GPUs: 1}, wantNF: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			id := h.submit(validReq()).TaskID
			if tc.dispatch {
				h.dispatch(id)
			}
			base := h.show(id)
			req := tc.req
			if req.TaskID == "" {
				req.TaskID = id
			}
			got, err := h.s.amend(h.ctx, req)
			if tc.want != nil {
				if err != nil {
					t.Fatalf("amend: %v", err)
				}
				if diff := cmp.Diff(tc.want(base), got); diff != "" {
					t.Errorf("view (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(got, h.show(id)); diff != "" {
					t.Errorf("show after amend (-amend +show):\n%s", diff)
				}
				return
			}
			oe := asOpError(err)
			if err == nil || oe.Field != tc.wantField || oe.NotFound != tc.wantNF {
				t.Errorf("err = %#v, want field %q notfound %v", oe, tc.wantField, tc.wantNF)
			}
			if n := h.lastSeq(); n != base.Seq && !tc.dispatch {
				t.Errorf("log at %d after a refused amend, want %d", n, base.Seq)
			}
		})
	}
}

func TestChecklist(t *testing.T) {
	cases := map[string]struct {
		reqs      []api.ChecklistRequest // the last one is checked
		want      map[string]bool
		wantField string
		wantNF    bool
	}{
		"mark done": {
			reqs: []api.ChecklistRequest{{Item: "code_review", Done: true}},
			want: map[string]bool{"code_review": true},
		},
		"mark and undo": {
			reqs: []api.ChecklistRequest{{Item: "code_review", Done: true}, {Item: "experiment_plan", Done: true}, {Item: "code_review"}},
			want: map[string]bool{"code_review": false, "experiment_plan": true},
		},
		"bad item":     {reqs: []api.ChecklistRequest{{Item: "coffee", Done: true}}, wantField: "item"},
		"empty item":   {reqs: []api.ChecklistRequest{{Done: true}}, wantField: "item"},
		"unknown task": {reqs: []api.ChecklistRequest{{TaskID: unknownID, Item: "documentation"}}, wantNF: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			id := h.submit(validReq()).TaskID
			var (
				got api.TaskView
				err error
			)
			for _, r := range tc.reqs {
				if r.TaskID == "" {
					r.TaskID = id
				}
				got, err = h.s.checklist(h.ctx, r)
			}
			if tc.want != nil {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, got.Checklist); diff != "" {
					t.Errorf("checklist (-want +got):\n%s", diff)
				}
				return
			}
			oe := asOpError(err)
			if err == nil || oe.Field != tc.wantField || oe.NotFound != tc.wantNF {
				t.Errorf("err = %#v, want field %q notfound %v", oe, tc.wantField, tc.wantNF)
			}
		})
	}
}

func TestQueue(t *testing.T) {
	h := newHarness(t, nil)
	sub := func(name, prio string) string {
		r := validReq()
		r.Name, r.Priority = name, prio
		return h.submit(r).TaskID
	}
	sub("low", "low")
	done := sub("done", "critical")
	sub("crit", "critical")
	sub("med", "medium")
	run := sub("run", "low")
	gone := sub("gone", "high")
	h.dispatch(run)
	h.dispatch(done)
	h.appendEvent(events.Started{TaskID: done, Node: "node-" + done[len(done)-6:], PID: 1})
	h.appendEvent(events.Completed{TaskID: done, Node: "node-" + done[len(done)-6:]})
	if _, err := h.s.cancel(h.ctx, api.IDRequest{TaskID: gone}); err != nil {
		t.Fatal(err)
	}
	names := func(vs []api.TaskView) []string {
		out := []string{}
		for _, v := range vs {
			out = append(out, v.Name)
		}
		return out
	}
	cases := map[string]struct {
		all  bool
		want []string
	}{
		"active only": {false, []string{"run", "crit", "med", "low"}},
		"all":         {true, []string{"run", "crit", "med", "low", "done", "gone"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := h.s.queue(h.ctx, tc.all)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, names(got)); diff != "" {
				t.Errorf("internal (-want +got):\n%s", diff)
			}
			r := h.natsCall(api.OpQueue, api.QueueRequest{All: tc.all})
			var nv []api.TaskView
			if err := json.Unmarshal(r.Result, &nv); err != nil {
				t.Fatalf("nats reply %+v: %v", r, err)
			}
			if diff := cmp.Diff(tc.want, names(nv)); diff != "" {
				t.Errorf("nats (-want +got):\n%s", diff)
			}
			path := "/v1/tasks"
			if tc.all {
				path += "?all=true"
			}
			w := h.httpCall("GET", path, "")
			var hv []api.TaskView
			if err := json.Unmarshal(w.Body.Bytes(), &hv); err != nil || w.Code != 200 {
				t.Fatalf("http %d %s: %v", w.Code, w.Body, err)
			}
			if diff := cmp.Diff(tc.want, names(hv)); diff != "" {
				t.Errorf("http (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQueueEmpty(t *testing.T) {
	h := newHarness(t, nil)
	w := h.httpCall("GET", "/v1/tasks", "")
	if w.Code != 200 || strings.TrimSpace(w.Body.String()) != "[]" {
		t.Errorf("empty queue: %d %s, want 200 []", w.Code, w.Body)
	}
}

// TestUndecodableRecord: a record that does not decode is skipped by the
// fold and by history; nothing waits behind it, and guarded appends on its
// task still succeed.
func TestUndecodableRecord(t *testing.T) {
	h := newHarness(t, nil)
	id := h.submit(validReq()).TaskID
	if _, err := h.log.Append(h.ctx, events.Msg{Subject: events.TaskPrefix + id + ".checklist_updated", Data: []byte("{not json")}); err != nil {
		t.Fatal(err)
	}
	v, err := h.s.checklist(h.ctx, api.ChecklistRequest{TaskID: id, Item: domain.ItemCodeReview, Done: true})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]bool{"code_review": true}, v.Checklist); diff != "" {
		t.Errorf("checklist (-want +got):\n%s", diff)
	}
	hist, err := h.s.history(h.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, e := range hist {
		seqs = append(seqs, e.Seq)
	}
	if diff := cmp.Diff([]uint64{1, 3}, seqs); diff != "" {
		t.Errorf("history seqs (-want +got):\n%s", diff)
	}
	// The guard of a cancel counts the skipped records too.
	if _, err := h.log.Append(h.ctx, events.Msg{Subject: events.TaskPrefix + id + ".renamed", Data: []byte(`{"id":"x","type":"renamed","v":1,"data":{}}`)}); err != nil {
		t.Fatal(err)
	}
	if v, err := h.s.cancel(h.ctx, api.IDRequest{TaskID: id}); err != nil || v.State != "cancelled" {
		t.Errorf("cancel after skipped records: %v, state %q", err, v.State)
	}
	if bad := h.s.m.skipped(); bad != 2 {
		t.Errorf("skipped = %d, want 2 (the undecodable record and the unknown type)", bad)
	}
}

// Task states a checkpoint test can put the submitted task in, as the
// scheduler and an agent would.
func toRunning(h *harness, id string) {
	h.dispatch(id)
	h.appendEvent(events.Started{TaskID: id, Node: "node-" + id[len(id)-6:], PID: 1})
}

func toPreempting(h *harness, id string) {
	toRunning(h, id)
	h.appendEvent(events.PreemptRequested{TaskID: id, For: "other", Policy: "critical-only", Reason: "r"})
}

func toCompleted(h *harness, id string) {
	toRunning(h, id)
	h.appendEvent(events.Completed{TaskID: id, Node: "node-" + id[len(id)-6:]})
}

func TestCheckpoint(t *testing.T) {
	const ref = "/ckpt/step-42.pt"
	type setup func(h *harness, il *interceptLog, id string)
	cases := map[string]struct {
		setup      setup
		req        api.CheckpointRequest // TaskID filled with the task's unless set; "-" means empty
		want       func(id string, seq uint64) api.CheckpointReply
		wantStatus int
		wantField  string
		wantMsg    string // for errors; %s is the task id
		wantNF     bool
		wantEvents int // checkpointed events in the log afterwards
	}{
		"running ok": {
			setup: func(h *harness, _ *interceptLog, id string) { toRunning(h, id) },
			req:   api.CheckpointRequest{Ref: ref},
			want: func(id string, seq uint64) api.CheckpointReply {
				return api.CheckpointReply{TaskID: id, Ref: ref, Seq: seq, State: "running"}
			},
			wantEvents: 1,
		},
		"preempting ok": {
			setup: func(h *harness, _ *interceptLog, id string) { toPreempting(h, id) },
			req:   api.CheckpointRequest{Ref: ref},
			want: func(id string, seq uint64) api.CheckpointReply {
				return api.CheckpointReply{TaskID: id, Ref: ref, Seq: seq, State: "preempting"}
			},
			wantEvents: 1,
		},
		"ref kept as given": {
			setup: func(h *harness, _ *interceptLog, id string) { toRunning(h, id) },
			req:   api.CheckpointRequest{Ref: " s3://bucket/run 1/ckpt ✓ "},
			want: func(id string, seq uint64) api.CheckpointReply {
				return api.CheckpointReply{TaskID: id, Ref: " s3://bucket/run 1/ckpt ✓ ", Seq: seq, State: "running"}
			},
			wantEvents: 1,
		},
		"duplicate retry": {
			// The job retried after losing the first answer: both are
			// accepted and appended; the latest (the same ref) wins.
			setup: func(h *harness, _ *interceptLog, id string) {
				toRunning(h, id)
				if _, err := h.s.checkpoint(h.ctx, api.CheckpointRequest{TaskID: id, Ref: ref}); err != nil {
					t.Fatal(err)
				}
			},
			req: api.CheckpointRequest{Ref: ref},
			want: func(id string, seq uint64) api.CheckpointReply {
				return api.CheckpointReply{TaskID: id, Ref: ref, Seq: seq, State: "running"}
			},
			wantEvents: 2,
		},
		"conflict, then retry": {
			setup: func(h *harness, il *interceptLog, id string) {
				toRunning(h, id)
				il.set(func(m events.Msg) bool { return m.Expect != nil }, func(ctx context.Context, inner events.Log, _ events.Msg) {
					if _, err := events.Append(ctx, inner, events.ChecklistUpdated{TaskID: id, Item: domain.ItemDocumentation, Done: true}, events.Meta{Time: t0}, "", nil); err != nil {
						t.Error(err)
					}
				})
			},
			req: api.CheckpointRequest{Ref: ref},
			want: func(id string, seq uint64) api.CheckpointReply {
				return api.CheckpointReply{TaskID: id, Ref: ref, Seq: seq, State: "running"}
			},
			wantEvents: 1,
		},
		"preempted meanwhile, then retry": {
			setup: func(h *harness, il *interceptLog, id string) {
				toRunning(h, id)
				il.set(func(m events.Msg) bool { return m.Expect != nil }, func(ctx context.Context, inner events.Log, _ events.Msg) {
					if _, err := events.Append(ctx, inner, events.PreemptRequested{TaskID: id, For: "x"}, events.Meta{Time: t0}, "", nil); err != nil {
						t.Error(err)
					}
				})
			},
			req: api.CheckpointRequest{Ref: ref},
			want: func(id string, seq uint64) api.CheckpointReply {
				return api.CheckpointReply{TaskID: id, Ref: ref, Seq: seq, State: "preempting"}
			},
			wantEvents: 1,
		},
		"completed meanwhile": {
			setup: func(h *harness, il *interceptLog, id string) {
				toRunning(h, id)
				il.set(func(m events.Msg) bool { return m.Expect != nil }, func(ctx context.Context, inner events.Log, _ events.Msg) {
					if _, err := events.Append(ctx, inner, events.Completed{TaskID: id, Node: "node-" + id[len(id)-6:]}, events.Meta{Time: t0}, "", nil); err != nil {
						t.Error(err)
					}
				})
			},
			req:        api.CheckpointRequest{Ref: ref},
			wantStatus: http.StatusConflict, wantField: "task_id",
			wantMsg: "task %s is completed: a checkpoint is accepted only while it runs or is being preempted",
		},
		"queued rejected": {
			req:        api.CheckpointRequest{Ref: ref},
			wantStatus: http.StatusConflict, wantField: "task_id",
			wantMsg: "task %s is queued: a checkpoint is accepted only while it runs or is being preempted",
		},
		"dispatched rejected": {
			setup:      func(h *harness, _ *interceptLog, id string) { h.dispatch(id) },
			req:        api.CheckpointRequest{Ref: ref},
			wantStatus: http.StatusConflict, wantField: "task_id",
			wantMsg: "task %s is dispatched: a checkpoint is accepted only while it runs or is being preempted",
		},
		"completed rejected": {
			setup:      func(h *harness, _ *interceptLog, id string) { toCompleted(h, id) },
			req:        api.CheckpointRequest{Ref: ref},
			wantStatus: http.StatusConflict, wantField: "task_id",
			wantMsg: "task %s is completed: a checkpoint is accepted only while it runs or is being preempted",
		},
		"cancelled while running rejected": {
			setup: func(h *harness, _ *interceptLog, id string) {
				toRunning(h, id)
				h.appendEvent(events.Cancelled{TaskID: id})
			},
			req:        api.CheckpointRequest{Ref: ref},
			wantStatus: http.StatusConflict, wantField: "task_id",
			wantMsg: "task %s is cancelled: a checkpoint is accepted only while it runs or is being preempted",
		},
		"requeued rejected": {
			setup: func(h *harness, _ *interceptLog, id string) {
				toPreempting(h, id)
				h.appendEvent(events.Preempted{TaskID: id, Node: "n"})
				h.appendEvent(events.Requeued{TaskID: id})
			},
			req:        api.CheckpointRequest{Ref: ref},
			wantStatus: http.StatusConflict, wantField: "task_id",
			wantMsg: "task %s is queued: a checkpoint is accepted only while it runs or is being preempted",
		},
		"unknown task": {
			req:        api.CheckpointRequest{TaskID: unknownID, Ref: ref},
			wantStatus: http.StatusNotFound, wantMsg: "task " + unknownID + " not found", wantNF: true,
		},
		"id with wildcards": {
			req:        api.CheckpointRequest{TaskID: "a.>", Ref: ref},
			wantStatus: http.StatusBadRequest, wantField: "task_id", wantMsg: api.TaskIDRule + ` (got "a.>")`,
		},
		"empty id": {
			req:        api.CheckpointRequest{TaskID: "-", Ref: ref},
			wantStatus: http.StatusBadRequest, wantField: "task_id", wantMsg: "is required",
		},
		"empty ref": {
			setup:      func(h *harness, _ *interceptLog, id string) { toRunning(h, id) },
			wantStatus: http.StatusBadRequest, wantField: "ref", wantMsg: "must not be empty: say where the checkpoint was saved",
		},
		"blank ref": {
			setup:      func(h *harness, _ *interceptLog, id string) { toRunning(h, id) },
			req:        api.CheckpointRequest{Ref: " \t "},
			wantStatus: http.StatusBadRequest, wantField: "ref", wantMsg: "must not be empty: say where the checkpoint was saved",
		},
		"ref with a newline": {
			setup:      func(h *harness, _ *interceptLog, id string) { toRunning(h, id) },
			req:        api.CheckpointRequest{Ref: "/ckpt/a\nb"},
			wantStatus: http.StatusBadRequest, wantField: "ref", wantMsg: "must not contain control characters (got '\\n' at byte 7)",
		},
		"ref with a NUL": {
			setup:      func(h *harness, _ *interceptLog, id string) { toRunning(h, id) },
			req:        api.CheckpointRequest{Ref: "/ckpt/a\x00b"},
			wantStatus: http.StatusBadRequest, wantField: "ref", wantMsg: "must not contain control characters (got '\\x00' at byte 7)",
		},
		"ref too long": {
			setup:      func(h *harness, _ *interceptLog, id string) { toRunning(h, id) },
			req:        api.CheckpointRequest{Ref: "/" + strings.Repeat("x", api.MaxCheckpointRef)},
			wantStatus: http.StatusBadRequest, wantField: "ref", wantMsg: "must be at most 4096 bytes (got 4097)",
		},
		"empty ref on an unknown task": {
			req:        api.CheckpointRequest{TaskID: unknownID},
			wantStatus: http.StatusBadRequest, wantField: "ref", wantMsg: "must not be empty: say where the checkpoint was saved",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			il := &interceptLog{Log: memlog.New()}
			h := newHarness(t, il)
			id := h.submit(validReq()).TaskID
			if tc.setup != nil {
				tc.setup(h, il, id)
			}
			req := tc.req
			switch req.TaskID {
			case "":
				req.TaskID = id
			case "-":
				req.TaskID = ""
			}
			got, err := h.s.checkpoint(h.ctx, req)
			il.mu.Lock()
			if il.match != nil && !il.fired {
				t.Error("the competing writer never ran")
			}
			il.mu.Unlock()
			var refs []string
			var lastSeq uint64
			if _, rerr := events.ReadAll(h.ctx, h.log, 1, events.TaskSubjects(id), func(r events.Record) error {
				if c, ok := r.Event.(events.Checkpointed); ok {
					refs, lastSeq = append(refs, c.Ref), r.Seq
				}
				return nil
			}); rerr != nil {
				t.Fatal(rerr)
			}
			if len(refs) != tc.wantEvents {
				t.Errorf("%d checkpointed events in the log (%q), want %d", len(refs), refs, tc.wantEvents)
			}
			if tc.want != nil {
				if err != nil {
					t.Fatalf("checkpoint: %v", err)
				}
				if diff := cmp.Diff(tc.want(id, lastSeq), got); diff != "" {
					t.Errorf("reply (-want +got):\n%s", diff)
				}
				if v := h.show(id); v.Checkpoint != req.Ref {
					t.Errorf("show: checkpoint %q, want %q", v.Checkpoint, req.Ref)
				}
				return
			}
			oe := asOpError(err)
			wantMsg := tc.wantMsg
			if strings.Contains(wantMsg, "%s") {
				wantMsg = strings.ReplaceAll(wantMsg, "%s", id)
			}
			if err == nil || oe.Status != tc.wantStatus || oe.Field != tc.wantField || oe.Msg != wantMsg || oe.NotFound != tc.wantNF {
				t.Errorf("err = %#v, want status %d field %q msg %q notfound %v", oe, tc.wantStatus, tc.wantField, wantMsg, tc.wantNF)
			}
			if v := h.show(id); v.Checkpoint != "" {
				t.Errorf("show: checkpoint %q after a refused checkpoint, want none", v.Checkpoint)
			}
		})
	}
}

func TestCheckpointKeepsConflicting(t *testing.T) {
	// A running task that changes on every attempt: 409 without a field
	// (the caller did nothing wrong), and nothing of ours was appended.
	il := &interceptLog{Log: memlog.New()}
	h := newHarness(t, il)
	id := h.submit(validReq()).TaskID
	toRunning(h, id)
	il.repeat = true
	il.set(func(m events.Msg) bool { return m.Expect != nil }, func(ctx context.Context, inner events.Log, _ events.Msg) {
		if _, err := events.Append(ctx, inner, events.ChecklistUpdated{TaskID: id, Item: domain.ItemCodeReview}, events.Meta{Time: t0}, "", nil); err != nil {
			t.Error(err)
		}
	})
	_, err := h.s.checkpoint(h.ctx, api.CheckpointRequest{TaskID: id, Ref: "/c"})
	if oe := asOpError(err); oe.Status != http.StatusConflict || oe.Field != "" {
		t.Fatalf("err = %#v, want 409 without a field", oe)
	}
	if v := h.show(id); v.Checkpoint != "" {
		t.Errorf("checkpoint %q, want none", v.Checkpoint)
	}
}
