// Package audit answers questions about the past from the log alone: the
// queue as it was at any sequence or time (Replay), why a task waited
// (Explain), whether any rule was ever broken (Verify), a digest of the
// folded state that an archive and an import must reproduce (Digest), and
// the archive format of `gpuq audit export` and `import` (archive.go).
//
// Everything here is pure: a function of records already read, the one
// policy (pkg/policy) and its options. Nothing reads NATS or the clock;
// the CLI reads the log and hands the records in. The fold is
// domain.State.Apply, the same as every service's, with the scheduler's
// run-time predictor (pkg/estimate) learning from completed tasks as the
// fold goes, so the policy sees at each sequence what the live scheduler
// saw there.
package audit
