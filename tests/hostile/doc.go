// Package hostile is gpuq's hostile suite (`make test-hostile`, run by
// .ci/run): what a hostile or careless caller sends to `bin/gpuq dev`,
// with and without --auth, one case per finding of issue #22. It is
// black-box: real `gpuq dev` processes, HTTP with net/http (what curl or
// a web page sends), NATS with nats.go or the gpuq CLI, and the process's
// memory read from /proc. It imports nothing of gpuq's, so it checks the
// wire contract (status codes, exit codes, the error's `field`, states)
// and not the code's types. See docs/faults.md, "Hostile suite".
//
// The build tag keeps `make test` from running it: it needs the binary
// that `make test-hostile` builds ($GPUQ_HOSTILE_BIN, default bin/gpuq).
package hostile
