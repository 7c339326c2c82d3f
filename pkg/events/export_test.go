package events

// DecodeSlow is Decode with encoding/json only: the reference for the fast
// decoder.
var DecodeSlow = decodeSlow

// DecodeFast is the fast decoder alone; ok is false where it gives up.
func DecodeFast(m Stored) (Record, bool) { return newDecoder().decode(m) }

// ReadGCTarget is the GC percent a long ReadAll sets for a live heap.
var ReadGCTarget = readGCTarget

// ReadGC bounds: the most a long ReadAll raises GOGC to, and the most heap
// growth it allows beyond the live heap.
const (
	ReadGCPercent  = readGCPercent
	ReadGCHeadroom = readGCHeadroom
)
