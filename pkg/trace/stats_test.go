package trace

import (
	"math"
	"testing"
	"time"
)

func TestStats(t *testing.T) {
	h := time.Hour
	tests := []struct {
		name      string
		jobs      []Job
		totalGPUs int
		want      Summary
	}{
		{name: "empty", jobs: nil, totalGPUs: 8, want: Summary{TotalGPUs: 8}},
		{
			name: "load one half",
			// 10 h window on 4 GPUs = 40 GPU-h offered; 1×10 h + 2×5 h = 20 GPU-h demanded.
			jobs:      []Job{{Submit: 10 * h, Duration: 5 * h, GPUs: 2}, {Submit: 0, Duration: 10 * h, GPUs: 1}},
			totalGPUs: 4,
			want: Summary{Jobs: 2, TotalGPUs: 4, First: 0, Last: 10 * h, Span: 10 * h, GPUHours: 20,
				OfferedLoad: 0.5, MedianDuration: 5 * h, P99Duration: 10 * h, MaxGPUs: 2},
		},
		{
			name:      "zero span has no load",
			jobs:      []Job{{Submit: h, Duration: h, GPUs: 1}},
			totalGPUs: 1,
			want: Summary{Jobs: 1, TotalGPUs: 1, First: h, Last: h, GPUHours: 1,
				MedianDuration: h, P99Duration: h, MaxGPUs: 1},
		},
		{
			name:      "no GPUs has no load",
			jobs:      []Job{{Submit: 0, Duration: h, GPUs: 1}, {Submit: h, Duration: h, GPUs: 1}},
			totalGPUs: 0,
			want: Summary{Jobs: 2, Last: h, Span: h, GPUHours: 2,
				MedianDuration: h, P99Duration: h, MaxGPUs: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Stats(tt.jobs, tt.totalGPUs)
			if math.Abs(got.OfferedLoad-tt.want.OfferedLoad) > 1e-12 || math.Abs(got.GPUHours-tt.want.GPUHours) > 1e-9 {
				t.Errorf("load %v GPU-h %v, want %v %v", got.OfferedLoad, got.GPUHours, tt.want.OfferedLoad, tt.want.GPUHours)
			}
			got.OfferedLoad, got.GPUHours = tt.want.OfferedLoad, tt.want.GPUHours
			if got != tt.want {
				t.Errorf("Stats = %+v\nwant    %+v", got, tt.want)
			}
		})
	}
}
