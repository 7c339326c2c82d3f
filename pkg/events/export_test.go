package events

// DecodeSlow is Decode with encoding/json only: the reference for the fast
// decoder.
var DecodeSlow = decodeSlow

// DecodeFast is the fast decoder alone; ok is false where it gives up.
func DecodeFast(m Stored) (Record, bool) { return newDecoder().decode(m) }
