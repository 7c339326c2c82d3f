// Package bench measures gpuq against the JetStream it runs on, in one run:
// the raw rates of the server (async publish with message ids, ordered
// replay) next to what gpuq does with the same server (validated submits,
// the fold, the whole task lifecycle, a cold restart), and the pure
// placement policy on a large cluster. `gpuq bench` prints the results;
// docs/performance.md explains them.
//
// Every JetStream measurement starts its own embedded nats-server (file
// store in a fresh temporary directory, no listener) and connects in
// process, as `gpuq dev` does. Rates are reported with the raw rate of the
// same run beside them: speed is measured, never asserted, and no test in
// this package fails on wall-clock time. Goals are information
// (Result.Goals), not errors.
package bench
