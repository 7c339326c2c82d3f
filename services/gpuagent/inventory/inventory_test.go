package inventory

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	nvmlmock "github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

func openMock(t *testing.T, o Options) *Inventory {
	t.Helper()
	o.Mock = true
	inv, err := Open(o)
	if err != nil {
		t.Fatalf("Open(%+v): %v", o, err)
	}
	t.Cleanup(func() { _ = inv.Close() })
	return inv
}

func mustGPUs(t *testing.T, inv *Inventory) []GPU {
	t.Helper()
	gs, err := inv.GPUs()
	if err != nil {
		t.Fatalf("GPUs: %v", err)
	}
	return gs
}

func TestMockInventory(t *testing.T) {
	tests := []struct {
		name        string
		opts        Options
		wantCount   int
		wantBackend string
		wantModel   string
		wantMiB     int
		wantDriver  string
	}{
		{"default is 8 a100", Options{Node: "n1"}, 8, "mock:dgxa100", "A100-SXM4-40GB", 40960, "550.54.15"},
		{"4 a100", Options{Node: "n1", MockGPUs: 4}, 4, "mock:dgxa100", "A100-SXM4-40GB", 40960, "550.54.15"},
		{"8 a100 explicit", Options{Node: "n1", MockGPUs: 8, MockModel: "a100"}, 8, "mock:dgxa100", "A100-SXM4-40GB", 40960, "550.54.15"},
		{"a100 80gb", Options{Node: "n1", MockGPUs: 2, MockModel: "a100-80gb"}, 2, "mock:a100-80gb", "A100-SXM4-80GB", 81920, "550.54.15"},
		{"h100", Options{Node: "n1", MockGPUs: 4, MockModel: "h100"}, 4, "mock:dgxh100", "H100 80GB", 81920, "550.54.15"},
		{"h200 case-insensitive", Options{Node: "n1", MockModel: " H200 "}, 8, "mock:dgxh200", "H200 141GB", 144384, "550.54.15"},
		{"a30", Options{Node: "n1", MockGPUs: 1, MockModel: "a30"}, 1, "mock:a30", "A30", 24576, "550.54.15"},
		{"b200", Options{Node: "n1", MockGPUs: 16, MockModel: "b200"}, 16, "mock:dgxb200", "B200 180GB", 184320, "560.28.03"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv := openMock(t, tc.opts)
			if got := inv.Backend(); got != tc.wantBackend {
				t.Errorf("Backend() = %q, want %q", got, tc.wantBackend)
			}
			if got := inv.FallbackReason(); got != "" {
				t.Errorf("FallbackReason() = %q, want empty when Mock is forced", got)
			}
			if got := inv.Driver(); got != tc.wantDriver {
				t.Errorf("Driver() = %q, want %q", got, tc.wantDriver)
			}
			gs := mustGPUs(t, inv)
			if len(gs) != tc.wantCount {
				t.Fatalf("got %d GPUs, want %d", len(gs), tc.wantCount)
			}
			seen := map[string]bool{}
			for i, g := range gs {
				if g.Index != i {
					t.Errorf("gpu %d: Index = %d", i, g.Index)
				}
				if !strings.Contains(g.Model, tc.wantModel) {
					t.Errorf("gpu %d: Model = %q, want it to contain %q", i, g.Model, tc.wantModel)
				}
				if g.MemoryMiB != tc.wantMiB {
					t.Errorf("gpu %d: MemoryMiB = %d, want %d", i, g.MemoryMiB, tc.wantMiB)
				}
				if !g.Healthy {
					t.Errorf("gpu %d: unhealthy on a fresh mock", i)
				}
				if want := MockUUID(tc.opts.Node, i); g.UUID != want {
					t.Errorf("gpu %d: UUID = %q, want %q", i, g.UUID, want)
				}
				if seen[g.UUID] {
					t.Errorf("gpu %d: duplicate UUID %q", i, g.UUID)
				}
				seen[g.UUID] = true
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"unknown model", Options{Mock: true, MockModel: "v100"}, "unknown mock model"},
		{"negative count", Options{Mock: true, MockGPUs: -1}, "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := Open(tc.opts)
			if err == nil {
				inv.Close()
				t.Fatalf("Open(%+v) succeeded, want error", tc.opts)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func uuids(gs []GPU) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.UUID
	}
	return out
}

func TestMockUUIDsDeterministic(t *testing.T) {
	tests := []struct {
		name       string
		a, b       Options
		wantSame   bool
		wantPrefix bool // the smaller fleet's UUIDs are a prefix of the larger's
	}{
		{"same node 4 GPUs", Options{Node: "gpu-01", MockGPUs: 4}, Options{Node: "gpu-01", MockGPUs: 4}, true, true},
		{"same node 8 GPUs", Options{Node: "gpu-01"}, Options{Node: "gpu-01", MockGPUs: 8}, true, true},
		{"same node other model", Options{Node: "gpu-01", MockModel: "h100"}, Options{Node: "gpu-01", MockModel: "a100"}, true, true},
		{"same node 4 then 8", Options{Node: "gpu-01", MockGPUs: 4}, Options{Node: "gpu-01", MockGPUs: 8}, false, true},
		{"different nodes", Options{Node: "gpu-01"}, Options{Node: "gpu-02"}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := uuids(mustGPUs(t, openMock(t, tc.a)))
			b := uuids(mustGPUs(t, openMock(t, tc.b)))
			if same := strings.Join(a, ",") == strings.Join(b, ","); same != tc.wantSame {
				t.Errorf("same = %v, want %v\n a=%v\n b=%v", same, tc.wantSame, a, b)
			}
			n := min(len(a), len(b))
			prefix := strings.Join(a[:n], ",") == strings.Join(b[:n], ",")
			if prefix != tc.wantPrefix {
				t.Errorf("prefix = %v, want %v", prefix, tc.wantPrefix)
			}
			if !tc.wantPrefix {
				inA := map[string]bool{}
				for _, u := range a {
					inA[u] = true
				}
				for _, u := range b {
					if inA[u] {
						t.Errorf("UUID %s on both nodes", u)
					}
				}
			}
		})
	}
}

func TestMarkUnhealthy(t *testing.T) {
	tests := []struct {
		name      string
		mark      []int // indexes to mark
		reasons   []string
		wantSick  map[int]bool
		wantFirst string // reason kept for the first marked index
	}{
		{"none", nil, nil, map[int]bool{}, ""},
		{"one", []int{2}, []string{"xid 79"}, map[int]bool{2: true}, "xid 79"},
		{"twice keeps first reason", []int{1, 1}, []string{"xid 48", "later"}, map[int]bool{1: true}, "xid 48"},
		{"two GPUs", []int{0, 3}, []string{"a", "b"}, map[int]bool{0: true, 3: true}, "a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv := openMock(t, Options{Node: "n", MockGPUs: 4})
			before := mustGPUs(t, inv)
			for k, idx := range tc.mark {
				inv.MarkUnhealthy(before[idx].UUID, tc.reasons[k])
			}
			for _, g := range mustGPUs(t, inv) {
				if g.Healthy == tc.wantSick[g.Index] {
					t.Errorf("gpu %d: Healthy = %v, want %v", g.Index, g.Healthy, !tc.wantSick[g.Index])
				}
			}
			if len(tc.mark) > 0 {
				r, ok := inv.UnhealthyReason(before[tc.mark[0]].UUID)
				if !ok || r != tc.wantFirst {
					t.Errorf("UnhealthyReason = %q, %v; want %q, true", r, ok, tc.wantFirst)
				}
			}
		})
	}
}

// TestNVMLReadErrorIsUnhealthy breaks one mock device's reads: GPUs must
// report it unhealthy rather than fail.
func TestNVMLReadErrorIsUnhealthy(t *testing.T) {
	tests := []struct {
		name     string
		breakDev func(d *server.Device)
		wantUUID bool
	}{
		{"memory read fails", func(d *server.Device) {
			d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
		}, true},
		{"name read fails", func(d *server.Device) {
			d.GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
		}, true},
		{"uuid read fails", func(d *server.Device) {
			d.GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
		}, false},
		{"method not mocked (panics in go-nvml)", func(d *server.Device) { d.GetMemoryInfoFunc = nil }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, backend, err := newMock(Options{Node: "n", MockGPUs: 3})
			if err != nil {
				t.Fatal(err)
			}
			tc.breakDev(s.Devices[1].(*server.Device))
			inv := newInventory(s, backend)
			gs := mustGPUs(t, inv)
			if len(gs) != 3 {
				t.Fatalf("got %d GPUs, want 3", len(gs))
			}
			for _, g := range gs {
				if want := g.Index != 1; g.Healthy != want {
					t.Errorf("gpu %d: Healthy = %v, want %v", g.Index, g.Healthy, want)
				}
			}
			if got := gs[1].UUID != ""; got != tc.wantUUID {
				t.Errorf("broken GPU UUID = %q, want present=%v", gs[1].UUID, tc.wantUUID)
			}
		})
	}
}

