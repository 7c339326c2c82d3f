// Package advisor folds the event log like every other service and tells
// each waiting person when their task will start, why it waits and what to
// do meanwhile, on gpuq.advice.<task_id> (a stream of its own, the latest
// message per task). It publishes only when the advice changes materially,
// not on every event or tick.
package advisor
