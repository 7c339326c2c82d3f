package events_test

import (
	"context"
	"errors"
	"fmt"
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
// beyond the live heap, never below the default.
func TestReadGCTarget(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, events.ReadGCPercent}, // before the first collection
		{50 * mib, events.ReadGCPercent},
		{events.ReadGCHeadroom / 4, events.ReadGCPercent},
		{events.ReadGCHeadroom / 2, 200},
		{events.ReadGCHeadroom, 100},
		{4 * events.ReadGCHeadroom, 100},
	} {
		if got := events.ReadGCTarget(c.live); got != c.want {
			t.Errorf("ReadGCTarget(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
		if g := events.ReadGCTarget(c.live); c.live > 0 && g > 100 && c.live*uint64(g)/100 > events.ReadGCHeadroom {
			t.Errorf("ReadGCTarget(%d MiB) = %d lets the heap grow past the headroom", c.live/mib, g)
		}
	}
}
