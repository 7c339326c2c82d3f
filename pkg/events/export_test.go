package events

import "reflect"

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

// Registered is a zero value of every type Decode knows (taskTypes and
// nodeTypes), by wire name.
func Registered() map[Type]Event {
	out := make(map[Type]Event, len(taskTypes)+len(nodeTypes))
	for _, types := range []map[Type]func() Event{taskTypes, nodeTypes} {
		for t, mk := range types {
			out[t] = deref(mk())
		}
	}
	return out
}

// WireNames is wireNames of v's struct type.
func WireNames(v any) []string { return appendWireNames(nil, reflect.TypeOf(v)) }

// SetUpcasts replaces t's upcast steps for a test (VersionOf(t) becomes
// SchemaVersion + len(steps)); restore puts the build's back. Tests that
// call it must not run in parallel with others that decode t.
func SetUpcasts(t Type, steps ...Upcast) (restore func()) {
	old, had := upcasts[t]
	upcasts[t] = steps
	return func() {
		if had {
			upcasts[t] = old
		} else {
			delete(upcasts, t)
		}
	}
}

// Upcasts is the number of steps each type has in this build.
func Upcasts() map[Type]int {
	out := map[Type]int{}
	for t, s := range upcasts {
		out[t] = len(s)
	}
	return out
}

// IsTaskType reports whether t is published on a task subject.
func IsTaskType(t Type) bool { _, ok := taskTypes[t]; return ok }
