package submitter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/audit"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// The dashboard's reads (web.go serves the page). Each answers from what
// the submitter already has — its fold, the advice it passes on, the
// advisor's statistics — and decides nothing itself: the plan is one pass
// of the one policy (pkg/policy) on the fold's state, with the run times
// the scheduler predicts (estimate.Predictor.ForPolicy), and the wait's
// breakdown is audit.Explain, as `gpuq explain` computes it.
//
//	GET /v1/plan                 the cluster's next hours, per node and GPU
//	GET /v1/teams                guarantee, used, borrowed, waiting GPU-hours
//	GET /v1/tasks/{id}/explain   the task's wait broken down (gpuq explain)
//	GET /v1/tasks/{id}/estimates the task's start estimates as they changed
//	GET /v1/stats                the estimates' calibration (the advisor's), over time

// Bounds of the dashboard's reads.
const (
	// planHours bounds the plan's horizon (?hours=, default defaultPlanHours).
	planHours        = 48
	defaultPlanHours = 6
	// planNodes bounds the nodes of one plan answer (?limit=); ?offset=
	// pages on.
	planNodes        = 500
	defaultPlanNodes = 100
	// planEvery: one policy pass per fold sequence, reused for this long
	// while nothing is folded (the clock moves the predicted ends);
	// planMin: after records, a pass is reused this long still, so that
	// a busy log costs at most one pass per planMin (a pass with 10,000
	// tasks queued on 400 GPUs took 94 ms, BenchmarkPlan, loaded machine).
	planEvery = 5 * time.Second
	planMin   = 2 * time.Second
	// explainRecords bounds the log a task page's explanation reads (in
	// memory); a longer log is `gpuq explain`'s (422 says so).
	// explainWait bounds how long a request waits for one.
	explainRecords = 100_000
	explainWait    = 15 * time.Second
	// explainCache: explanations kept, each for the log sequence it was
	// computed at.
	explainCache = 64
	// estimatePoints: start estimates kept per task (the oldest dropped);
	// estimateTasks: tasks kept (an ended one dropped first).
	estimatePoints = 64
	estimateTasks  = 20_000
	// statsEvery, statsSamples: the advisor's statistics are sampled this
	// often, the last statsSamples kept (24 h).
	statsEvery   = time.Minute
	statsRetry   = 5 * time.Second
	statsSamples = 1440
)

// ---- the plan ---------------------------------------------------------------

// PlanView is GET /v1/plan: what the policy holds for the next hours.
type PlanView struct {
	Seq        uint64     `json:"seq"`   // the fold's sequence the pass ran on
	Now        time.Time  `json:"now"`   // the pass's time
	Until      time.Time  `json:"until"` // the horizon: bars end here at the latest
	Policy     string     `json:"policy"`
	NodesTotal int        `json:"nodes_total"` // nodes in the cluster; Nodes is [offset, offset+limit)
	Offset     int        `json:"offset"`
	Nodes      []PlanNode `json:"nodes"`
	// Reservation is the EASY reservation the pass holds for the first
	// blocked task (none: nothing is blocked, or it never fits).
	Reservation *PlanReservation `json:"reservation,omitempty"`
}

// PlanReservation is the head of the queue's reservation.
type PlanReservation struct {
	TaskID string    `json:"task_id"`
	Name   string    `json:"name,omitempty"`
	Team   string    `json:"team"`
	At     time.Time `json:"at"`
	GPUs   int       `json:"gpus"`
}

// PlanNode is one node's GPUs and their bars.
type PlanNode struct {
	Node  string    `json:"node"`
	State string    `json:"state"`
	GPUs  []PlanGPU `json:"gpus"`
}

// PlanGPU is one GPU's next hours: bars in time order, not overlapping.
type PlanGPU struct {
	UUID    string    `json:"uuid"`
	Index   int       `json:"index"`
	Model   string    `json:"model"`
	Healthy bool      `json:"healthy"`
	Bars    []PlanBar `json:"bars"`
}

