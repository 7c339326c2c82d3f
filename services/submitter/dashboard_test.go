package submitter

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/audit"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/embedded/embeddedtest"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// dashCluster is two nodes of two GPUs: on n1 vision's "big" (2 GPUs, 2 h)
// runs, on n2 vision's "short" (1 GPU, 30 min); nlp's "head" (2 GPUs,
// 1 h) waits. The policy reserves n2 for head from short's predicted end,
// and n2's free GPU is a backfill gap until then.
type dashCluster struct {
	big, short, head string
}

func newDashCluster(h *harness) dashCluster {
	h.t.Helper()
	gpus := func(node string) []events.GPU {
		return []events.GPU{{UUID: node + "-g0", Index: 0, Model: "H100", MemoryMiB: 81920, Healthy: true},
			{UUID: node + "-g1", Index: 1, Model: "H100", MemoryMiB: 81920, Healthy: true}}
	}
	h.appendEvent(events.Available{Node: "n1", GPUs: gpus("n1"), FreeGPUs: 2})
	h.appendEvent(events.Available{Node: "n2", GPUs: gpus("n2"), FreeGPUs: 2})
	req := func(name, team string, g int, hours float64) domain.Request {
		r := validReq()
		r.Name, r.Team, r.GPUs, r.Hours, r.Priority = name, team, g, hours, "medium"
		return r
	}
	c := dashCluster{big: h.submit(req("big", "vision", 2, 2)).TaskID}
	h.appendEvent(events.Dispatched{TaskID: c.big, Placements: []events.Placement{{Node: "n1", GPUs: []string{"n1-g0", "n1-g1"}}}})
	h.appendEvent(events.Started{TaskID: c.big, Node: "n1", PID: 1})
	c.short = h.submit(req("short", "vision", 1, 0.5)).TaskID
	h.appendEvent(events.Dispatched{TaskID: c.short, Placements: []events.Placement{{Node: "n2", GPUs: []string{"n2-g0"}}}})
	h.appendEvent(events.Started{TaskID: c.short, Node: "n2", PID: 2})
	c.head = h.submit(req("head", "nlp", 2, 1)).TaskID
	return c
}

func decodeAs[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	return v
}

func barsOf(v PlanView, gpu string) []PlanBar {
	for _, n := range v.Nodes {
		for _, g := range n.GPUs {
			if g.UUID == gpu {
				return g.Bars
			}
		}
	}
	return nil
}

func kinds(bs []PlanBar) string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Kind+":"+b.Name)
	}
	return strings.Join(out, ",")
}

