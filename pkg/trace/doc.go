// Package trace reads real GPU-cluster job traces into one shape, Job, for
// the trace simulator, the scheduler's benchmarks and the wait-estimate
// evaluation. The traces live in shared/traces (see its README.md); this
// package only reads them, and measures them.
//
// Formats:
//
//   - "philly": Microsoft Philly, jobs-2017-10-11.csv as re-published by the
//     Sia artifact. Columns submit_time ("YYYY-MM-DD HH:MM:SS", read as UTC),
//     duration_s (real run time, seconds, may be fractional), num_gpus, vc.
//     The file has no job id, status, run-time estimate or priority: ID is
//     "philly-" and the 1-based data-row number (zero-padded to 7 digits),
//     Status is empty. Submit is the offset from the earliest kept job, the
//     same normalisation as HeliosArtifact (submit_time − first submit_time).
//     vcs.csv (vc, nodes, gpus_per_node) gives each VC's node count.
//   - "alibaba-openb": Alibaba cluster-trace-gpu-v2023 (openb) pods.csv. Times
//     are integer seconds from the trace's own origin, so Submit is
//     creation_time as-is and SubmitTime is the zero time.Time. Duration is
//     deletion_time − scheduled_time, Wait (the real scheduling delay) is
//     scheduled_time − creation_time. GPUs is num_gpu, GPUMilli is gpu_milli
//     (thousandths of each GPU: 460 = 0.46 of one GPU), Status is pod_phase,
//     GPUModel is gpu_spec (empty in every row of the published file).
//     gpu_nodes.csv is read by ReadAlibabaNodes (export_test.go: only the
//     tests read it).
//
// Dropped rows. A row that parses but cannot be simulated is dropped and
// counted in Report.Dropped under the first reason that applies, in this
// order:
//
//   - DropZeroGPUs: zero GPUs requested. HeliosArtifact keeps GPU jobs only
//     (gpu_num > 0); in openb these are CPU-only pods.
//   - DropNotStarted: no start (philly: empty duration_s; openb: empty
//     scheduled_time, i.e. a pod still Pending when the trace was cut).
//   - DropNotEnded: openb only, empty deletion_time.
//   - DropNegativeWait: openb only, scheduled_time before creation_time.
//   - DropNegativeDuration: run time below zero.
//
// A row that does not parse (wrong field count, a non-number, negative GPU
// count, a missing column) is an error naming the line and column, never a
// silent drop. Jobs in VCs that a cluster configuration does not list are
// not dropped by the readers; HeliosArtifact drops them, and the tests'
// FilterVCs does the same.
//
// Every reader returns jobs sorted by Submit, then ID, so a trace always
// replays in the same order. The tests' Stats (measure_test.go) summarises
// a job list: count, span, GPU-hours and offered load against a given
// number of GPUs; their Shapes measures what a synthetic workload needs
// of a trace (GPU counts, run-time quantiles by size, arrivals by hour and
// weekday, VCs).
//
// Window (window.go) is a slice of a trace's submit times, [From,
// Until), for `gpuq sim --from/--until` and `--split`: ParseBound reads a
// bound (an RFC 3339 date, or an offset from the first submission), Split
// cuts a trace into calendar months or equal spans, every job in exactly
// one part.
//
// Synthetic generates a workload shaped like a published trace from
// those statistics alone (synthetic.go, with the figures and where each
// comes from), so that `gpuq sim --workload synthetic:…` needs no trace
// file. No job of a trace is kept in the code.
package trace
