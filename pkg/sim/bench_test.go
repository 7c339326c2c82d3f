package sim

import (
	"context"
	"testing"
)

// BenchmarkGPUQEstimates: the gpuq policy with its three estimates at
// every submission over the first 5,000 Philly jobs of the standard
// scenario (72 × 8 GPUs), with the estimator's forward simulations on one
// goroutine and on GOMAXPROCS workers. ns/op is one whole run; the
// per-submission figure is reported beside it.
func BenchmarkGPUQEstimates(b *testing.B) {
	em, err := ParseEstimateModel(DefaultEstimateModel)
	if err != nil {
		b.Fatal(err)
	}
	tasks, _ := Prepare(phillySlice(b, 5000), 72*8, em, ClassMix{}, false)
	for _, bc := range []struct {
		name    string
		workers int
	}{{"workers=1", 1}, {"workers=GOMAXPROCS", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := Config{Nodes: 72, GPUsPerNode: 8, Policies: []string{GPUQ}, Estimates: true, Epoch: epoch, EstimateWorkers: bc.workers}
			for i := 0; i < b.N; i++ {
				if _, err := Run(context.Background(), cfg, Scenario{}, tasks); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(tasks)), "µs/submission")
		})
	}
}