func TestHTTPPlan(t *testing.T) {
	h, tok := tokenHarness(t)
	c := newDashCluster(h)
	code, body := h.httpAs(tok["admin"], "GET", "/v1/plan", "")
	if code != 200 {
		t.Fatalf("plan: %d %s", code, body)
	}
	v := decodeAs[PlanView](t, body)
	if v.NodesTotal != 2 || len(v.Nodes) != 2 {
		t.Fatalf("nodes: total %d, %d listed", v.NodesTotal, len(v.Nodes))
	}
	// The policy's own reservation: head, on n2, at short's predicted end
	// (its user estimate, 30 min, before any run was learned).
	r := v.Reservation
	if r == nil || r.TaskID != c.head || r.Name != "head" {
		t.Fatalf("reservation %+v, want head's", r)
	}
	if d := r.At.Sub(v.Now); d < 29*time.Minute || d > 31*time.Minute {
		t.Errorf("reservation %s after now, want short's end (30 min)", d)
	}
	for gpu, want := range map[string]string{
		"n1-g0": "running:big",
		"n1-g1": "running:big",
		"n2-g0": "running:short,reserved:head",
		"n2-g1": "backfill:,reserved:head",
	} {
		bs := barsOf(v, gpu)
		if got := kinds(bs); got != want {
			t.Errorf("%s: bars %s, want %s", gpu, got, want)
		}
		for i, b := range bs {
			if b.From.Before(v.Now) || b.To.After(v.Until) || !b.To.After(b.From) || (i > 0 && b.From.Before(bs[i-1].To)) {
				t.Errorf("%s: bar %d %+v outside [now, until] or overlapping", gpu, i, b)
			}
		}
	}
	gap := barsOf(v, "n2-g1")[0]
	if !gap.To.Equal(r.At) {
		t.Errorf("the backfill gap ends at %s, want the reservation's %s", gap.To, r.At)
	}
	if big := barsOf(v, "n1-g0")[0]; big.Clipped || big.To.Sub(v.Now) < 119*time.Minute {
		t.Errorf("big's bar %+v: want to its predicted end, 2 h after its start", big)
	}
	// A 1-hour horizon clips big's bar.
	_, body = h.httpAs(tok["admin"], "GET", "/v1/plan?hours=1", "")
	if b := barsOf(decodeAs[PlanView](t, body), "n1-g0")[0]; !b.Clipped {
		t.Errorf("hours=1: big's bar %+v not clipped", b)
	}

	// Scoping and bounds.
	cases := map[string]struct {
		token, path string
		want        int
		check       func(t *testing.T, v PlanView)
	}{
		"no token": {"", "/v1/plan", 401, nil},
		"a team sees the other team's task without its name": {tok["vision"], "/v1/plan", 200, func(t *testing.T, v PlanView) {
			if v.Reservation == nil || v.Reservation.Name != "" || v.Reservation.Team != "nlp" {
				t.Errorf("reservation %+v: want nlp's task, no name", v.Reservation)
			}
			if got := kinds(barsOf(v, "n2-g0")); got != "running:short,reserved:" {
				t.Errorf("n2-g0: %s", got)
			}
		}},
		"and its own with its name": {tok["nlp"], "/v1/plan", 200, func(t *testing.T, v PlanView) {
			if v.Reservation == nil || v.Reservation.Name != "head" {
				t.Errorf("reservation %+v: want head", v.Reservation)
			}
			if got := kinds(barsOf(v, "n1-g0")); got != "running:" {
				t.Errorf("n1-g0: %s", got)
			}
		}},
		"limit bounds the nodes": {tok["admin"], "/v1/plan?limit=1", 200, func(t *testing.T, v PlanView) {
			if len(v.Nodes) != 1 || v.Nodes[0].Node != "n1" || v.NodesTotal != 2 {
				t.Errorf("got %d nodes (%d in all)", len(v.Nodes), v.NodesTotal)
			}
		}},
		"offset pages on": {tok["admin"], "/v1/plan?limit=1&offset=1", 200, func(t *testing.T, v PlanView) {
			if len(v.Nodes) != 1 || v.Nodes[0].Node != "n2" {
				t.Errorf("got %+v", v.Nodes)
			}
		}},
		"offset past the end": {tok["admin"], "/v1/plan?offset=9", 200, func(t *testing.T, v PlanView) {
			if len(v.Nodes) != 0 {
				t.Errorf("got %d nodes", len(v.Nodes))
			}
		}},
		"hours 0":       {tok["admin"], "/v1/plan?hours=0", 400, nil},
		"hours too far": {tok["admin"], fmt.Sprintf("/v1/plan?hours=%d", planHours+1), 400, nil},
		"limit too big": {tok["admin"], fmt.Sprintf("/v1/plan?limit=%d", planNodes+1), 400, nil},
		"limit junk":    {tok["admin"], "/v1/plan?limit=x", 400, nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, body := h.httpAs(tc.token, "GET", tc.path, "")
			if code != tc.want {
				t.Fatalf("%d %s, want %d", code, body, tc.want)
			}
			if tc.check != nil {
				tc.check(t, decodeAs[PlanView](t, body))
			}
		})
	}
	if code, _ := h.httpAs(tok["admin"], "POST", "/v1/plan", "{}"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/plan: %d", code)
	}
}

func TestHTTPTeams(t *testing.T) {
	h, tok := tokenHarness(t)
	newDashCluster(h)
	h.s.pol = policy.New(policy.Options{Teams: policy.Teams{"vision": {GPUs: 2}, "nlp": {Share: 0.5}}})
	cases := map[string]struct {
		token string
		want  []TeamView
	}{
		"admin sees every team": {tok["admin"], []TeamView{
			{Team: "nlp", Guarantee: 2, HasGuar: true, Queued: 1, WaitingGPUHours: 2},
			{Team: "vision", Guarantee: 2, HasGuar: true, Used: 3, Borrowed: 1, Running: 2},
		}},
		"a team sees its own": {tok["nlp"], []TeamView{
			{Team: "nlp", Guarantee: 2, HasGuar: true, Queued: 1, WaitingGPUHours: 2},
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, body := h.httpAs(tc.token, "GET", "/v1/teams", "")
			if code != 200 {
				t.Fatalf("%d %s", code, body)
			}
			v := decodeAs[TeamsView](t, body)
			if v.HealthyGPUs != 4 {
				t.Errorf("healthy %d, want 4", v.HealthyGPUs)
			}
			if len(v.Teams) != len(tc.want) {
				t.Fatalf("teams %+v, want %+v", v.Teams, tc.want)
			}
			for i, w := range tc.want {
				g := v.Teams[i]
				if d := g.WaitingGPUHours - w.WaitingGPUHours; d < -0.01 || d > 0.01 {
					t.Errorf("%s: waiting %.3f GPU-hours, want %.3f", g.Team, g.WaitingGPUHours, w.WaitingGPUHours)
				}
				g.WaitingGPUHours = w.WaitingGPUHours
				if g != w {
					t.Errorf("got %+v, want %+v", g, w)
				}
			}
		})
	}
	if code, _ := h.httpAs("", "GET", "/v1/teams", ""); code != 401 {
		t.Errorf("no token: %d", code)
	}
}

