package sim

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/trace"
)

func TestParseEstimateModel(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    EstimateModel
		wantErr string
	}{
		"standard":       {in: "lognormal:mu=0.7,sigma=1,seed=1", want: EstimateModel{Mu: 0.7, Sigma: 1, Seed: 1}},
		"defaults":       {in: "lognormal", want: EstimateModel{Sigma: 1, Seed: 1}},
		"any order":      {in: "lognormal:seed=9, sigma=0.5 ,mu=-0.2", want: EstimateModel{Mu: -0.2, Sigma: 0.5, Seed: 9}},
		"exact":          {in: "exact", want: EstimateModel{Exact: true}},
		"unknown kind":   {in: "normal:mu=1", wantErr: "want exact or lognormal"},
		"unknown key":    {in: "lognormal:mean=1", wantErr: `unknown key "mean"`},
		"negative sigma": {in: "lognormal:sigma=-1", wantErr: "sigma must be ≥ 0"},
		"not a number":   {in: "lognormal:mu=x", wantErr: "mu must be a number"},
		"bad seed":       {in: "lognormal:seed=-1", wantErr: "seed must be a non-negative integer"},
		"key twice":      {in: "lognormal:mu=1,mu=2", wantErr: "given twice"},
		"missing value":  {in: "lognormal:mu=", wantErr: "want key=value"},
		"infinite":       {in: "lognormal:mu=inf", wantErr: "mu must be a number"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseEstimateModel(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			back, err := ParseEstimateModel(got.String())
			if err != nil || back != got {
				t.Errorf("String %q reads back as %+v, %v", got.String(), back, err)
			}
		})
	}
}

func TestParseClassMix(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    ClassMix
		wantErr string
	}{
		"empty is all medium": {in: "", want: ClassMix{}},
		"medium":              {in: "medium", want: ClassMix{}},
		"four classes": {in: "critical=0.05,high=0.15,medium=0.6,low=0.2,seed=2",
			want: ClassMix{Shares: map[domain.Priority]float64{domain.Critical: 0.05, domain.High: 0.15, domain.Medium: 0.6, domain.Low: 0.2}, Seed: 2}},
		"two classes, default seed": {in: "high=0.5,low=0.5",
			want: ClassMix{Shares: map[domain.Priority]float64{domain.High: 0.5, domain.Low: 0.5}, Seed: 1}},
		"not adding up": {in: "high=0.5,low=0.4", wantErr: "add up to 0.9"},
		"unknown class": {in: "urgent=1", wantErr: `unknown key "urgent"`},
		"share above 1": {in: "high=1.5,low=-0.5", wantErr: "between 0 and 1"},
		"not key=value": {in: "high", wantErr: "want key=value"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseClassMix(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			back, err := ParseClassMix(got.String())
			if err != nil || !cmp.Equal(back, got) {
				t.Errorf("String %q reads back as %+v, %v", got.String(), back, err)
			}
		})
	}
}

func TestPrepare(t *testing.T) {
	h := time.Hour
	jobs := []trace.Job{
		{ID: "a", VC: "x", Submit: 0, Duration: h, GPUs: 1},
		{ID: "big", VC: "x", Submit: h, Duration: h, GPUs: 64},
		{ID: "b", VC: "y", Submit: 2 * h, Duration: time.Second, GPUs: 8},
		{ID: "c", VC: "", Submit: 3 * h, Duration: 2 * h, GPUs: 2},
	}
	t.Run("exact estimates, one team", func(t *testing.T) {
		got, unplaceable := Prepare(jobs, 16, EstimateModel{Exact: true}, ClassMix{}, false)
		want := []Task{
			{ID: "a", VC: "x", Team: SingleTeam, Priority: domain.Medium, Submit: 0, Duration: h, GPUs: 1, Hours: 1},
			{ID: "b", VC: "y", Team: SingleTeam, Priority: domain.Medium, Submit: 2 * h, Duration: time.Second, GPUs: 8, Hours: 1.0 / 60},
			{ID: "c", VC: "", Team: SingleTeam, Priority: domain.Medium, Submit: 3 * h, Duration: 2 * h, GPUs: 2, Hours: 2},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if unplaceable != 1 {
			t.Errorf("unplaceable %d, want 1 (the 64-GPU job on 16 GPUs)", unplaceable)
		}
	})
	t.Run("lognormal draws do not depend on dropped jobs", func(t *testing.T) {
		em := EstimateModel{Mu: 0.7, Sigma: 1, Seed: 1}
		all, _ := Prepare(jobs, 64, em, ClassMix{}, true)
		some, _ := Prepare(jobs, 16, em, ClassMix{}, true)
		if all[0].Hours != some[0].Hours || all[3].Hours != some[2].Hours {
			t.Errorf("estimates shift when a job is dropped: %+v vs %+v", all, some)
		}
		if all[0].Team != "x" || all[3].Team != SingleTeam {
			t.Errorf("teams %q %q, want the VC, or %q without one", all[0].Team, all[3].Team, SingleTeam)
		}
		// The ratio estimate/duration is e^(0.7 + z), z standard normal.
		for _, tk := range all {
			r := tk.Hours * 3600 / tk.Duration.Seconds()
			if tk.Duration > time.Minute && (r <= 0 || math.IsNaN(r)) {
				t.Errorf("%s: ratio %v", tk.ID, r)
			}
		}
	})
	t.Run("class mix is seeded", func(t *testing.T) {
		cm := ClassMix{Shares: map[domain.Priority]float64{domain.Critical: 0.5, domain.Low: 0.5}, Seed: 4}
		a, _ := Prepare(jobs, 64, EstimateModel{Exact: true}, cm, false)
		b, _ := Prepare(jobs, 64, EstimateModel{Exact: true}, cm, false)
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("two draws differ:\n%s", diff)
		}
		for _, tk := range a {
			if tk.Priority != domain.Critical && tk.Priority != domain.Low {
				t.Errorf("%s: class %s not in the mix", tk.ID, tk.Priority)
			}
		}
	})
}

func TestTeamsByVC(t *testing.T) {
	ts := TeamsByVC(map[string]int{"6214e9": 64, "7f04ca": 32, "11cb48": 16, "b436b2": 64, "ee9e8c": 64, "e13805": 16,
		"6c71a0": 32, "2869ce": 16, "ed69ec": 8, "103959": 8, "0e4a51": 32, "empty": 0})
	if err := ts.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(ts) != 11 {
		t.Errorf("%d teams, want 11 (a VC without nodes gets no guarantee)", len(ts))
	}
	if g := ts["6214e9"].Share; math.Abs(g-64.0/352) > 1e-9 {
		t.Errorf("6214e9 share %v, want 64/352", g)
	}
}
