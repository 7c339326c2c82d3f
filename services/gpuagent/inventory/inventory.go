package inventory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"
)

// GPU is one GPU as NVML reports it at the time of the read.
type GPU struct {
	// UUID is NVML's GPU UUID ("GPU-…"). It is empty only when NVML could
	// not return a handle for the index (the GPU is then unhealthy).
	UUID string
	// Index is the NVML enumeration index (not necessarily CUDA's order;
	// prefer UUIDs in CUDA_VISIBLE_DEVICES).
	Index int
	// Model is NVML's device name, e.g. "NVIDIA H100 80GB HBM3".
	Model string
	// MemoryMiB is the total framebuffer memory in MiB.
	MemoryMiB int
	// Healthy is false when the GPU was marked unhealthy, NVML failed to
	// read it, or NVML reports retired pages pending or a row remapping
	// pending or failed (where the GPU supports them).
	Healthy bool
	// Utilization is the GPU's busy percentage over NVML's last sample
	// period, -1 where NVML does not report it (the mock).
	Utilization int
}

// Options selects the backend.
type Options struct {
	// Mock forces the mock backend even when NVML is available.
	Mock bool
	// MockGPUs is the number of mock GPUs; zero means 8.
	MockGPUs int
	// MockModel is the mock GPU model: "a100" (default), "a100-80gb",
	// "a30", "h100", "h200" or "b200".
	MockModel string
	// Node names the host; mock GPU UUIDs are derived from it. Empty means
	// the host name.
	Node string
}

// DefaultMockGPUs is the mock GPU count when Options.MockGPUs is zero.
const DefaultMockGPUs = 8

// ErrUnsupported is returned by WatchXid when the backend cannot deliver
// NVML events (the mock, or a driver without event support).
var ErrUnsupported = errors.New("inventory: nvml events not supported")

// mockModel describes one mock fleet model.
type mockModel struct {
	backend     string // Backend() value
	gpu         gpus.Config
	driver      string
	nvmlVersion string
	cuda        int
}

// mockModels mirrors the versions go-nvml's dgx* packages use.
var mockModels = map[string]mockModel{
	"a100":      {"mock:dgxa100", gpus.A100_SXM4_40GB, "550.54.15", "12.550.54.15", 12040},
	"a100-80gb": {"mock:a100-80gb", gpus.A100_SXM4_80GB, "550.54.15", "12.550.54.15", 12040},
	"a30":       {"mock:a30", gpus.A30_PCIE_24GB, "550.54.15", "12.550.54.15", 12040},
	"h100":      {"mock:dgxh100", gpus.H100_SXM5_80GB, "550.54.15", "12.550.54.15", 12040},
	"h200":      {"mock:dgxh200", gpus.H200_SXM5_141GB, "550.54.15", "12.550.54.15", 12040},
	"b200":      {"mock:dgxb200", gpus.B200_SXM5_180GB, "560.28.03", "12.560.28.03", 12060},
}