func TestHTTPExplainAndEstimates(t *testing.T) {
	h, tok := tokenHarness(t)
	c := newDashCluster(h)
	head := "/v1/tasks/" + c.head
	later := validReq() // a record after head's: its wait has a span
	later.Team, later.GPUs = "vision", 1
	h.submit(later)
	adv := func(at time.Time, seq uint64, p50, p90 time.Duration) []byte {
		return []byte(fmt.Sprintf(`{"task_id":%q,"state":"queued","p50_start":%q,"p90_start":%q,"based_on_seq":%d,"at":%q,"method":"forward"}`,
			c.head, at.Add(p50).Format(time.RFC3339), at.Add(p90).Format(time.RFC3339), seq, at.Format(time.RFC3339)))
	}
	h.s.estimates.add(adv(t0, 7, 30*time.Minute, time.Hour), h.s.ended)
	h.s.estimates.add(adv(t0, 7, 30*time.Minute, time.Hour), h.s.ended) // the same: not kept twice
	h.s.estimates.add(adv(t0.Add(time.Minute), 9, 40*time.Minute, 2*time.Hour), h.s.ended)
	h.s.estimates.add(adv(t0, 8, 10*time.Minute, time.Hour), h.s.ended) // older than the last: dropped

	cases := map[string]struct {
		token, path string
		want        int
		check       func(t *testing.T, body string)
	}{
		"explain: its team": {tok["nlp"], head + "/explain", 200, func(t *testing.T, body string) {
			ex := decodeAs[audit.Explanation](t, body)
			if ex.TaskID != c.head || !ex.Waiting || len(ex.Spans) == 0 || ex.Spans[0].Cause != audit.CauseCapacity {
				t.Errorf("explanation %+v: want head waiting, with spans", ex)
			}
		}},
		"explain: the admin":      {tok["admin"], head + "/explain", 200, nil},
		"explain: another team":   {tok["vision"], head + "/explain", 403, nil},
		"explain: no token":       {"", head + "/explain", 401, nil},
		"explain: unknown task":   {tok["admin"], "/v1/tasks/" + unknownID + "/explain", 404, nil},
		"estimates: another team": {tok["vision"], head + "/estimates", 403, nil},
		"estimates: unknown task": {tok["admin"], "/v1/tasks/" + unknownID + "/estimates", 404, nil},
		"estimates: its team": {tok["nlp"], head + "/estimates", 200, func(t *testing.T, body string) {
			v := decodeAs[EstimatesView](t, body)
			if len(v.Points) != 2 || v.Points[0].BasedOnSeq != 7 || v.Points[1].BasedOnSeq != 9 || v.Started != nil {
				t.Errorf("estimates %+v: want seq 7 then 9, not started", v)
			}
		}},
		"stats without NATS says why": {tok["vision"], "/v1/stats", 200, func(t *testing.T, body string) {
			if v := decodeAs[StatsView](t, body); v.Error == "" || v.Latest != nil {
				t.Errorf("stats %+v: want an error, no sample", v)
			}
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, body := h.httpAs(tc.token, "GET", tc.path, "")
			if code != tc.want {
				t.Fatalf("%d %s, want %d", code, body, tc.want)
			}
			if tc.check != nil {
				tc.check(t, body)
			}
		})
	}
}

// TestEstimateLogBounded: a task's points and the tasks kept are bounded.
func TestEstimateLogBounded(t *testing.T) {
	var l estimateLog
	for i := range estimatePoints + 10 {
		l.add([]byte(fmt.Sprintf(`{"task_id":"a","p50_start":%q,"p90_start":%q,"based_on_seq":%d}`,
			t0.Add(time.Duration(i)*time.Minute).Format(time.RFC3339), t0.Format(time.RFC3339), i)), func(string) bool { return true })
	}
	if got := l.get("a"); len(got) != estimatePoints || got[len(got)-1].BasedOnSeq != estimatePoints+9 {
		t.Errorf("%d points kept, the last %d", len(got), got[len(got)-1].BasedOnSeq)
	}
}

