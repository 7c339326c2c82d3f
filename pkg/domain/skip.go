package domain

// SkipCode says, for readers that decide on it, why a fold passed over a
// record (State.ApplyCoded); the text beside it is for people and logs and
// may be reworded.
type SkipCode string

// Codes of a skipped record.
const (
	// SkipUndecodable: the record is not an event this build can apply
	// (undecodable, invalid, unknown type or newer schema version).
	SkipUndecodable SkipCode = "undecodable"
	// SkipInvalidData: the event breaks a rule of its data that no
	// writer lets through (a submission's GPUs < 1, a GPU without a UUID).
	SkipInvalidData SkipCode = "invalid_data"
	// SkipUnknownTask: the event names a task never submitted.
	SkipUnknownTask SkipCode = "unknown_task"
	// SkipUnknownNode: the event names a node never seen.
	SkipUnknownNode SkipCode = "unknown_node"
	// SkipDuplicate: a submission of a task that exists already.
	SkipDuplicate SkipCode = "duplicate"
	// SkipState: the event contradicts the task's or node's state (first
	// in log order wins: a lost race, a duplicate report).
	SkipState SkipCode = "state"
	// SkipPlacement: a dispatch whose placements name GPUs that are
	// unknown, held or repeated: its writer broke the placement rule.
	SkipPlacement SkipCode = "placement"
	// SkipFenced: a decision of a deposed scheduler leader.
	SkipFenced SkipCode = "fenced"
	// SkipWrongNode: a lifecycle report from a node the task is not on.
	SkipWrongNode SkipCode = "wrong_node"
)
