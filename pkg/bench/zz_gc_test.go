package bench

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

func TestExploreGC(t *testing.T) {
	if os.Getenv("GCX") == "" {
		t.Skip()
	}
	var msgs []events.Stored
	history(125, 400_000, func(e events.Event, at time.Time) error {
		subj, data, _, _ := events.Encode(e, events.Meta{Time: at})
		msgs = append(msgs, events.Stored{Seq: uint64(len(msgs) + 1), Subject: subj, Data: data, Time: at})
		return nil
	})
	for _, gc := range []int{100, 400, -1, 100} {
		debug.SetGCPercent(gc)
		runtime.GC()
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		st := domain.NewState()
		start, cpu := time.Now(), cpuTime()
		for _, m := range msgs {
			r, _ := events.Decode(m)
			st.Apply(r)
		}
		d, c := time.Since(start), cpuTime()-cpu
		runtime.ReadMemStats(&ms1)
		fmt.Printf("GOGC=%d: %.0f events/s, cpu %.1f µs/event, %d GCs, tasks %d\n", gc, float64(len(msgs))/d.Seconds(),
			float64(c.Microseconds())/float64(len(msgs)), ms1.NumGC-ms0.NumGC, len(st.Tasks))
		st = nil
	}
	debug.SetGCPercent(100)
}