// MockModels lists the accepted Options.MockModel values, sorted.
func MockModels() []string {
	out := make([]string, 0, len(mockModels))
	for k := range mockModels {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// mockUUIDNamespace is the UUIDv5 namespace for mock GPU UUIDs.
var mockUUIDNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/gpuq/gpuq/services/gpuagent/inventory/mock-gpu"))

// MockUUID is the UUID the mock backend gives GPU index on node.
func MockUUID(node string, index int) string {
	return "GPU-" + uuid.NewSHA1(mockUUIDNamespace, []byte(node+"/"+strconv.Itoa(index))).String()
}

// Inventory reads the GPUs of one host. It is safe for concurrent use.
type Inventory struct {
	lib      nvml.Interface
	backend  string
	fallback string
	xidPoll  time.Duration

	mu        sync.Mutex
	unhealthy map[string]string // UUID -> reason
	closed    bool
}

// Open initialises NVML, or the mock when o.Mock is set or NVML cannot be
// initialised. Close releases it.
func Open(o Options) (*Inventory, error) {
	var reason string
	if !o.Mock {
		lib := nvml.New()
		ret := safeRet(lib.Init)
		if ret == nvml.SUCCESS {
			return newInventory(lib, "nvml"), nil
		}
		reason = "nvml init: " + ret.Error()
	}
	lib, backend, err := newMock(o)
	if err != nil {
		return nil, err
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("inventory: mock init: %w", ret)
	}
	inv := newInventory(lib, backend)
	inv.fallback = reason
	return inv, nil
}

func newInventory(lib nvml.Interface, backend string) *Inventory {
	return &Inventory{
		lib:       lib,
		backend:   backend,
		xidPoll:   time.Second,
		unhealthy: map[string]string{},
	}
}

// newMock builds a go-nvml mock server and gives its devices UUIDs derived
// from the node name (go-nvml draws random ones).
func newMock(o Options) (*server.Server, string, error) {
	name := strings.ToLower(strings.TrimSpace(o.MockModel))
	if name == "" {
		name = "a100"
	}
	m, ok := mockModels[name]
	if !ok {
		return nil, "", fmt.Errorf("inventory: unknown mock model %q (want one of %s)", o.MockModel, strings.Join(MockModels(), ", "))
	}
	n := o.MockGPUs
	if n == 0 {
		n = DefaultMockGPUs
	}
	if n < 0 {
		return nil, "", fmt.Errorf("inventory: mock GPU count %d is negative", n)
	}
	node := o.Node
	if node == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "localhost"
		}
		node = h
	}
	s, err := server.New(
		server.WithGPUs(gpus.Multiple(n, m.gpu)...),
		server.WithDriverVersion(m.driver),
		server.WithNVMLVersion(m.nvmlVersion),
		server.WithCUDADriverVersion(m.cuda),
	)
	if err != nil {
		return nil, "", fmt.Errorf("inventory: mock server: %w", err)
	}
	for i, d := range s.Devices {
		d.(*server.Device).UUID = MockUUID(node, i)
	}
	return s, m.backend, nil
}

// Backend is "nvml" for the real library, or "mock:<model>" (for example
// "mock:dgxa100") for the mock.
func (i *Inventory) Backend() string { return i.backend }

// FallbackReason says why the mock is in use although Options.Mock was not
// set (for example "nvml init: ERROR_LIBRARY_NOT_FOUND"); empty otherwise.
func (i *Inventory) FallbackReason() string { return i.fallback }

// Driver is the driver version NVML reports, or "" when it cannot say.
func (i *Inventory) Driver() string {
	v, ret := safe(i.lib.SystemGetDriverVersion)
	if ret != nvml.SUCCESS {
		return ""
	}
	return v
}

// MarkUnhealthy marks the GPU with this UUID unhealthy until the Inventory is
// closed. The first reason given is kept.
func (i *Inventory) MarkUnhealthy(uuid, reason string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if _, ok := i.unhealthy[uuid]; !ok {
		i.unhealthy[uuid] = reason
	}
}

// UnhealthyReason returns the reason given to MarkUnhealthy for uuid.
func (i *Inventory) UnhealthyReason(uuid string) (string, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	r, ok := i.unhealthy[uuid]
	return r, ok
}

// GPUs reads every GPU through NVML. It fails only when the GPU count cannot
// be read; a GPU that cannot be read is returned unhealthy.
func (i *Inventory) GPUs() ([]GPU, error) {
	n, ret := safe(i.lib.DeviceGetCount)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("inventory: device count: %w", ret)
	}
	out := make([]GPU, 0, n)
	for idx := 0; idx < n; idx++ {
		out = append(out, i.read(idx))
	}
	return out, nil
}

