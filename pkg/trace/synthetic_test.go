package trace

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestParseSynthetic(t *testing.T) {
	tests := map[string]struct {
		spec    string
		want    Synthetic
		wantErr string
	}{
		"defaults":          {spec: "synthetic:jobs=10", want: Synthetic{Jobs: 10, Seed: 1, Load: DefaultSyntheticLoad, Mix: MixPhilly}},
		"every key":         {spec: "synthetic:jobs=5, seed=7,load=1.5,gpus=64,mix=alibaba", want: Synthetic{Jobs: 5, Seed: 7, Load: 1.5, GPUs: 64, Mix: MixAlibaba}},
		"not synthetic":     {spec: "philly:jobs=5", wantErr: "want synthetic:"},
		"no jobs":           {spec: "synthetic:seed=1", wantErr: "jobs is required"},
		"zero jobs":         {spec: "synthetic:jobs=0", wantErr: "jobs must be"},
		"negative load":     {spec: "synthetic:jobs=1,load=-1", wantErr: "load must be"},
		"nan load":          {spec: "synthetic:jobs=1,load=NaN", wantErr: "load must be"},
		"unknown mix":       {spec: "synthetic:jobs=1,mix=helios", wantErr: "mix must be"},
		"unknown key":       {spec: "synthetic:jobs=1,rate=3", wantErr: `unknown key "rate"`},
		"twice":             {spec: "synthetic:jobs=1,jobs=2", wantErr: "given twice"},
		"no value":          {spec: "synthetic:jobs=", wantErr: "want key=value"},
		"bad seed":          {spec: "synthetic:jobs=1,seed=-1", wantErr: "seed must be"},
		"bad gpus":          {spec: "synthetic:jobs=1,gpus=0", wantErr: "gpus must be"},
		"canonical roundup": {spec: "synthetic:jobs=3,seed=2,load=0.5,gpus=8,mix=philly", want: Synthetic{Jobs: 3, Seed: 2, Load: 0.5, GPUs: 8, Mix: MixPhilly}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSynthetic(tt.spec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseSynthetic(%q) = %+v, %v; want an error with %q", tt.spec, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSynthetic(%q) = %+v, %v; want %+v", tt.spec, got, err, tt.want)
			}
			back, err := ParseSynthetic(got.String())
			if err != nil || back != got {
				t.Errorf("String %q reads back as %+v, %v", got.String(), back, err)
			}
		})
	}
}

// TestSyntheticGolden pins the generated jobs of a small workload of each
// mix; run with -update after an intended change and review the diff.
func TestSyntheticGolden(t *testing.T) {
	for _, mix := range []string{MixPhilly, MixAlibaba} {
		t.Run(mix, func(t *testing.T) {
			s := Synthetic{Jobs: 60, Seed: 1, Load: 0.9, GPUs: 64, Mix: mix}
			jobs, err := s.Generate()
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			fmt.Fprintf(&b, "# %s\nid,submit_s,submit_time,gpus,duration_s,vc\n", s)
			for _, j := range jobs {
				fmt.Fprintf(&b, "%s,%.0f,%s,%d,%.0f,%s\n", j.ID, j.Submit.Seconds(), j.SubmitTime.Format(time.RFC3339), j.GPUs, j.Duration.Seconds(), j.VC)
			}
			path := filepath.Join("testdata", "synthetic-"+mix+".golden.csv")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(want, b.Bytes()) {
				t.Errorf("generated jobs differ from %s (run with -update after an intended change):\n%s", path, b.Bytes())
			}
		})
	}
}

// TestSyntheticDeterministic: the same workload twice is the same jobs;
// another seed is another workload.
func TestSyntheticDeterministic(t *testing.T) {
	s := Synthetic{Jobs: 500, Seed: 4, Load: 0.82, GPUs: 128, Mix: MixPhilly}
	a, _ := s.Generate()
	b, _ := s.Generate()
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("two generations of the same workload differ")
	}
	s.Seed = 5
	c, _ := s.Generate()
	if fmt.Sprint(a) == fmt.Sprint(c) {
		t.Error("seeds 4 and 5 give the same workload")
	}
}

