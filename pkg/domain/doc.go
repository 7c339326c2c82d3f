// Package domain owns gpuq's nouns — Task, Priority, Node, GPU — and the
// pure fold State.Apply that turns the event log into state. Apply is a type
// switch over facts: no validation, no errors, no I/O, no clock. Validation
// of what people submit (Validate*) happens before an event is appended.
//
// Unknown events (types or schema versions this build does not know) are
// skipped and counted in State.Skipped, so an old reader survives a newer
// writer. A fact that contradicts the state (e.g. a dispatch onto a GPU that
// is already held) is ignored by the same rule everywhere — first in log
// order wins — and counted in State.Ignored, so every fold of the same log
// gives the same state.
package domain
