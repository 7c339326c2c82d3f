package events_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/memlog"
)

// gcPercent is the process's GOGC, read without changing it.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// setGC sets GOGC for the test and puts the previous value back after it.
func setGC(t *testing.T, p int) {
	prev := debug.SetGCPercent(p)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
}

// completedLog is a memlog of n completed events.
func completedLog(t *testing.T, n int) events.Log {
	l := memlog.New()
	ctx := context.Background()
	at := time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)
	for i := 1; i <= n; i++ {
		if _, err := events.Append(ctx, l, events.Completed{TaskID: fmt.Sprintf("t%d", i), Node: "n1"}, events.Meta{Time: at}, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// TestReadAllGCTarget: a long read raises the default GC target within its
// bounds and sets it back when it returns, also when it fails; a short
// read, a target the process chose and a change made during the read are
// left alone.
func TestReadAllGCTarget(t *testing.T) {
	const n = 8000 // ReadAll looks at the live heap again after 1024 + 16 × 256 records
	l := completedLog(t, n)
	ctx := context.Background()
	errStop := errors.New("stop")
	cases := map[string]struct {
		gogc     int    // before the read
		from     uint64 // where it starts
		stopAt   uint64 // fn fails here; 0: never
		setAt    uint64 // fn sets GOGC to setTo here; 0: never
		setTo    int
		raised   bool // whether GOGC is above gogc at seq 7000 (when setAt is 0)
		wantLast int  // GOGC after the read
	}{
		"long read":                {gogc: 100, from: 1, raised: true, wantLast: 100},
		"long read that fails":     {gogc: 100, from: 1, stopAt: 7500, raised: true, wantLast: 100},
		"short read":               {gogc: 100, from: 7000, wantLast: 100},
		"the process's own GOGC":   {gogc: 150, from: 1, wantLast: 150},
		"GOGC set during the read": {gogc: 100, from: 1, setAt: 1500, setTo: 250, wantLast: 250},
		"GOGC off":                 {gogc: -1, from: 1, wantLast: -1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			setGC(t, tc.gogc)
			var at7000 int
			_, err := events.ReadAll(ctx, l, tc.from, "", func(r events.Record) error {
				switch r.Seq {
				case tc.setAt:
					debug.SetGCPercent(tc.setTo)
				case 7000:
					at7000 = gcPercent()
				}
				if r.Seq == tc.stopAt {
					return errStop
				}
				return nil
			})
			if tc.stopAt != 0 && !errors.Is(err, errStop) || tc.stopAt == 0 && err != nil {
				t.Fatalf("err = %v", err)
			}
			if raised := at7000 > tc.gogc; tc.setAt == 0 && (raised != tc.raised || at7000 > events.ReadGCPercent) {
				t.Errorf("GOGC %d during the read, from %d (raised: %v, want %v)", at7000, tc.gogc, raised, tc.raised)
			}
			if tc.setAt != 0 && at7000 != tc.setTo {
				t.Errorf("GOGC %d during the read after it was set to %d", at7000, tc.setTo)
			}
			if got := gcPercent(); got != tc.wantLast {
				t.Errorf("GOGC %d after the read, want %d", got, tc.wantLast)
			}
		})
	}
}

// panicLog is a log whose Read panics after delivering after messages,
// on the reading goroutine (a failing adapter).
type panicLog struct {
	events.Log
	after int
}

func (l panicLog) Read(ctx context.Context, from uint64, filter string, fn func(events.Stored) error) (uint64, error) {
	n := 0
	return l.Log.Read(ctx, from, filter, func(s events.Stored) error {
		if n++; n > l.after {
			panic("adapter")
		}
		return fn(s)
	})
}

// TestReadAllGCTargetPanic: a long read whose log panics, the panic
// recovered by the caller, still sets the target back.
func TestReadAllGCTargetPanic(t *testing.T) {
	setGC(t, 100)
	l := panicLog{Log: completedLog(t, 3000), after: 2000}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("no panic")
			}
		}()
		_, _ = events.ReadAll(context.Background(), l, 1, "", func(events.Record) error { return nil })
	}()
	if got := gcPercent(); got != 100 {
		t.Errorf("GOGC %d after a read that panicked, want 100", got)
	}
}

// TestReadAllGCTargetConcurrent: overlapping long reads set the default
// back once the last of them returns.
func TestReadAllGCTargetConcurrent(t *testing.T) {
	setGC(t, 100)
	l := completedLog(t, 3000)
	ctx := context.Background()
	const readers = 3
	var (
		wg      sync.WaitGroup
		overlap sync.WaitGroup // every reader is past pipelineAfter
		mu      sync.Mutex
		during  []int
	)
	overlap.Add(readers)
	for i := 0; i < readers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := events.ReadAll(ctx, l, 1, "", func(r events.Record) error {
				if r.Seq == 1500 {
					overlap.Done()
					overlap.Wait()
					mu.Lock()
					during = append(during, gcPercent())
					mu.Unlock()
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, p := range during {
		if p <= 100 {
			t.Errorf("GOGC %d while %d reads overlapped", p, readers)
		}
	}
	if got := gcPercent(); got != 100 {
		t.Errorf("GOGC %d after the reads, want 100", got)
	}
}

// TestReadGCTarget: at most ReadGCPercent, at most ReadGCHeadroom of growth
// beyond the live heap, and under a memory limit at most half of what it
// leaves; never below the default.
func TestReadGCTarget(t *testing.T) {
	const mib = 1 << 20
	const none = math.MaxInt64
	for name, c := range map[string]struct {
		live  uint64
		limit int64
		want  int
	}{
		"before the first collection":              {0, none, events.ReadGCPercent},
		"small heap":                               {50 * mib, none, events.ReadGCPercent},
		"a quarter of the headroom":                {events.ReadGCHeadroom / 4, none, events.ReadGCPercent},
		"half the headroom":                        {events.ReadGCHeadroom / 2, none, 200},
		"the headroom":                             {events.ReadGCHeadroom, none, 100},
		"over the headroom":                        {4 * events.ReadGCHeadroom, none, 100},
		"limit far away":                           {50 * mib, 8 << 30, events.ReadGCPercent},
		"limit leaves 400 MiB: grow by 200":        {100 * mib, 500 * mib, 200},
		"limit leaves 100 MiB: grow by 50":         {200 * mib, 300 * mib, 100},
		"live over the limit":                      {600 * mib, 500 * mib, 100},
		"limit, before the first collection":       {0, 500 * mib, 100},
		"limit tighter than the headroom's growth": {events.ReadGCHeadroom / 4, events.ReadGCHeadroom, 150},
	} {
		got := events.ReadGCTarget(c.live, c.limit)
		if got != c.want {
			t.Errorf("%s: ReadGCTarget(%d MiB, limit %d MiB) = %d, want %d", name, c.live/mib, c.limit/mib, got, c.want)
		}
		if c.live > 0 && got > 100 {
			growth := c.live * uint64(got) / 100 // GOGC: the heap may grow by live × GOGC/100
			if growth > events.ReadGCHeadroom {
				t.Errorf("%s: %d lets the heap grow past the headroom", name, got)
			}
			if c.limit != none && growth > (uint64(c.limit)-c.live)/2 {
				t.Errorf("%s: %d lets the heap grow by %d MiB, over half of the %d MiB the limit leaves", name, got, growth/mib, (uint64(c.limit)-c.live)/mib)
			}
		}
	}
}
