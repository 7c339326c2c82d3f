// Package events owns gpuq's facts: one Go type per event, their stable wire
// names and subjects, the envelope and codec, the JetStream stream
// definitions, and the Log port every service reads and appends through.
//
// Wire names are constants and never derived from Go type names; renaming a
// type must not change a subject. Enumerations grow only at the end.
//
// Subjects (public API):
//
//	gpuq.task.<task_id>.<event>   submitted amended cancelled checklist_updated
//	                              dispatched started preempt_requested checkpointed
//	                              preempted requeued completed failed progress_reported
//	gpuq.node.<node>.<event>      available unhealthy drained lost
//	gpuq.advice.<task_id>         the latest advice for a task (separate stream)
//
// Adapters of the Log port live in events/memlog and events/jetstream and
// pass the same conformance suite (events/logtest).
package events
