package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
)

// Sizes here are small: these tests check that every measurement measures
// what it says (counts, a sound log, a clean fold), never how fast.

func tiny() Config {
	return Config{Quick: true, Dir: "", RawMsgs: 2000, IngestMsgs: 2000, LogEvents: 5000, LogNodes: 4, Rounds: 2,
		Lifecycle: LifecycleOptions{Tasks: 300, Nodes: 4}, Scheduler: testScheduler,
		Placement: PlacementOptions{Nodes: 20, PerNode: 8, Queued: 500, Events: 50, NoEnvQueued: 200}}
}

func TestRun(t *testing.T) {
	cfg := tiny()
	cfg.Dir = t.TempDir()
	cfg.R3Msgs, cfg.R3Tasks = 500, 100 // the R3 rows: a 3-server cluster, the stream at R3
	var steps []string
	cfg.Progress = func(s string) { steps = append(steps, s) }
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 6 {
		t.Errorf("steps = %q, want 6", steps)
	}
	// The R3 rows: every count as asked, the ratios against the raw R3
	// publish of the same run.
	d := r.Detail
	if d.R3RawPublish == nil || d.R3RawPublish.N != 500 || d.R3Ingest.N != 500 || d.R3Lifecycle == nil || d.R3Lifecycle.Tasks != 100 {
		t.Fatalf("r3 detail %+v %+v %+v: want 500 publishes, 500 submits, 100 tasks", d.R3RawPublish, d.R3Ingest, d.R3Lifecycle)
	}
	if want := r.R3SubmitIngestPerS / r.R3RawPublishDedupPerS; r.R3IngestVsRaw != want || !(want > 0) {
		t.Errorf("r3_ingest_vs_raw = %v, want %v > 0", r.R3IngestVsRaw, want)
	}
	if want := r.R3LifecycleTasksPerS / (r.R3RawPublishDedupPerS / 4); r.R3LifecycleVsRaw != want || !(want > 0) {
		t.Errorf("r3_lifecycle_vs_raw = %v, want %v > 0", r.R3LifecycleVsRaw, want)
	}
	var buf strings.Builder
	if err := r.WriteTable(&buf); err != nil || !strings.Contains(buf.String(), "r3_lifecycle_tasks_per_s") {
		t.Errorf("table without the R3 rows (%v):\n%s", err, buf.String())
	}

	for name, v := range map[string]float64{
		"raw_publish_dedup_per_s": r.RawPublishDedupPerS, "submit_ingest_per_s": r.SubmitIngestPerS,
		"raw_replay_per_s": r.RawReplayPerS, "fold_per_s": r.FoldPerS, "lifecycle_tasks_per_s": r.LifecycleTasksPerS,
		"placements_per_s": r.PlacementsPerS, "placement_p99_ms": r.PlacementP99Ms,
		"bytes_per_queued_task": r.BytesPerQueuedTask, "restart_1m_s": r.Restart1MS,
		"ingest_vs_raw": r.IngestVsRaw, "fold_vs_raw": r.FoldVsRaw,
	} {
		if !(v > 0) {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
	if !r.RestartExtrapolated || r.RestartEvents != 5000 || !r.Snapshots || r.RestartTailEvents != 1000 {
		t.Errorf("restart: extrapolated %v from %d events, snapshots %v, tail %d; want extrapolated from 5000, snapshots, tail 1000",
			r.RestartExtrapolated, r.RestartEvents, r.Snapshots, r.RestartTailEvents)
	}
	// The part before the tail × 996,001 / 4,000, the tail's fold × 9,999 / 1,000.
	sn := r.Detail.Log.Snapshot
	if sn.Seq != 4000 || sn.Tasks == 0 || sn.StateBytes == 0 || sn.StoredBytes == 0 || sn.TailFold <= 0 {
		t.Errorf("snapshot %+v: want one at 4000 with tasks, bytes and a tail fold", sn)
	}
	want := (r.Detail.Log.Restart-sn.TailFold).Seconds()*(1_000_000-9_999)/4000 + sn.TailFold.Seconds()*9_999/1000
	if got := r.Restart1MS; got < want*0.999 || got > want*1.001 {
		t.Errorf("restart_1m_s = %v, want %v", got, want)
	}
	up := (r.Detail.Log.Restart-r.Detail.Log.ServerStart-sn.TailFold).Seconds()*(1_000_000-9_999)/4000 + sn.TailFold.Seconds()*9_999/1000
	if got := r.RestartService1MS; got < up*0.999 || got > up*1.001 || got >= r.Restart1MS {
		t.Errorf("restart_service_1m_s = %v, want %v (below restart_1m_s %v)", got, up, r.Restart1MS)
	}
	// The aged restart: the same log and snapshot, its own timings.
	ag := r.Detail.Log.Aged
	if ag.Restart <= 0 || ag.ServerStart <= 0 || ag.ServerStart >= ag.Restart || ag.Snapshot.Seq != sn.Seq || ag.Snapshot.TailFold <= 0 {
		t.Errorf("aged restart %+v: want a restart from the snapshot at %d, its server start inside it", ag, sn.Seq)
	}
	aged := (ag.Restart-ag.Snapshot.TailFold).Seconds()*(1_000_000-9_999)/4000 + ag.Snapshot.TailFold.Seconds()*9_999/1000
	if got := r.RestartAged1MS; got < aged*0.999 || got > aged*1.001 {
		t.Errorf("restart_aged_1m_s = %v, want %v", got, aged)
	}
	// Each service's restart from its own snapshot at the same sequence:
	// the tail folded, extrapolated like restart_1m_s, the raw replay of
	// the same log beside it.
	if len(r.ServiceRestarts) != len(Services) {
		t.Fatalf("%d service restarts, want %d (%v)", len(r.ServiceRestarts), len(Services), Services)
	}
	rawPer := r.Detail.Log.RawReplay.Took.Seconds() / float64(r.Detail.Log.RawReplay.N)
	for i, sr := range r.ServiceRestarts {
		d := r.Detail.Log.Services[i]
		tail, tail1M := 1000, 9_999
		if sr.Service == "advisor" { // snapshots every 1,000 events; a fiftieth of a short log
			tail, tail1M = 100, 999
		}
		folded := tail // the tail counted: all of it, or the advisor's up to its budget
		if d.BudgetCut {
			folded = d.TailEvents
		}
		if sr.Service != Services[i] || d.Seq != uint64(5000-tail) || sr.TailEvents != folded || !sr.Extrapolated || sr.Events != 5000 ||
			d.BudgetCut && (sr.Service != "advisor" || folded > tail) {
			t.Errorf("restart of %s: %+v (%+v); want %s from the snapshot at %d, a tail of %d, extrapolated from 5000", sr.Service, sr, d, Services[i], 5000-tail, tail)
		}
		tailS := d.TailFold.Seconds() * float64(tail1M) / float64(folded)
		if sr.Service == "advisor" {
			tailS = min(tailS, 1+d.TailFold.Seconds()/float64(folded)) // at most its 1 s budget and the record that crossed it
		}
		// The events before the tail: those the snapshot held, also when
		// the advisor's budget cut the tail short.
		want := (d.Restart-d.TailFold).Seconds()*float64(1_000_000-tail1M)/float64(5000-tail) + tailS
		if got := sr.Restart1MS; !(got > 0) || got < want*0.999 || got > want*1.001 {
			t.Errorf("restart_%s_1m_s = %v, want %v", sr.Service, got, want)
		}
		if got := sr.RawReplay1MS; got < rawPer*1e6*0.999 || got > rawPer*1e6*1.001 || sr.VsRawReplay != sr.Restart1MS/sr.RawReplay1MS {
			t.Errorf("%s: raw replay %v (want %v), vs raw %v", sr.Service, got, rawPer*1e6, sr.VsRawReplay)
		}
	}
	if len(r.Goals) != 11+len(Services) {
		t.Errorf("%d goals, want %d", len(r.Goals), 11+len(Services))
	}

	// The JSON names the issue asks for.
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"raw_publish_dedup_per_s", "submit_ingest_per_s", "raw_replay_per_s", "fold_per_s",
		"lifecycle_tasks_per_s", "placements_per_s", "placement_p99_ms", "bytes_per_queued_task", "restart_1m_s",
		"restart_aged_1m_s", "snapshots", "ingest_vs_raw", "fold_vs_raw", "goals", "machine", "service_restarts"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	var out bytes.Buffer
	if err := r.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"restart_1m_s", "restart_aged_1m_s", "EXTRAPOLATED", "goals",
		"restart_scheduler_1m_s", "restart_submitter_1m_s", "restart_advisor_1m_s", "restart_agent_1m_s"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
}

func TestGoals(t *testing.T) {
	tests := map[string]struct {
		r    Result
		want map[string]bool
	}{
		"all met": {
			r: Result{IngestVsRaw: 0.5, FoldVsRaw: 0.9, LifecycleTasksPerS: 10_000, PlacementsPerS: 25_000,
				PlacementP99Ms: 5, BytesPerQueuedTask: 2048, Restart1MS: 1.5, RestartAged1MS: 2, LifecycleVsRaw: 0.5,
				R3RawPublishDedupPerS: 1, R3IngestVsRaw: 0.5, R3LifecycleTasksPerS: 1, R3LifecycleVsRaw: 0.5},
			want: map[string]bool{"ingest_vs_raw": true, "fold_vs_raw": true, "lifecycle_tasks_per_s": true,
				"placements_per_s": true, "placement_p99_ms": true, "bytes_per_queued_task": true, "restart_1m_s": true,
				"restart_aged_1m_s": true, "lifecycle_vs_raw": true, "r3_ingest_vs_raw": true, "r3_lifecycle_vs_raw": true},
		},
		"all missed": {
			r: Result{IngestVsRaw: 0.49, FoldVsRaw: 0.1, LifecycleTasksPerS: 9_999, PlacementsPerS: 19_999,
				PlacementP99Ms: 5.01, BytesPerQueuedTask: 2049, Restart1MS: 2.01, RestartAged1MS: 2.01, LifecycleVsRaw: 0.49,
				R3RawPublishDedupPerS: 1, R3IngestVsRaw: 0.49, R3LifecycleTasksPerS: 1, R3LifecycleVsRaw: 0.49},
			want: map[string]bool{"ingest_vs_raw": false, "fold_vs_raw": false, "lifecycle_tasks_per_s": false,
				"placements_per_s": false, "placement_p99_ms": false, "bytes_per_queued_task": false, "restart_1m_s": false,
				"restart_aged_1m_s": false, "lifecycle_vs_raw": false, "r3_ingest_vs_raw": false, "r3_lifecycle_vs_raw": false},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := map[string]bool{}
			for _, g := range Goals(&tc.r) {
				got[g.Metric] = g.Met
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("goals (-want +got):\n%s", diff)
			}
		})
	}
}

// The history log is sound: the fold applies every event, and ends with
// the tasks queued, running and completed that the generator implies.
func TestHistoryFolds(t *testing.T) {
	var recs []events.Record
	err := history(2, 3000, func(e events.Event, at time.Time) error {
		subj, data, _, err := events.Encode(e, events.Meta{Time: at})
		if err != nil {
			return err
		}
		r, err := events.Decode(events.Stored{Seq: uint64(len(recs) + 1), Subject: subj, Data: data, Time: at})
		recs = append(recs, r)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3000 {
		t.Fatalf("%d events, want 3000", len(recs))
	}
	st := domain.NewState()
	for _, r := range recs {
		st.Apply(r)
	}
	if st.Ignored != 0 || st.Skipped != 0 {
		t.Errorf("the fold ignored %d and skipped %d events", st.Ignored, st.Skipped)
	}
	count := map[domain.TaskState]int{}
	for _, tk := range st.Tasks {
		count[tk.State]++
	}
	if count[domain.Queued] == 0 || count[domain.Running] == 0 || count[domain.Completed] == 0 {
		t.Errorf("task states %v: want some queued, running and completed", count)
	}
}

func TestIngestKeepsOneTaskPerKey(t *testing.T) {
	ctx := context.Background()
	nd, err := startNode(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer nd.close()
	p, err := nd.publisher(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	s := newSubmitter(p.js)
	for _, i := range []int{0, 1, 0, 2, 1} {
		if err := s.submit(request(i), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	bad := request(3)
	bad.Hypothesis = ""
	if err := s.submit(bad, time.Now()); err == nil {
		t.Error("a request without a hypothesis was submitted")
	}
	if err := p.wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := expectSeq(ctx, nd, 3); err != nil {
		t.Error(err)
	}
}

func TestLifecycleCompletesEveryTask(t *testing.T) {
	r, err := Lifecycle(context.Background(), t.TempDir(), LifecycleOptions{Tasks: 200, Nodes: 2, Scheduler: testScheduler})
	if err != nil {
		t.Fatal(err)
	}
	// 2 nodes, then submitted, dispatched, started, completed per task.
	if want := uint64(2 + 4*200); r.Events != want {
		t.Errorf("%d events in the log, want %d", r.Events, want)
	}
	// The scheduler's figures come from its metrics: one dispatch per task.
	if r.Passes == 0 || r.PassTime <= 0 || r.Decisions != 200 || r.Conflicts != 0 {
		t.Errorf("%d passes in %v, %d decisions, %d conflicts; want some passes, 200 decisions, no conflicts", r.Passes, r.PassTime, r.Decisions, r.Conflicts)
	}
}

func TestPlacement(t *testing.T) {
	r, err := Placement(context.Background(), PlacementOptions{Nodes: 10, PerNode: 8, Queued: 300, Events: 40})
	if err != nil {
		t.Fatal(err) // also when the fold refused a placement
	}
	if r.Placements == 0 || r.GPUs != 80 || r.P99 < r.P50 || r.Max < r.P99 {
		t.Errorf("placement result %+v", r)
	}
}

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for q, want := range map[float64]time.Duration{0.5: 50, 0.99: 99, 1: 100, 0: 1} {
		if got := quantile(d, q); got != want {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
}

// A scheduler passed in (as cmd/gpuq passes services/scheduler) is the
// one that decides; without one there is no lifecycle to measure.
func TestLifecycleWithSchedulerFunc(t *testing.T) {
	called := false
	sched := func(ctx context.Context, log *jetstream.Log, reg prometheus.Registerer, ready func()) error {
		called = true
		return testScheduler(ctx, log, reg, ready)
	}
	r, err := Lifecycle(context.Background(), t.TempDir(), LifecycleOptions{Tasks: 100, Nodes: 2, Scheduler: sched})
	if err != nil {
		t.Fatal(err)
	}
	if !called || r.Decisions != 100 {
		t.Errorf("called %v, %d decisions: want the given scheduler's 100 dispatches", called, r.Decisions)
	}
	if _, err := Lifecycle(context.Background(), t.TempDir(), LifecycleOptions{Tasks: 100, Nodes: 2}); err == nil {
		t.Error("Lifecycle without a scheduler: no error")
	}
}

// The advisor's measurement at a small scale: every figure filled, the
// advice after every event computed (a full re-estimate or a partial one
// per event, and the first one), the completions' dispatches folded.
func TestAdvisor(t *testing.T) {
	r, err := Advisor(context.Background(), AdvisorOptions{Nodes: 20, PerNode: 8, Queued: 400, Events: 10})
	if err != nil {
		t.Fatal(err)
	}
	if r.GPUs != 160 || r.Queued != 400 || r.EstimateAll <= 0 || r.Advise <= 0 || r.HeapBytes == 0 ||
		r.P99 < r.P50 || r.Max < r.P99 || r.P99Ms <= 0 || r.Full+r.Incremental < r.Events+1 ||
		!r.Settled || r.Workers != 2 || r.FoldP99Ms <= 0 {
		t.Errorf("advisor result %+v", r)
	}
}

// The freshness step: events on the wall clock, every one of them
// reflected by a full re-estimate begun after it, within the run; the
// re-estimates are coalesced (fewer than the events) by the service's
// budget, so each event's delay is at least one re-estimate.
func TestAdvisorFresh(t *testing.T) {
	r, err := Advisor(context.Background(), AdvisorOptions{Nodes: 20, PerNode: 8, Queued: 400, Events: 2,
		Fresh: 600 * time.Millisecond, FreshGap: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.FreshEvents < 2 || r.FreshFull < 1 || r.FreshFull > r.FreshEvents || r.FreshEstAvgS <= 0 ||
		r.FreshP50S <= 0 || r.FreshP99S < r.FreshP50S || r.FreshMaxS < r.FreshP99S || r.FreshMaxS < r.FreshEstAvgS/2 {
		t.Errorf("freshness %+v", r)
	}
	// Without Fresh nothing of it is reported.
	r, err = Advisor(context.Background(), AdvisorOptions{Nodes: 20, PerNode: 8, Queued: 400, Events: 2})
	if err != nil || r.FreshEvents != 0 || r.FreshP99S != 0 {
		t.Errorf("no Fresh: %+v, %v", r, err)
	}
}

// The advisor is measured on the cluster as the scheduler leaves it: the
// folded state has CRITICAL tasks queued with victims running, which the
// scheduler's passes preempt before the measurement (Unsettled keeps
// them).
func TestAdvisorSettles(t *testing.T) {
	for _, tc := range []struct {
		name      string
		unsettled bool
	}{{"settled", false}, {"unsettled", true}} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Advisor(context.Background(), AdvisorOptions{Nodes: 20, PerNode: 8, Queued: 400, Events: 2, Unsettled: tc.unsettled})
			if err != nil {
				t.Fatal(err)
			}
			if r.Settled == tc.unsettled || (r.Preempted > 0) == tc.unsettled {
				t.Errorf("settled %v after %d preemptions, want settled %v", r.Settled, r.Preempted, !tc.unsettled)
			}
		})
	}
}

// --only runs the groups named and no other, and keeps their goals alone.
func TestOnly(t *testing.T) {
	tests := map[string]struct {
		only      []string
		wantSteps []string
		wantGoals []string
	}{
		"advisor": {only: []string{"advisor"}, wantSteps: []string{"advisor"},
			wantGoals: []string{"estimate_all_100k_s", "advice_after_event_p99_ms", "advisor_heap_bytes"}},
		"placement and advisor": {only: []string{"placement", "advisor"}, wantSteps: []string{"placement", "advisor"},
			wantGoals: []string{"placements_per_s", "placement_p99_ms", "bytes_per_queued_task", "estimate_all_100k_s", "advice_after_event_p99_ms", "advisor_heap_bytes"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := tiny()
			cfg.Dir = t.TempDir()
			cfg.Only = tc.only
			cfg.Advisor = AdvisorOptions{Nodes: 10, PerNode: 8, Queued: 100, Events: 4}
			var steps []string
			cfg.Progress = func(s string) { name, _, _ := strings.Cut(s, ":"); steps = append(steps, name) }
			r, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			var goals []string
			for _, g := range r.Goals {
				goals = append(goals, g.Metric)
			}
			if d := cmp.Diff(tc.wantSteps, steps); d != "" {
				t.Errorf("steps (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantGoals, goals); d != "" {
				t.Errorf("goals (-want +got):\n%s", d)
			}
			var buf strings.Builder
			if err := r.WriteTable(&buf); err != nil || !strings.Contains(buf.String(), "advice_after_event_p99_ms") ||
				strings.Contains(buf.String(), "raw_publish_dedup_per_s") || strings.Contains(buf.String(), "restart_1m_s") {
				t.Errorf("table (%v) has rows of groups not run, or not the advisor's:\n%s", err, buf.String())
			}
		})
	}
}

// A run without Only runs every group but stream (heavy: 1,000
// followers); stream runs when named, alone or with others.
func TestRuns(t *testing.T) {
	tests := map[string]struct {
		only []string
		want []string
	}{
		"full run":           {only: nil, want: []string{"publish", "log", "lifecycle", "placement", "r3", "advisor"}},
		"stream alone":       {only: []string{"stream"}, want: []string{"stream"}},
		"stream and advisor": {only: []string{"advisor", "stream"}, want: []string{"advisor", "stream"}},
		"advisor alone":      {only: []string{"advisor"}, want: []string{"advisor"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := Config{Only: tc.only}
			r := Result{Only: tc.only}
			var got []string
			for _, g := range Groups {
				if cfg.runs(g) != r.ran(g) {
					t.Errorf("group %s: Config.runs %v, Result.ran %v", g, cfg.runs(g), r.ran(g))
				}
				if cfg.runs(g) {
					got = append(got, g)
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("groups run (-want +got):\n%s", d)
			}
		})
	}
}

// The stream group needs its submitter (Config.Stream): without it the
// run fails at once, before any measurement.
func TestOnlyStreamNeedsStream(t *testing.T) {
	cfg := tiny()
	cfg.Only = []string{"stream"}
	var steps []string
	cfg.Progress = func(s string) { steps = append(steps, s) }
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "Config.Stream") || len(steps) > 0 {
		t.Errorf("Run = %v after steps %q; want the error naming Config.Stream before any step", err, steps)
	}
}
