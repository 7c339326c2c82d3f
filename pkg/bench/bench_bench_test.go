package bench

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
)

// The Go benchmarks of `make bench`. Each reports gpuq's rate beside the
// raw JetStream rate measured in the same benchmark, and their ratio (a
// ReportMetric): speed is measured against the server, never asserted.

// BenchmarkIngest: ns/op is one validated submit (Ingest, on a fresh
// server); b.N raw async publishes with message ids run first, on a fresh
// server of their own, outside the timer.
func BenchmarkIngest(b *testing.B) {
	ctx := context.Background()
	b.StopTimer()
	raw, err := RawPublish(ctx, b.TempDir(), b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	ing, err := Ingest(ctx, b.TempDir(), b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(ing.PerS(), "submits/s")
	b.ReportMetric(raw.PerS(), "raw-publishes/s")
	b.ReportMetric(ratio(ing.PerS(), raw.PerS()), "ingest_vs_raw")
	b.ReportMetric(ratio(float64(raw.CPUPerOp()), float64(ing.CPUPerOp())), "ingest_vs_raw_cpu")
}

// BenchmarkFold: ns/op is one fold (ReadAll + Apply) of a log of 100,000
// gpuq events; before each, outside the timer, the raw replay of the same
// log with an ordered consumer.
func BenchmarkFold(b *testing.B) {
	const total = 100_000
	ctx := context.Background()
	nd, err := startNode(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer nd.close()
	if _, _, err := writeHistory(ctx, nd, 125, total); err != nil {
		b.Fatal(err)
	}
	var raw, fold Rate
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r, err := rawReplay(ctx, nd.log.JetStream(), total)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		f, _, _, err := foldLog(ctx, nd.log)
		if err != nil {
			b.Fatal(err)
		}
		raw, fold = add(raw, r), add(fold, f)
	}
	b.StopTimer()
	b.ReportMetric(fold.PerS(), "fold-events/s")
	b.ReportMetric(raw.PerS(), "raw-replay/s")
	b.ReportMetric(ratio(fold.PerS(), raw.PerS()), "fold_vs_raw")
	b.ReportMetric(ratio(float64(raw.CPUPerOp()), float64(fold.CPUPerOp())), "fold_vs_raw_cpu")
}

func add(a, b Rate) Rate {
	return Rate{N: a.N + b.N, Bytes: a.Bytes + b.Bytes, Took: a.Took + b.Took, CPU: a.CPU + b.CPU}
}

// BenchmarkLifecycle: ns/op is one task submitted, dispatched, started
// and completed on 1,000 GPUs (Lifecycle, on a fresh server), with this
// package's test scheduler (gpuq bench --only lifecycle measures
// services/scheduler). Before it,
// outside the timer and on a fresh server of its own, 4 × b.N raw async
// publishes with message ids: a task is four de-duplicated appends, so
// raw/4 is what the appends alone allow (lifecycle_vs_raw4 is the share of
// it reached; the _cpu variant compares CPU time per task).
func BenchmarkLifecycle(b *testing.B) {
	ctx := context.Background()
	b.StopTimer()
	raw, err := RawPublish(ctx, b.TempDir(), 4*b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	r, err := Lifecycle(ctx, b.TempDir(), LifecycleOptions{Tasks: b.N, Nodes: 125, Scheduler: testScheduler})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(r.PerS(), "tasks/s")
	b.ReportMetric(raw.PerS(), "raw-publishes/s")
	b.ReportMetric(ratio(r.PerS(), raw.PerS()/4), "lifecycle_vs_raw4")
	b.ReportMetric(float64(r.CPU.Microseconds())/float64(b.N), "cpu-µs/task")
	b.ReportMetric(4*float64(raw.CPUPerOp().Nanoseconds())/1e3, "raw-cpu-µs/4-appends")
	b.ReportMetric(float64(r.Passes), "passes")
}

// BenchmarkPlacement: ns/op is one event (a completion, a pass, its
// dispatches folded) with 100,000 tasks queued on 1,000 × 8 busy GPUs;
// building the state is outside the timer.
func BenchmarkPlacement(b *testing.B) {
	r, err := Placement(context.Background(), PlacementOptions{Nodes: 1000, PerNode: 8, Queued: 100_000, Events: b.N, Ready: b.ResetTimer})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(r.PerS(), "placements/s")
	b.ReportMetric(float64(r.P99)/float64(time.Millisecond), "p99-ms")
	b.ReportMetric(r.BytesPerQueuedTask, "B/queued-task")
	b.ReportMetric(r.BurstPerS(), "burst-placements/s")
}

// BenchmarkCodec: events.Decode and events.Encode on the events of the
// fold's log (ns/op is one event), and the envelope alone, which Decode
// unmarshals before the payload. Run it with GOEXPERIMENT=jsonv2 to see
// what the standard library's new JSON implementation changes.
func BenchmarkCodec(b *testing.B) {
	var msgs []events.Stored
	if err := history(4, 4004, func(e events.Event, at time.Time) error {
		subj, data, _, err := events.Encode(e, events.Meta{Time: at})
		msgs = append(msgs, events.Stored{Seq: uint64(len(msgs) + 1), Subject: subj, Data: data, Time: at})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	msgs = msgs[4:] // the tasks' events, not the nodes'
	recs := make([]events.Record, len(msgs))
	for i, m := range msgs {
		r, err := events.Decode(m)
		if err != nil {
			b.Fatal(err)
		}
		recs[i] = r
	}
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := events.Decode(msgs[i%len(msgs)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-envelope", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var env events.Envelope
			if err := json.Unmarshal(msgs[i%len(msgs)].Data, &env); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		at := time.Now()
		for i := 0; i < b.N; i++ {
			if _, _, _, err := events.Encode(recs[i%len(recs)].Event, events.Meta{Time: at}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
