package events

import "fmt"

// Schema evolution. Every envelope carries the version of its payload's
// schema ("v"); a record without one, or with 0, is version 1 (the first
// records were written without it). A type's schema changes by one
// version at a time, and each change comes with one Upcast: the function
// that rewrites a payload of the old version into the new one. Decode
// applies the steps in turn, so that every record, whatever version it
// was written at, decodes into today's struct; a version newer than this
// build's is Unknown (skipped and counted, never an error), as is an
// unknown type. docs/events.md says how to add a field (no new version)
// and how to change one (a new version and its step).

// Upcast rewrites the JSON payload of one version of an event type into
// the next version's. It gets a copy it may change and return; an error
// makes the record undecodable (an Invalid record in a fold).
type Upcast func(data []byte) ([]byte, error)

// upcasts holds each type's steps: upcasts[t][i] turns version i+1 of t
// into version i+2. A type without steps is at version 1. Nothing in gpuq
// has changed a field's meaning or name since the log's first format, so
// the registry is empty; the mechanism is exercised by upcast_test.go with
// steps registered for the test alone.
var upcasts = map[Type][]Upcast{}

// VersionOf is the version of t's schema that this build writes (and the
// newest it reads): SchemaVersion plus one for each registered step.
func VersionOf(t Type) int { return SchemaVersion + len(upcasts[t]) }

// upcast brings the payload of type t, written at version v, to
// VersionOf(t), step by step. v must be between 1 and VersionOf(t).
func upcast(t Type, v int, data []byte) ([]byte, error) {
	steps := upcasts[t]
	for i := v - SchemaVersion; i < len(steps); i++ {
		out, err := steps[i](append([]byte(nil), data...))
		if err != nil {
			return nil, fmt.Errorf("upcast %s v%d → v%d: %w", t, i+SchemaVersion, i+SchemaVersion+1, err)
		}
		data = out
	}
	return data, nil
}

// storedVersion is the version a record was written at: an absent or zero
// "v" is version 1.
func storedVersion(v int) int {
	if v == 0 {
		return SchemaVersion
	}
	return v
}
