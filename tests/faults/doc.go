// Package faults is gpuq's process-level fault suite (`make test-faults`):
// a real nats-server and every service run as their own processes, built
// from this checkout, and each scenario breaks something (kill -9,
// SIGSTOP, poison records, a NATS restart, a retry storm, skewed clocks)
// and then checks the properties on the event log itself. See
// docs/faults.md.
//
// The build tag keeps `make test` (go test on every module) from running
// it: it needs the binaries that `make test-faults` builds into
// $GPUQ_FAULTS_BIN.
package faults