func TestDeviceHandleErrorIsUnhealthy(t *testing.T) {
	s, backend, err := newMock(Options{Node: "n", MockGPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 0 {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return s.Devices[i], nvml.SUCCESS
	}
	gs := mustGPUs(t, newInventory(s, backend))
	want := []GPU{{Index: 0, Utilization: -1}, {UUID: MockUUID("n", 1), Index: 1, Model: gs[1].Model, MemoryMiB: 40960, Healthy: true, Utilization: -1}}
	for i := range want {
		if gs[i] != want[i] {
			t.Errorf("gpu %d = %+v, want %+v", i, gs[i], want[i])
		}
	}
}

func TestOpenWithoutMockFallsBack(t *testing.T) {
	inv, err := Open(Options{Node: "n", MockGPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	switch b := inv.Backend(); {
	case b == "nvml":
		t.Logf("real NVML: driver %s", inv.Driver())
		if inv.FallbackReason() != "" {
			t.Errorf("FallbackReason = %q with real NVML", inv.FallbackReason())
		}
		gs := mustGPUs(t, inv)
		for _, g := range gs {
			t.Logf("%+v", g)
		}
	case b == "mock:dgxa100":
		if inv.FallbackReason() == "" {
			t.Error("fell back to the mock without a reason")
		}
		t.Logf("fell back: %s", inv.FallbackReason())
		if gs := mustGPUs(t, inv); len(gs) != 2 {
			t.Errorf("got %d GPUs, want 2", len(gs))
		}
	default:
		t.Fatalf("Backend() = %q", b)
	}
}

func TestWatchXid(t *testing.T) {
	t.Run("mock without events returns quietly", func(t *testing.T) {
		inv := openMock(t, Options{Node: "n", MockGPUs: 2})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := inv.WatchXid(ctx, func(string, uint64) { t.Error("callback on a mock without events") })
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("WatchXid = %v, want ErrUnsupported", err)
		}
		if ctx.Err() != nil {
			t.Fatal("WatchXid blocked instead of returning")
		}
	})

	type ev struct {
		dev  int // -1: no device in the event
		typ  uint64
		data uint64
	}
	type call struct {
		uuid string
		xid  uint64
	}
	tests := []struct {
		name   string
		events []ev
		want   []call
	}{
		{"one xid", []ev{{1, nvml.EventTypeXidCriticalError, 79}}, []call{{MockUUID("n", 1), 79}}},
		{"other event types ignored", []ev{{0, nvml.EventTypePState, 1}, {0, nvml.EventTypeXidCriticalError, 48}}, []call{{MockUUID("n", 0), 48}}},
		{"event without device", []ev{{-1, nvml.EventTypeXidCriticalError, 119}}, []call{{"", 119}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, backend, err := newMock(Options{Node: "n", MockGPUs: 2})
			if err != nil {
				t.Fatal(err)
			}
			events := make(chan nvml.EventData, len(tc.events))
			var freed, registered sync.WaitGroup
			freed.Add(1)
			set := &nvmlmock.EventSet{
				WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
					select {
					case e := <-events:
						return e, nvml.SUCCESS
					case <-time.After(time.Duration(ms) * time.Millisecond):
						return nvml.EventData{}, nvml.ERROR_TIMEOUT
					}
				},
				FreeFunc: func() nvml.Return { freed.Done(); return nvml.SUCCESS },
			}
			s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
			registered.Add(len(s.Devices))
			for _, d := range s.Devices {
				d.(*server.Device).RegisterEventsFunc = func(types uint64, es nvml.EventSet) nvml.Return {
					if types&nvml.EventTypeXidCriticalError == 0 || es != set {
						t.Errorf("RegisterEvents(%d, %v)", types, es)
					}
					registered.Done()
					return nvml.SUCCESS
				}
			}
			inv := newInventory(s, backend)
			inv.xidPoll = 10 * time.Millisecond

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			got := make(chan call, 16)
			done := make(chan error, 1)
			go func() {
				done <- inv.WatchXid(ctx, func(u string, x uint64) { got <- call{u, x} })
			}()
			registered.Wait()
			for _, e := range tc.events {
				var d nvml.Device
				if e.dev >= 0 {
					d = s.Devices[e.dev]
				}
				events <- nvml.EventData{Device: d, EventType: e.typ, EventData: e.data}
			}
			for _, w := range tc.want {
				select {
				case c := <-got:
					if c != w {
						t.Errorf("callback %+v, want %+v", c, w)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("no callback for %+v", w)
				}
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("WatchXid after cancel = %v, want nil", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("WatchXid did not return after cancel")
			}
			freed.Wait()
			select {
			case c := <-got:
				t.Errorf("extra callback %+v", c)
			default:
			}
		})
	}
}

func TestCloseIdempotent(t *testing.T) {
	inv, err := Open(Options{Mock: true, Node: "n"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := inv.Close(); err != nil {
			t.Errorf("Close #%d: %v", i+1, err)
		}
	}
}

// TestWatchXidOpenBackend runs WatchXid on whatever Open picks: the mock
// (no events: ErrUnsupported at once) or real NVML (blocks until cancelled).
func TestWatchXidOpenBackend(t *testing.T) {
	inv, err := Open(Options{Node: "n"})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	begin := time.Now()
	err = inv.WatchXid(ctx, func(u string, x uint64) { t.Logf("xid %d on %s", x, u) })
	switch {
	case errors.Is(err, ErrUnsupported):
		t.Logf("%s: %v", inv.Backend(), err)
		if inv.Backend() == "nvml" {
			t.Log("real NVML without Xid events")
		}
	case err != nil:
		t.Fatalf("WatchXid: %v", err)
	default:
		if inv.Backend() != "nvml" {
			t.Errorf("mock %s watched events", inv.Backend())
		}
		if el := time.Since(begin); el < time.Second {
			t.Errorf("WatchXid returned after %v, before ctx was done", el)
		}
	}
}

// TestMemoryHealth: where NVML reports retired pages pending or a row
// remapping pending or failed, the GPU is unhealthy with that reason; the
// utilization NVML samples is reported.
func TestMemoryHealth(t *testing.T) {
	tests := map[string]struct {
		setup      func(d *server.Device)
		wantHealth bool
		wantReason string
		wantUtil   int
	}{
		"nothing reported": {setup: func(d *server.Device) {}, wantHealth: true, wantUtil: -1},
		"utilization": {setup: func(d *server.Device) {
			d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 87}, nvml.SUCCESS }
		}, wantHealth: true, wantUtil: 87},
		"retired pages pending": {setup: func(d *server.Device) {
			d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
		}, wantReason: "retired pages pending", wantUtil: -1},
		"row remapping pending": {setup: func(d *server.Device) {
			d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 1, true, false, nvml.SUCCESS }
		}, wantReason: "row remapping pending", wantUtil: -1},
		"row remapping failed": {setup: func(d *server.Device) {
			d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 9, false, true, nvml.SUCCESS }
		}, wantReason: "row remapping failed", wantUtil: -1},
		"remapping not supported": {setup: func(d *server.Device) {
			d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.ERROR_NOT_SUPPORTED }
		}, wantHealth: true, wantUtil: -1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, backend, err := newMock(Options{Node: "n", MockGPUs: 2})
			if err != nil {
				t.Fatal(err)
			}
			tc.setup(s.Devices[1].(*server.Device))
			inv := newInventory(s, backend)
			gs := mustGPUs(t, inv)
			if gs[1].Healthy != tc.wantHealth || gs[1].Utilization != tc.wantUtil {
				t.Errorf("gpu 1 = %+v, want healthy %v utilization %d", gs[1], tc.wantHealth, tc.wantUtil)
			}
			if !gs[0].Healthy {
				t.Errorf("gpu 0 turned unhealthy: %+v", gs[0])
			}
			if r, _ := inv.UnhealthyReason(gs[1].UUID); !strings.Contains(r, tc.wantReason) || (tc.wantReason == "") != (r == "") {
				t.Errorf("reason %q, want %q", r, tc.wantReason)
			}
		})
	}
}
