package trace

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// tracesDir is the shared traces directory beside the repository, seen from this package.
const tracesDir = "../../../shared/traces"

func openTrace(t *testing.T, rel string) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join(tracesDir, rel))
	if os.IsNotExist(err) {
		t.Skipf("trace %s not present: %v", rel, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestPhillyTrace checks the parser against the figures in
// shared/traces/README.md and the simulator issue's offered load.
func TestPhillyTrace(t *testing.T) {
	jobs, rep, err := ReadPhillyReport(openTrace(t, "philly/jobs-2017-10-11.csv"))
	if err != nil {
		t.Fatal(err)
	}
	vcs, err := ReadPhillyVCs(openTrace(t, "philly/vcs.csv"))
	if err != nil {
		t.Fatal(err)
	}

	// README: "68,503 GPU jobs submitted 2017-10-01 to 2017-11-30 in the 11
	// virtual clusters (VCs) below".
	if rep.Rows != 68503 || rep.Kept != 68503 || rep.DroppedTotal() != 0 {
		t.Errorf("report %+v, want 68503 rows all kept", rep)
	}
	if len(vcs) != 11 {
		t.Errorf("%d VCs, want 11", len(vcs))
	}
	nodes := 0
	for _, n := range vcs {
		nodes += n
	}
	if nodes != 352 {
		t.Errorf("VCs total %d nodes, want 352 (HeliosArtifact philly_vc.csv)", nodes)
	}
	if kept, dropped := FilterVCs(jobs, vcs); dropped != 0 || len(kept) != len(jobs) {
		t.Errorf("FilterVCs dropped %d jobs, want every job in a listed VC", dropped)
	}
	if got := jobs[0].SubmitTime.Format(phillyTimeLayout); got != "2017-10-01 00:00:45" || jobs[0].Submit != 0 {
		t.Errorf("first job submitted %s (offset %v), want 2017-10-01 00:00:45 at 0", got, jobs[0].Submit)
	}
	if last := jobs[len(jobs)-1].SubmitTime; last.Format("2006-01-02") != "2017-11-30" {
		t.Errorf("last job submitted %v, want 2017-11-30", last)
	}
	for i := 1; i < len(jobs); i++ {
		a, b := jobs[i-1], jobs[i]
		if a.Submit > b.Submit || (a.Submit == b.Submit && a.ID >= b.ID) {
			t.Fatalf("jobs %d (%s at %v) and %d (%s at %v) out of order", i-1, a.ID, a.Submit, i, b.ID, b.Submit)
		}
	}

	// README: "94% of jobs use 1 GPU, the largest 32; median duration about
	// 24 min, p99 about 61 h".
	one := 0
	for _, j := range jobs {
		if j.GPUs == 1 {
			one++
		}
	}
	if f := float64(one) / float64(len(jobs)); math.Abs(f-0.94) > 0.01 {
		t.Errorf("%.3f of jobs use 1 GPU, want about 0.94", f)
	}

	// Simulator issue: pooled on 72 nodes × 8 GPUs, offered load ≈ 0.82.
	s := Stats(jobs, 72*8)
	t.Logf("philly: %d jobs, span %v, %.0f GPU-h, load on 576 GPUs %.4f, on %d GPUs %.4f",
		s.Jobs, s.Span, s.GPUHours, s.OfferedLoad, nodes*8, Stats(jobs, nodes*8).OfferedLoad)
	if math.Abs(s.OfferedLoad-0.82) > 0.01 {
		t.Errorf("offered load on 72×8 GPUs = %.4f, want 0.82 ± 0.01", s.OfferedLoad)
	}
	if s.MaxGPUs != 32 {
		t.Errorf("largest job %d GPUs, want 32", s.MaxGPUs)
	}
	if d := s.MedianDuration; d < 22*time.Minute || d > 26*time.Minute {
		t.Errorf("median duration %v, want about 24 min", d)
	}
	if d := s.P99Duration; d < 59*time.Hour || d > 63*time.Hour {
		t.Errorf("p99 duration %v, want about 61 h", d)
	}
}

// TestAlibabaOpenBTrace checks the openb reader against README figures.
func TestAlibabaOpenBTrace(t *testing.T) {
	jobs, rep, err := ReadAlibabaOpenBReport(openTrace(t, "alibaba-openb-2023/pods.csv"))
	if err != nil {
		t.Fatal(err)
	}
	// README: "pods.csv: 8,152 pods". Of these 1,088 ask for no GPU and
	// 861 GPU pods were never scheduled (Pending, no scheduled_time).
	want := Report{Rows: 8152, Kept: 6203, Dropped: map[DropReason]int{DropZeroGPUs: 1088, DropNotStarted: 861}}
	if rep.Rows != want.Rows || rep.Kept != want.Kept || len(rep.Dropped) != len(want.Dropped) ||
		rep.Dropped[DropZeroGPUs] != 1088 || rep.Dropped[DropNotStarted] != 861 {
		t.Errorf("report %+v, want %+v", rep, want)
	}
	// README: "Real scheduling delay = scheduled − creation (median 2 s,
	// p90 106 s, p99 908 s)". Those figures are over all 7,255 scheduled
	// pods, CPU-only ones included; over the kept GPU pods the median is
	// the same 2 s and the tail is longer (p90 139 s, p99 1,110 s).
	waits := make([]time.Duration, len(jobs))
	for i, j := range jobs {
		waits[i] = j.Wait
	}
	slices.Sort(waits)
	if m := nearestRank(waits, 0.5); m != 2*time.Second {
		t.Errorf("median wait %v, want 2s", m)
	}
	if p := nearestRank(waits, 0.9); p != 139*time.Second {
		t.Errorf("p90 wait %v, want 139s", p)
	}
	if p := nearestRank(waits, 0.99); p != 1110*time.Second {
		t.Errorf("p99 wait %v, want 1110s", p)
	}

	nodes, err := ReadAlibabaNodes(openTrace(t, "alibaba-openb-2023/gpu_nodes.csv"))
	if err != nil {
		t.Fatal(err)
	}
	gpus := 0
	for _, n := range nodes {
		gpus += n.GPUs
	}
	// README: "gpu_nodes.csv: 1,213 GPU nodes".
	if len(nodes) != 1213 || gpus != 6212 {
		t.Errorf("%d nodes with %d GPUs, want 1213 with 6212", len(nodes), gpus)
	}
	s := Stats(jobs, gpus)
	t.Logf("openb: %d pods, span %v, %.0f GPU-h, load on %d GPUs %.4f", s.Jobs, s.Span, s.GPUHours, gpus, s.OfferedLoad)
}