// Kinds of bars.
const (
	BarRunning  = "running"  // holds the GPU, to its predicted end
	BarStarting = "starting" // dispatched, its agent starting it
	BarYielding = "yielding" // preempted, checkpointing within its grace
	BarDispatch = "dispatch" // the pass starts it now (Backfill: ahead of the reservation)
	BarReserved = "reserved" // held for the head of the queue, from the reservation on
	BarGap      = "backfill" // free until the reservation: a task predicted to end by then may use it
)

// PlanBar is a stretch of one GPU's time.
type PlanBar struct {
	Kind     string    `json:"kind"`
	TaskID   string    `json:"task_id,omitempty"`
	Name     string    `json:"name,omitempty"` // only for the caller's team's tasks (all with admin or no tokens)
	Team     string    `json:"team,omitempty"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Clipped  bool      `json:"clipped,omitempty"` // predicted to go on past Until
	Backfill bool      `json:"backfill,omitempty"`
}

// planPass is one pass of the policy, kept for its sequence.
type planPass struct {
	seq uint64
	at  time.Time
	res policy.Result
}

type planCache struct {
	mu   sync.Mutex
	last *planPass
}

// pass is the policy's pass at the state's sequence (called with the
// state locked): the one kept when it is as recent, else a new one.
func (s *server) planPass(st *domain.State, now time.Time) *planPass {
	s.plans.mu.Lock()
	defer s.plans.mu.Unlock()
	if p := s.plans.last; p != nil && !now.Before(p.at) &&
		(now.Sub(p.at) < planMin || (p.seq == st.Seq && now.Sub(p.at) < planEvery)) {
		return p
	}
	p := &planPass{seq: st.Seq, at: now}
	p.res = s.pol.With(true).Plan(policy.Input{State: st, Now: now, Predict: s.m.predictor().ForPolicy(now)})
	s.plans.last = p
	return p
}

// plan answers GET /v1/plan.
func (s *server) plan(ctx context.Context, hours float64, offset, limit int) (PlanView, error) {
	if err := s.sync(ctx); err != nil {
		return PlanView{}, err
	}
	var v PlanView
	s.m.read(func(st *domain.State) {
		p := s.planPass(st, s.now())
		now := p.at
		until := now.Add(time.Duration(hours * float64(time.Hour)))
		pred := s.m.predictor().ForPolicy(now)
		v = PlanView{Seq: p.seq, Now: now, Until: until, Policy: s.pol.Name(), Offset: offset, Nodes: []PlanNode{}}
		names := st.SortedNodes()
		v.NodesTotal = len(names)
		if offset > len(names) {
			offset = len(names)
		}
		names = names[offset:min(len(names), offset+limit)]
		name := func(t *domain.Task) string {
			if c, ok := callerOf(ctx); ok && !c.May(t.Team) {
				return ""
			}
			return t.Name
		}
		// What the pass starts now, and the reservation, by GPU.
		starts := map[string]policy.Decision{}
		// (A pass reused after records may name tasks that moved on
		// since: only what is still queued is drawn as starting or
		// reserved.)
		queued := func(id string) bool { t := st.Tasks[id]; return t != nil && t.State == domain.Queued }
		for _, d := range p.res.Decisions {
			if d.Kind == policy.Dispatch && queued(d.TaskID) {
				for _, pl := range d.Placements {
					for _, g := range pl.GPUs {
						starts[g] = d
					}
				}
			}
		}
		var head *domain.Task
		reserved := map[string]bool{}
		if r := p.res.Reservation; r != nil && queued(r.TaskID) {
			if head = st.Tasks[r.TaskID]; head != nil {
				v.Reservation = &PlanReservation{TaskID: head.ID, Name: name(head), Team: head.Team, At: r.At.UTC(), GPUs: head.GPUs}
				for _, pl := range r.Placements {
					for _, g := range pl.GPUs {
						reserved[g] = true
					}
				}
			}
		}
		bar := func(kind string, t *domain.Task, from, to time.Time) (PlanBar, bool) {
			if from.Before(now) {
				from = now
			}
			b := PlanBar{Kind: kind, From: from.UTC(), To: to.UTC()}
			if t != nil {
				b.TaskID, b.Name, b.Team = t.ID, name(t), t.Team
			}
			if to.After(until) {
				b.To, b.Clipped = until.UTC(), true
			}
			return b, b.To.After(b.From)
		}
		for _, nn := range names {
			n := st.Nodes[nn]
			pn := PlanNode{Node: nn, State: nodeState(n), GPUs: make([]PlanGPU, 0, len(n.GPUs))}
			for _, g := range n.GPUs {
				pg := PlanGPU{UUID: g.UUID, Index: g.Index, Model: g.Model, Healthy: g.Healthy, Bars: []PlanBar{}}
				free := now // when the GPU is free, as predicted
				add := func(b PlanBar, ok bool) {
					if ok {
						pg.Bars = append(pg.Bars, b)
					}
				}
				if t := st.Tasks[st.Owner[g.UUID]]; t != nil {
					kind := BarRunning
					switch {
					case t.State == domain.Preempting:
						kind = BarYielding
					case t.State == domain.Dispatched || t.StartedAt.IsZero():
						kind = BarStarting
					}
					from := t.StartedAt
					if from.IsZero() || from.After(now) {
						from = now
					}
					end := from.Add(pred(t))
					if kind == BarYielding && t.GraceS > 0 && !t.PreemptAt.IsZero() {
						end = t.PreemptAt.Add(time.Duration(t.GraceS * float64(time.Second)))
					}
					if !end.After(now) {
						end = now.Add(time.Second) // past its prediction: expected to end soon
					}
					add(bar(kind, t, from, end))
					free = end
				} else if d, ok := starts[g.UUID]; ok {
					if t := st.Tasks[d.TaskID]; t != nil {
						end := now.Add(pred(t))
						b, ok := bar(BarDispatch, t, now, end)
						b.Backfill = d.Backfill
						add(b, ok)
						free = end
					}
				}
				if reserved[g.UUID] && head != nil {
					at := p.res.Reservation.At
					if free.Before(at) {
						add(bar(BarGap, nil, free, at))
					}
					add(bar(BarReserved, head, at, at.Add(pred(head))))
				}
				pn.GPUs = append(pn.GPUs, pg)
			}
			v.Nodes = append(v.Nodes, pn)
		}
	})
	return v, nil
}

// intParam reads an integer query parameter between lo and hi (def when
// absent).
func intParam(r *http.Request, name string, def, lo, hi int) (int, error) {
	q := r.URL.Query().Get(name)
	if q == "" {
		return def, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < lo || n > hi {
		return 0, invalid(name, fmt.Sprintf("must be an integer between %d and %d (got %q)", lo, hi, q))
	}
	return n, nil
}

func (s *server) httpPlan(w http.ResponseWriter, r *http.Request) {
	hours, err := intParam(r, "hours", defaultPlanHours, 1, planHours)
	var offset, limit int
	if err == nil {
		offset, err = intParam(r, "offset", 0, 0, 1<<30)
	}
	if err == nil {
		limit, err = intParam(r, "limit", defaultPlanNodes, 1, planNodes)
	}
	if err != nil {
		s.fail(w, "plan", err)
		return
	}
	v, err := s.plan(r.Context(), float64(hours), offset, limit)
	s.respond(w, "plan", v, err)
}

// ---- teams --------------------------------------------------------------------

// TeamView is one row of GET /v1/teams.
type TeamView struct {
	Team string `json:"team"`
	// Guarantee: GPUs guaranteed on the healthy GPUs now (the scheduler's
	// teams file, resolved as the policy resolves it); 0 without one.
	Guarantee int  `json:"guarantee"`
	HasGuar   bool `json:"has_guarantee"`
	Used      int  `json:"used"`     // GPUs its tasks hold
	Borrowed  int  `json:"borrowed"` // used beyond the guarantee, which a team under its own may reclaim (0 without a teams file)
	Running   int  `json:"running"`  // tasks holding GPUs
	Queued    int  `json:"queued"`
	// WaitingGPUHours: the queued tasks' GPUs × predicted run (P50, as
	// the policy predicts it).
	WaitingGPUHours float64 `json:"waiting_gpu_hours"`
}

// TeamsView is GET /v1/teams.
type TeamsView struct {
	Seq         uint64     `json:"seq"`
	HealthyGPUs int        `json:"healthy_gpus"`
	Teams       []TeamView `json:"teams"`
}

func (s *server) teams(ctx context.Context) (TeamsView, error) {
	if err := s.sync(ctx); err != nil {
		return TeamsView{}, err
	}
	caller, scoped := callerOf(ctx)
	guar := s.pol.Options().Teams
	var v TeamsView
	s.m.read(func(st *domain.State) {
		now := s.now()
		pred := s.m.predictor().ForPolicy(now)
		v.Seq, v.HealthyGPUs = st.Seq, st.Totals().Healthy
		by := map[string]*TeamView{}
		row := func(team string) *TeamView {
			tv := by[team]
			if tv == nil {
				tv = &TeamView{Team: team}
				if g, ok := guar[team]; ok {
					tv.Guarantee, tv.HasGuar = g.Of(v.HealthyGPUs), true
				}
				by[team] = tv
			}
			return tv
		}
		for team := range guar {
			row(team)
		}
		st.TeamGPUs(func(team string, n int) { row(team).Used = n })
		for _, t := range st.Active() {
			row(t.Team).Running++
		}
		for _, t := range st.Queued() {
			tv := row(t.Team)
			tv.Queued++
			tv.WaitingGPUHours += float64(t.GPUs) * pred(t).Hours()
		}
		for _, tv := range by {
			if scoped && !caller.May(tv.Team) {
				continue
			}
			if len(guar) > 0 { // without guarantees nothing is lent, nothing borrowed
				tv.Borrowed = max(0, tv.Used-tv.Guarantee)
			}
			v.Teams = append(v.Teams, *tv)
		}
	})
	sort.Slice(v.Teams, func(i, j int) bool { return v.Teams[i].Team < v.Teams[j].Team })
	if v.Teams == nil {
		v.Teams = []TeamView{}
	}
	return v, nil
}

func (s *server) httpTeams(w http.ResponseWriter, r *http.Request) {
	v, err := s.teams(r.Context())
	s.respond(w, "teams", v, err)
}

// ---- a task's wait, explained --------------------------------------------------------

type explained struct {
	seq  uint64
	done chan struct{}
	ex   audit.Explanation
	err  error
}

type explainer struct {
	sem chan struct{} // one explanation at a time: each reads the log and plans at every record
	mu  sync.Mutex
	m   map[string]*explained
}

// explain is audit.Explain — `gpuq explain` — on the log up to the fold's
// sequence, for a task the caller may read. Bounded: a log of at most
// explainRecords records; one explanation computed at a time, in the
// background (another asked meanwhile is 503, try again); a request
// waits for it at most explainWait (503 while it goes on: the next
// request finds it done); kept per task for the sequence it was computed
// at.
func (s *server) explain(ctx context.Context, id string) (audit.Explanation, error) {
	if _, err := s.show(ctx, id); err != nil {
		return audit.Explanation{}, err
	}
	var seq uint64
	s.m.read(func(st *domain.State) { seq = st.Seq })
	if seq > explainRecords {
		return audit.Explanation{}, &opError{Status: http.StatusUnprocessableEntity, Field: "task_id",
			Msg: fmt.Sprintf("the log has %d records; the dashboard explains a wait on a log of at most %d (run `gpuq explain %s`)", seq, explainRecords, id)}
	}
	busy := &opError{Status: http.StatusServiceUnavailable, Msg: "another wait is being explained; try again in a few seconds"}
	x := &s.explains
	x.mu.Lock()
	if x.m == nil {
		x.m = map[string]*explained{}
	}
	e := x.m[id]
	if e == nil || e.seq != seq {
		select {
		case x.sem <- struct{}{}:
		default:
			x.mu.Unlock()
			return audit.Explanation{}, busy
		}
		if e == nil && len(x.m) >= explainCache {
			for k, old := range x.m {
				select {
				case <-old.done: // a finished one
					delete(x.m, k)
				default:
					continue
				}
				break
			}
		}
		e = &explained{seq: seq, done: make(chan struct{})}
		x.m[id] = e
		go s.explainNow(id, e)
	}
	x.mu.Unlock()
	t := time.NewTimer(explainWait)
	defer t.Stop()
	select {
	case <-e.done:
		return e.ex, e.err
	case <-t.C:
		return audit.Explanation{}, &opError{Status: http.StatusServiceUnavailable, Msg: fmt.Sprintf("explaining the wait takes longer than %s; it goes on: try again in a few seconds", explainWait)}
	case <-ctx.Done():
		return audit.Explanation{}, ctx.Err()
	}
}

// explainNow computes e (holding the explainer's semaphore, which it
// releases).
func (s *server) explainNow(id string, e *explained) {
	x := &s.explains
	defer func() { <-x.sem }()
	defer close(e.done)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var recs []events.Record
	_, err := events.ReadAll(ctx, s.log, 1, "", func(r events.Record) error {
		if r.Seq > e.seq {
			return errStopRead
		}
		recs = append(recs, r)
		return nil
	})
	if err != nil && !errors.Is(err, errStopRead) {
		e.err = err
		x.forget(id, e)
		return
	}
	e.ex, e.err = audit.Explain(recs, s.pol, id)
	if errors.Is(e.err, audit.ErrNotFound) {
		e.err = &opError{Status: http.StatusNotFound, NotFound: true, Field: "task_id", Msg: "task " + id + " not found"}
	}
}

var errStopRead = errors.New("read far enough")

func (x *explainer) forget(id string, e *explained) {
	x.mu.Lock()
	if x.m[id] == e {
		delete(x.m, id)
	}
	x.mu.Unlock()
}

func (s *server) httpExplain(w http.ResponseWriter, r *http.Request) {
	ex, err := s.explain(r.Context(), r.PathValue("id"))
	s.respond(w, "explain", ex, err)
}

// ---- a task's estimates as they changed ----------------------------------------------

// EstimatePoint is one start estimate of a task, as an advice said it.
type EstimatePoint struct {
	At         time.Time `json:"at"`
	BasedOnSeq uint64    `json:"based_on_seq"`
	P50Start   time.Time `json:"p50_start"`
	P90Start   time.Time `json:"p90_start"`
	Method     string    `json:"method,omitempty"`
}

// EstimatesView is GET /v1/tasks/{id}/estimates: the estimates this
// submitter heard since it started (the advice stream keeps only the
// latest), and when the task started.
type EstimatesView struct {
	TaskID    string          `json:"task_id"`
	Submitted time.Time       `json:"submitted_at"`
	Started   *time.Time      `json:"started_at,omitempty"` // its first start
	Points    []EstimatePoint `json:"points"`
}

type estimateLog struct {
	mu sync.Mutex
	m  map[string][]EstimatePoint
}

// add keeps an advice's estimate when it differs from the last kept.
func (l *estimateLog) add(data []byte, ended func(id string) bool) {
	var a estimate.Advice
	if json.Unmarshal(data, &a) != nil || a.P50Start.IsZero() {
		return
	}
	p := EstimatePoint{At: a.At.UTC(), BasedOnSeq: a.BasedOnSeq, P50Start: a.P50Start.UTC(), P90Start: a.P90Start.UTC(), Method: a.Method}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string][]EstimatePoint{}
	}
	ps, ok := l.m[a.TaskID]
	if n := len(ps); n > 0 {
		last := ps[n-1]
		if last.BasedOnSeq > p.BasedOnSeq || (last.P50Start.Equal(p.P50Start) && last.P90Start.Equal(p.P90Start)) {
			return
		}
	}
	if !ok && len(l.m) >= estimateTasks {
		victim := ""
		for id := range l.m {
			victim = id
			if ended(id) {
				break
			}
		}
		delete(l.m, victim)
	}
	if len(ps) >= estimatePoints {
		ps = append(ps[:0], ps[1:]...)
	}
	l.m[a.TaskID] = append(ps, p)
}

func (l *estimateLog) get(id string) []EstimatePoint {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]EstimatePoint{}, l.m[id]...)
}

func (s *server) httpEstimates(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	t, err := s.show(r.Context(), id)
	if err != nil {
		s.fail(w, "estimates", err)
		return
	}
	v := EstimatesView{TaskID: t.TaskID, Submitted: t.SubmittedAt, Points: s.estimates.get(t.TaskID)}
	s.m.read(func(st *domain.State) {
		if dt := st.Tasks[t.TaskID]; dt != nil && !dt.FirstStarted.IsZero() {
			at := dt.FirstStarted.UTC()
			v.Started = &at
		}
	})
	writeJSON(w, http.StatusOK, v)
}

// ---- calibration ---------------------------------------------------------------------

// StatsSample is the advisor's calibration at one time: the figures
// /metrics exports (gpuq_estimate_p90_coverage_ratio,
// gpuq_estimate_p50_abs_error_seconds, gpuq_estimate_judged_tasks).
type StatsSample struct {
	At          time.Time `json:"at"`
	N           int       `json:"n"`
	P90Coverage float64   `json:"p90_coverage"`
	MedianAbsS  float64   `json:"p50_median_abs_err_s"`
	Alerts      int       `json:"alerts"`
}

// StatsView is GET /v1/stats.
type StatsView struct {
	Latest  *StatsSample  `json:"latest,omitempty"`
	Samples []StatsSample `json:"samples"`
	Error   string        `json:"error,omitempty"` // why there is no latest sample
}

type statsLog struct {
	mu      sync.Mutex
	samples []StatsSample
	err     string
	asked   time.Time
}

// sampleStats asks the advisor for its statistics (api.OpStats); false
// when none answered.
func (s *server) sampleStats(nc *nats.Conn) bool {
	s.stats.mu.Lock()
	s.stats.asked = s.now()
	s.stats.mu.Unlock()
	var smp StatsSample // the advisor's StatsReply: estimate.Stats and more
	var err error
	msg, rerr := nc.Request(api.SubjectPrefix+api.OpStats, []byte("{}"), 5*time.Second)
	if rerr != nil {
		err = fmt.Errorf("no advisor answered stats: %w", rerr)
	} else {
		var rep api.Reply
		if err = json.Unmarshal(msg.Data, &rep); err == nil && rep.Error != "" {
			err = errors.New(rep.Error)
		}
		if err == nil {
			err = json.Unmarshal(rep.Result, &smp)
		}
	}
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	if err != nil {
		s.stats.err = err.Error()
		return false
	}
	smp.At = s.now().UTC()
	s.stats.err = ""
	if len(s.stats.samples) >= statsSamples {
		s.stats.samples = append(s.stats.samples[:0], s.stats.samples[1:]...)
	}
	s.stats.samples = append(s.stats.samples, smp)
	return true
}

// sampleStatsEvery samples the advisor's statistics every statsEvery
// (every statsRetry while none answers: an advisor still starting) until
// ctx ends.
func (s *server) sampleStatsEvery(ctx context.Context, nc *nats.Conn) {
	for {
		wait := statsEvery
		if !s.sampleStats(nc) {
			wait = statsRetry
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (s *server) httpStats(w http.ResponseWriter, _ *http.Request) {
	s.stats.mu.Lock()
	v := StatsView{Samples: append([]StatsSample{}, s.stats.samples...), Error: s.stats.err}
	s.stats.mu.Unlock()
	if n := len(v.Samples); n > 0 {
		v.Latest = &v.Samples[n-1]
	}
	if s.nc == nil && v.Error == "" {
		v.Error = "no NATS connection: the advisor's statistics cannot be asked"
	}
	writeJSON(w, http.StatusOK, v)
}

// ended is whether the fold knows task id as ended (or not at all).
func (s *server) ended(id string) bool {
	end := true
	s.m.read(func(st *domain.State) {
		if t := st.Tasks[id]; t != nil {
			end = t.State.Terminal()
		}
	})
	return end
}