// TestSyntheticShape generates a large workload of each mix and measures
// it with Shapes: it has the statistics it was drawn from (over about 80 days: the
// weekly profile needs whole weeks), and exactly
// the offered load asked for.
func TestSyntheticShape(t *testing.T) {
	const n = 100000
	for name, tt := range map[string]struct {
		mix string
		sh  *shape
	}{"philly": {MixPhilly, &phillyShape}, "alibaba": {MixAlibaba, &alibabaShape}} {
		t.Run(name, func(t *testing.T) {
			s := Synthetic{Jobs: n, Seed: 11, Load: 1.3, GPUs: 256, Mix: tt.mix}
			jobs, err := s.Generate()
			if err != nil {
				t.Fatal(err)
			}
			if got := Stats(jobs, s.GPUs).OfferedLoad; math.Abs(got-s.Load) > 1e-3 {
				t.Errorf("offered load %.5f, want %g", got, s.Load)
			}
			for i := 1; i < len(jobs); i++ {
				if jobs[i].Submit < jobs[i-1].Submit {
					t.Fatalf("job %d submitted before job %d", i, i-1)
				}
			}
			got := Shapes(jobs, tt.sh.maxGroup)
			total := 0
			for _, c := range tt.sh.gpus {
				total += c
			}
			for g, c := range tt.sh.gpus {
				want := float64(c) / float64(total)
				if f := float64(got.GPUs[g]) / n; math.Abs(f-want) > 0.01 {
					t.Errorf("%d-GPU share %.4f, want %.4f", g, f, want)
				}
			}
			// The 1-GPU group's run times: the share at or under each of the
			// trace's quantiles within 0.01 of the quantile's level.
			var ones []float64
			for _, j := range jobs {
				if j.GPUs == 1 {
					ones = append(ones, j.Duration.Seconds())
				}
			}
			for i, p := range DurationQuantiles {
				w, under := tt.sh.durations[1][i], 0
				for _, d := range ones {
					if d < w {
						under++
					}
				}
				if f := float64(under) / float64(len(ones)); math.Abs(f-p) > 0.01 {
					t.Errorf("1-GPU run times under %.0f s: %.4f of them, trace %g", w, f, p)
				}
			}
			// The diurnal and weekly profiles within 0.15 of the trace's.
			for h := range 24 {
				if d := math.Abs(got.Hour[h] - tt.sh.hour[h]); d > 0.15 {
					t.Errorf("hour %d rate %.2f, trace %.2f", h, got.Hour[h], tt.sh.hour[h])
				}
			}
			for d := range 7 {
				if x := math.Abs(got.Weekday[d] - tt.sh.weekday[d]); x > 0.15 {
					t.Errorf("weekday %d rate %.2f, trace %.2f", d, got.Weekday[d], tt.sh.weekday[d])
				}
			}
			if tt.mix == MixPhilly && len(got.VCs) != len(tt.sh.vcs) {
				t.Errorf("%d VCs, want %d", len(got.VCs), len(tt.sh.vcs))
			}
		})
	}
}

// TestSyntheticShapesFromTraces measures the published traces with
// Shapes and wants the statistics the generator embeds: they come from
// the traces, and a change on either side shows here. Skipped where
// shared/traces is absent.
func TestSyntheticShapesFromTraces(t *testing.T) {
	for name, tt := range map[string]struct {
		rel, format string
		sh          *shape
	}{
		"philly":  {"philly/jobs-2017-10-11.csv", FormatPhilly, &phillyShape},
		"alibaba": {"alibaba-openb-2023/pods.csv", FormatAlibabaOpenB, &alibabaShape},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(tracesDir, tt.rel)); err != nil {
				t.Skipf("trace %s not present: %v", tt.rel, err)
			}
			jobs, err := Load(filepath.Join(tracesDir, tt.rel), tt.format)
			if err != nil {
				t.Fatal(err)
			}
			got := Shapes(jobs, tt.sh.maxGroup)
			if fmt.Sprint(got.GPUs) != fmt.Sprint(tt.sh.gpus) {
				t.Errorf("GPU counts %v, embedded %v", got.GPUs, tt.sh.gpus)
			}
			if len(got.Durations) != len(tt.sh.durations) {
				t.Errorf("%d run-time groups, embedded %d", len(got.Durations), len(tt.sh.durations))
			}
			for g, qs := range got.Durations {
				for i, q := range qs {
					if w := tt.sh.durations[g]; len(w) != len(qs) || w[i] != q.Seconds() {
						t.Errorf("group %d run-time quantile %g: trace %.0f s, embedded %v", g, DurationQuantiles[i], q.Seconds(), w)
						break
					}
				}
			}
			for h := range 24 {
				if math.Abs(got.Hour[h]-tt.sh.hour[h]) > 0.005 {
					t.Errorf("hour %d: trace %.3f, embedded %.2f", h, got.Hour[h], tt.sh.hour[h])
				}
			}
			for d := range 7 {
				if math.Abs(got.Weekday[d]-tt.sh.weekday[d]) > 0.005 {
					t.Errorf("weekday %d: trace %.3f, embedded %.2f", d, got.Weekday[d], tt.sh.weekday[d])
				}
			}
			if fmt.Sprint(got.VCs) != fmt.Sprint(tt.sh.vcs) && !(len(got.VCs) == 0 && len(tt.sh.vcs) == 0) {
				t.Errorf("VCs %v, embedded %v", got.VCs, tt.sh.vcs)
			}
		})
	}
	t.Run("vcs", func(t *testing.T) {
		vcs, err := ReadPhillyVCs(openTrace(t, "philly/vcs.csv"))
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(vcs) != fmt.Sprint(SyntheticVCs()) {
			t.Errorf("vcs.csv %v, embedded %v", vcs, SyntheticVCs())
		}
	})
}

func TestShapesPow2(t *testing.T) {
	for n, want := range map[int]int{0: 1, 1: 1, 2: 2, 3: 4, 12: 16, 16: 16, 24: 32} {
		if got := Pow2(n); got != want {
			t.Errorf("Pow2(%d) = %d, want %d", n, got, want)
		}
	}
}
