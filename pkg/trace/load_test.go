package trace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	philly := write("jobs.csv", phillyHeader+"2017-10-01 00:00:00,10,1,a\n")
	pods := write("pods.csv", podsHeader+"p,0,0,1,1000,,LS,Running,3,10,4\n")
	bad := write("bad.csv", phillyHeader+"2017-10-01 00:00:00,10,x,a\n")

	tests := []struct {
		name     string
		path     string
		format   string
		want     []Job
		contains string // wanted error text; "" = no error
	}{
		{name: "philly", path: philly, format: "philly",
			want: []Job{{ID: "philly-0000001", VC: "a", SubmitTime: utc("2017-10-01 00:00:00"), Duration: 10 * time.Second, GPUs: 1, GPUMilli: 1000}}},
		{name: "alibaba-openb", path: pods, format: "alibaba-openb",
			want: []Job{{ID: "p", Submit: 3 * time.Second, Duration: 6 * time.Second, GPUs: 1, Status: "Running", GPUMilli: 1000, Wait: time.Second, QoS: "LS"}}},
		{name: "unknown format names allowed ones", path: philly, format: "slurm", contains: `unknown format "slurm" (want "philly" or "alibaba-openb")`},
		{name: "wrong format for file", path: philly, format: "alibaba-openb", contains: `lacks column "name"`},
		{name: "missing file", path: filepath.Join(dir, "nope.csv"), format: "philly", contains: "no such file"},
		{name: "malformed file names path and line", path: bad, format: "philly", contains: "bad.csv: trace: philly line 2, column 3 (num_gpus)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(tt.path, tt.format)
			if tt.contains != "" {
				if err == nil || !strings.Contains(err.Error(), tt.contains) {
					t.Fatalf("error %v, want one containing %q", err, tt.contains)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := Load(bad, "philly"); !errors.As(err, new(*ParseError)) {
		t.Errorf("Load error %v does not unwrap to *ParseError", err)
	}
}

func TestFilterVCsAndByVC(t *testing.T) {
	jobs := []Job{{ID: "1", VC: "a"}, {ID: "2", VC: "x"}, {ID: "3", VC: "b"}, {ID: "4", VC: "a"}}
	kept, dropped := FilterVCs(jobs, map[string]int{"a": 1, "b": 2})
	if dropped != 1 || len(kept) != 3 || kept[0].ID != "1" || kept[1].ID != "3" || kept[2].ID != "4" {
		t.Errorf("FilterVCs = %v, %d", kept, dropped)
	}
	by := ByVC(kept)
	if len(by) != 2 || len(by["a"]) != 2 || by["a"][1].ID != "4" || len(by["b"]) != 1 {
		t.Errorf("ByVC = %v", by)
	}
}