// BenchmarkPlan: GET /v1/plan's pass (Explain: every queued task walked)
// on 50 nodes of 8 GPUs, all held, with 10,000 tasks queued; a new pass
// per iteration (the cache dropped).
func BenchmarkPlan(b *testing.B) {
	h := newHarness(b, nil)
	for n := range 50 {
		node := fmt.Sprintf("n%02d", n)
		var gs []events.GPU
		var uu []string
		for g := range 8 {
			u := fmt.Sprintf("%s-g%d", node, g)
			gs = append(gs, events.GPU{UUID: u, Index: g, Model: "H100", MemoryMiB: 81920, Healthy: true})
			uu = append(uu, u)
		}
		h.appendEvent(events.Available{Node: node, GPUs: gs, FreeGPUs: 8})
		r := validReq()
		r.GPUs, r.Hours = 8, float64(1+n%5)
		id := h.submit(r).TaskID
		h.appendEvent(events.Dispatched{TaskID: id, Placements: []events.Placement{{Node: node, GPUs: uu}}})
		h.appendEvent(events.Started{TaskID: id, Node: node, PID: 1})
	}
	for i := range 10_000 {
		r := validReq()
		r.GPUs, r.Hours = 1+i%8, float64(1+i%7)
		h.submit(r)
	}
	b.ResetTimer()
	for range b.N {
		h.s.plans.mu.Lock()
		h.s.plans.last = nil
		h.s.plans.mu.Unlock()
		if _, err := h.s.plan(h.ctx, 6, 0, defaultPlanNodes); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStatsSampled: GET /v1/stats is what the advisor answers on
// api.OpStats, sampled; no advisor is an error, not a sample.
func TestStatsSampled(t *testing.T) {
	srv := embeddedtest.Server(t)
	nc := embeddedtest.Connect(t, srv, "submitter")
	h := newHarness(t, nil)
	h.s.nc = nc
	if h.s.sampleStats(nc) {
		t.Fatal("a sample without an advisor")
	}
	if v := decodeAs[StatsView](t, h.httpCall("GET", "/v1/stats", "").Body.String()); v.Error == "" || v.Latest != nil {
		t.Fatalf("without an advisor: %+v, want an error", v)
	}
	adv := embeddedtest.Connect(t, srv, "advisor")
	cov := 0.8
	sub, err := adv.Subscribe(api.SubjectPrefix+api.OpStats, func(m *nats.Msg) {
		_ = m.Respond([]byte(fmt.Sprintf(`{"result":{"n":10,"p90_coverage":%g,"p50_median_abs_err_s":120,"alerts":1,"queued":3}}`, cov)))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = adv.Flush()
	for _, c := range []float64{0.8, 0.9} {
		cov = c
		if !h.s.sampleStats(nc) {
			t.Fatal("no sample with an advisor answering")
		}
	}
	v := decodeAs[StatsView](t, h.httpCall("GET", "/v1/stats", "").Body.String())
	if v.Error != "" || len(v.Samples) != 2 || v.Latest == nil || v.Latest.P90Coverage != 0.9 || v.Latest.N != 10 || v.Latest.MedianAbsS != 120 {
		t.Errorf("stats %+v, want two samples, the last 0.9 of 10, 120 s", v)
	}
}

// TestExplainBounded: one explanation at a time (another is 503, not
// queued); a log longer than explainRecords is 422.
func TestExplainBounded(t *testing.T) {
	h := newHarness(t, nil)
	c := newDashCluster(h)
	h.s.explains.sem <- struct{}{} // an explanation under way
	w := h.httpCall("GET", "/v1/tasks/"+c.head+"/explain", "")
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("while another is computed: %d %s, want 503", w.Code, w.Body)
	}
	<-h.s.explains.sem
	if w := h.httpCall("GET", "/v1/tasks/"+c.head+"/explain", ""); w.Code != 200 {
		t.Fatalf("then: %d %s", w.Code, w.Body)
	}
	for range explainRecords {
		h.appendEvent(events.Available{Node: "n1", GPUs: []events.GPU{{UUID: "n1-g0", Model: "H100", MemoryMiB: 81920, Healthy: true}}, FreeGPUs: 0})
		if h.lastSeq() > explainRecords {
			break
		}
	}
	if err := h.s.sync(h.ctx); err != nil {
		t.Fatal(err)
	}
	if w := h.httpCall("GET", "/v1/tasks/"+c.head+"/explain", ""); w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.Body.String(), "gpuq explain") {
		t.Errorf("a long log: %d %s, want 422 naming gpuq explain", w.Code, w.Body)
	}
}
