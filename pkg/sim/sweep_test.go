package sim

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteSweepPlots draws a hand-made sweep: the wait and JCT charts
// always, the by-class chart only with classes; each file is well-formed
// SVG with a line per policy and figure, and the 2 h reference line.
func TestWriteSweepPlots(t *testing.T) {
	entry := func(nodes int, wait float64, classes bool) SweepEntry {
		m := Metrics{AvgQueue: wait, P95Queue: 3 * wait, AvgJCT: wait + 3600, P95JCT: 3*wait + 7200}
		if classes {
			m.ByClass = map[string]ClassMetrics{"low": {N: 5, P95Queue: 4 * wait}, "medium": {N: 10, P95Queue: 2 * wait}}
		}
		return SweepEntry{Nodes: nodes, Result: Result{Scenario: Scenario{Nodes: nodes, GPUsPerNode: 8, TotalGPUs: 8 * nodes},
			Policies: map[string]Metrics{GPUQ: m, FIFOStrict: m}}}
	}
	tests := map[string]struct {
		classes bool
		want    map[string][]string // file → legend entries it must have
	}{
		"one class": {want: map[string][]string{
			PlotSweepWait: {"gpuq p95 queue", "gpuq avg queue", "fifo-strict p95 queue", "2 h"},
			PlotSweepJCT:  {"gpuq p95 JCT", "fifo-strict avg JCT"},
		}},
		"classes": {classes: true, want: map[string][]string{
			PlotSweepWait:        {"gpuq p95 queue"},
			PlotSweepJCT:         {"gpuq avg JCT"},
			PlotSweepWaitByClass: {"gpuq low p95 queue", "gpuq medium p95 queue", "fifo-strict low p95 queue", "2 h"},
		}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			sw := SweepResult{Sweep: []SweepEntry{entry(2, 20000, tt.classes), entry(4, 3000, tt.classes), entry(8, 0, tt.classes)}}
			files, err := WriteSweepPlots(dir, sw, []string{GPUQ, FIFOStrict})
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != len(tt.want) {
				t.Errorf("wrote %v, want %d files", files, len(tt.want))
			}
			for f, legend := range tt.want {
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := xml.Unmarshal(b, new(struct{})); err != nil {
					t.Errorf("%s is not well-formed: %v", f, err)
				}
				for _, l := range legend {
					if !strings.Contains(string(b), ">"+l+"<") {
						t.Errorf("%s has no %q in its legend", f, l)
					}
				}
			}
		})
	}
}