func (i *Inventory) read(idx int) GPU {
	g := GPU{Index: idx, Utilization: -1}
	dev, ret := safe(func() (nvml.Device, nvml.Return) { return i.lib.DeviceGetHandleByIndex(idx) })
	if ret != nvml.SUCCESS {
		return g
	}
	healthy := true
	var ok bool
	if g.UUID, ok = get(dev.GetUUID); !ok {
		healthy = false
	}
	if g.Model, ok = get(dev.GetName); !ok {
		healthy = false
	}
	if mem, ok := get(dev.GetMemoryInfo); ok {
		g.MemoryMiB = int(mem.Total / (1 << 20))
	} else {
		healthy = false
	}
	if u, ok := get(dev.GetUtilizationRates); ok {
		g.Utilization = int(u.Gpu)
	}
	if g.UUID != "" {
		// Memory the driver could not keep: the GPU needs a reset before
		// it gets new work. Kept like an Xid until the agent restarts.
		if st, ok := get(dev.GetRetiredPagesPendingStatus); ok && st == nvml.FEATURE_ENABLED {
			i.MarkUnhealthy(g.UUID, "NVML: retired pages pending (the GPU needs a reset)")
		}
		type remap struct{ pending, failed bool }
		if r, ok := get(func() (remap, nvml.Return) {
			_, _, pending, failed, ret := dev.GetRemappedRows()
			return remap{pending, failed}, ret
		}); ok {
			switch {
			case r.failed:
				i.MarkUnhealthy(g.UUID, "NVML: row remapping failed")
			case r.pending:
				i.MarkUnhealthy(g.UUID, "NVML: row remapping pending (the GPU needs a reset)")
			}
		}
		if _, marked := i.UnhealthyReason(g.UUID); marked {
			healthy = false
		}
	}
	g.Healthy = healthy
	return g
}

// WatchXid waits for Xid critical error events on every GPU that supports
// them and calls fn for each (uuid is "" when NVML does not name the
// device). It blocks until ctx is done and then returns nil. It returns
// ErrUnsupported at once, quietly, when the backend has no events (the
// go-nvml mock has none). It does not change health itself: fn decides,
// e.g. by calling MarkUnhealthy, since some Xids are application faults.
func (i *Inventory) WatchXid(ctx context.Context, fn func(uuid string, xid uint64)) error {
	set, ret := safe(i.lib.EventSetCreate)
	if ret != nvml.SUCCESS || set == nil {
		return fmt.Errorf("%w: event set: %v", ErrUnsupported, ret)
	}
	defer safeRet(set.Free)

	n, ret := safe(i.lib.DeviceGetCount)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("inventory: device count: %w", ret)
	}
	registered := 0
	for idx := 0; idx < n; idx++ {
		dev, ret := safe(func() (nvml.Device, nvml.Return) { return i.lib.DeviceGetHandleByIndex(idx) })
		if ret != nvml.SUCCESS {
			continue
		}
		if safeRet(func() nvml.Return { return dev.RegisterEvents(nvml.EventTypeXidCriticalError, set) }) == nvml.SUCCESS {
			registered++
		}
	}
	if registered == 0 {
		return fmt.Errorf("%w: no GPU accepts Xid events", ErrUnsupported)
	}

	timeout := uint32(i.xidPoll / time.Millisecond)
	for ctx.Err() == nil {
		e, ret := safe(func() (nvml.EventData, nvml.Return) { return set.Wait(timeout) })
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		default:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("inventory: event wait: %w", ret)
		}
		if e.EventType != nvml.EventTypeXidCriticalError {
			continue
		}
		var id string
		if e.Device != nil {
			id, _ = get(e.Device.GetUUID)
		}
		fn(id, e.EventData)
	}
	return nil
}

// Close shuts NVML (or the mock) down. Later calls do nothing.
func (i *Inventory) Close() error {
	i.mu.Lock()
	if i.closed {
		i.mu.Unlock()
		return nil
	}
	i.closed = true
	i.mu.Unlock()
	if ret := safeRet(i.lib.Shutdown); ret != nvml.SUCCESS {
		return fmt.Errorf("inventory: shutdown: %w", ret)
	}
	return nil
}

// safe calls an NVML method, turning a panic into ERROR_NOT_SUPPORTED: the
// go-nvml mocks panic on any method they do not implement.
func safe[T any](f func() (T, nvml.Return)) (v T, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			var zero T
			v, ret = zero, nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return f()
}

func safeRet(f func() nvml.Return) nvml.Return {
	_, ret := safe(func() (struct{}, nvml.Return) { return struct{}{}, f() })
	return ret
}

func get[T any](f func() (T, nvml.Return)) (T, bool) {
	v, ret := safe(f)
	return v, ret == nvml.SUCCESS
}
