package events

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// A long ReadAll, a service folding the log on start, makes the garbage
// collector run less often. The fold's heap only grows (the state of every
// task read so far) while each record read leaves about 2 KB of garbage
// behind (the client's copy of the message, the decoded event); with the
// default GOGC=100 a collection comes every time the garbage reaches the
// live heap, and each one marks the whole live heap again. Folding the
// bench's log of 1M events took 5 or 6 collections marking up to 473 MB
// and 6.6M objects each (the embedded server's included), from a fifth to
// over half of the fold's CPU time (docs/performance.md).
//
// So, while a ReadAll past pipelineAfter messages runs, the GC target is
// raised to readGCPercent, but never so far that the heap may grow more
// than readGCHeadroom beyond the live heap (live × GOGC/100 ≤ headroom;
// a live heap over headroom keeps the default), nor, under a memory limit
// (GOMEMLIMIT, debug.SetMemoryLimit), by more than half of what is left
// below the limit; it is set back when the last such ReadAll of the
// process returns. Only the default of 100 is raised (an explicit
// GOGC=100 is the default): a process with a target of its own (GOGC,
// debug.SetGCPercent) keeps it, and a change made by someone else during
// the read is left as it is — unless they set exactly the value the reads
// set, which cannot be told apart (the reads then set the default back).
// The target is read from runtime/metrics, never by setting it.
const (
	readGCPercent  = 400
	readGCHeadroom = 2 << 30
	// readGCEvery is how many batches ReadAll sends between two
	// looks at the live heap.
	readGCEvery = 16
	// defaultGCPercent is the runtime's GOGC when nobody set one.
	defaultGCPercent = 100
)

// readGC is the process's GC target control shared by concurrent reads.
var readGC struct {
	sync.Mutex
	readers int
	own     bool // the readers raised the default and may change it
	set     int  // what they last set
}

// gcEnter is called when a long read starts and gcLeave when it ends.
func gcEnter() {
	readGC.Lock()
	if readGC.readers == 0 {
		readGC.own, readGC.set = gcPercent() == defaultGCPercent, defaultGCPercent
	}
	readGC.readers++
	readGC.Unlock()
	gcAdjust()
}

// gcAdjust sets the target from the live heap of the last collection.
func gcAdjust() {
	readGC.Lock()
	defer readGC.Unlock()
	if !readGC.own {
		return
	}
	if gcPercent() != readGC.set {
		readGC.own = false // someone else set it meanwhile: theirs stays
		return
	}
	want := readGCTarget(heapLive(), memoryLimit())
	if want == readGC.set {
		return
	}
	debug.SetGCPercent(want)
	readGC.set = want
}

func gcLeave() {
	readGC.Lock()
	defer readGC.Unlock()
	readGC.readers--
	if readGC.readers > 0 || !readGC.own {
		return
	}
	readGC.own = false
	if gcPercent() == readGC.set && readGC.set != defaultGCPercent {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// readGCTarget is the GC percent for a live heap of live bytes under a
// memory limit of limit bytes (math.MaxInt64: none): at most
// readGCPercent; growth beyond live at most readGCHeadroom and at most
// half of what the limit leaves; at least the default.
func readGCTarget(live uint64, limit int64) int {
	room := uint64(readGCHeadroom)
	if limit < math.MaxInt64 {
		if limit <= 0 || uint64(limit) <= live {
			return defaultGCPercent
		}
		room = min(room, (uint64(limit)-live)/2)
	}
	if live == 0 {
		if limit < math.MaxInt64 {
			return defaultGCPercent // nothing known yet to size the growth by
		}
		return readGCPercent
	}
	return int(min(max(room*100/live, defaultGCPercent), readGCPercent))
}

// gcPercent is the GC target (GOGC) now; -1 when off.
func gcPercent() int {
	s := [1]metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s[:])
	if s[0].Value.Kind() != metrics.KindUint64 {
		return defaultGCPercent
	}
	return int(int64(s[0].Value.Uint64()))
}

// memoryLimit is the runtime's soft memory limit (math.MaxInt64: none).
func memoryLimit() int64 { return debug.SetMemoryLimit(-1) }

// heapLive is the heap the last collection found live (0 before the first).
func heapLive() uint64 {
	s := [1]metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s[:])
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
