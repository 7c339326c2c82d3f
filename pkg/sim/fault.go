package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpuq/gpuq/pkg/decide"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// Fault kinds (`gpuq sim --fault`).
const (
	// FaultStall: the scheduler decides nothing in the window (no leader):
	// tasks are submitted and end, nothing is dispatched, preempted or
	// requeued.
	FaultStall = "stall"
	// FaultNodesDown: Nodes nodes (the last ones, by name) stop their
	// heartbeats at At; the scheduler declares them lost and requeues
	// their tasks (decide.Plan, as the live scheduler does); they come
	// back (Available) at At + For.
	FaultNodesDown = "nodes-down"
)

// Fault is one injected failure, a window of virtual time from the
// trace's first submission.
type Fault struct {
	Kind    string        `json:"kind"`
	At      time.Duration `json:"-"`
	For     time.Duration `json:"-"`
	Nodes   int           `json:"nodes,omitempty"`
	Spec    string        `json:"spec"` // as given
	AtS     float64       `json:"at_s"`
	ForS    float64       `json:"for_s"`
	endDone bool
}

// ParseFault reads a fault: stall@OFFSET+DURATION or
// nodes-down@OFFSET+DURATION:N (OFFSET and DURATION as Go durations, e.g.
// stall@240h+3h, nodes-down@240h+6h:8). The error names the part that is
// wrong and the rule.
func ParseFault(s string) (Fault, error) {
	f := Fault{Spec: s}
	kind, rest, ok := strings.Cut(s, "@")
	if !ok {
		return f, fmt.Errorf("fault %q: want KIND@OFFSET+DURATION (stall@240h+3h, nodes-down@240h+6h:8)", s)
	}
	f.Kind = kind
	switch kind {
	case FaultStall:
	case FaultNodesDown:
		var n string
		rest, n, ok = strings.Cut(rest, ":")
		if !ok {
			return f, fmt.Errorf("fault %q: nodes-down needs the node count: nodes-down@OFFSET+DURATION:N", s)
		}
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 {
			return f, fmt.Errorf("fault %q: node count %q must be an integer ≥ 1", s, n)
		}
		f.Nodes = v
	default:
		return f, fmt.Errorf("fault %q: unknown kind %q (want stall or nodes-down)", s, kind)
	}
	at, dur, ok := strings.Cut(rest, "+")
	if !ok {
		return f, fmt.Errorf("fault %q: want OFFSET+DURATION after @ (e.g. 240h+3h)", s)
	}
	var err error
	if f.At, err = time.ParseDuration(at); err != nil || f.At < 0 {
		return f, fmt.Errorf("fault %q: offset %q must be a duration ≥ 0 (e.g. 240h)", s, at)
	}
	if f.For, err = time.ParseDuration(dur); err != nil || f.For <= 0 {
		return f, fmt.Errorf("fault %q: duration %q must be a duration > 0 (e.g. 3h)", s, dur)
	}
	f.AtS, f.ForS = f.At.Seconds(), f.For.Seconds()
	return f, nil
}

// validate checks the fault against the cluster.
func (f Fault) validate(nodes int) error {
	if f.Kind == FaultNodesDown && f.Nodes >= nodes {
		return fmt.Errorf("fault %q: %d nodes down of %d leaves none: want fewer than the cluster's nodes", f.Spec, f.Nodes, nodes)
	}
	return nil
}

// faulting plays one fault in a driver.
type faulting struct {
	f    Fault
	down []string // nodes-down: the nodes taken down
	gpus [][]events.GPU
	next int // the next window boundary (0: its start, 1: its end, 2: none)
}

// stalled: the scheduler decides nothing at vt.
func (d *driver) stalled() bool {
	return d.fault != nil && d.fault.f.Kind == FaultStall && d.vt >= d.fault.f.At && d.vt < d.fault.f.At+d.fault.f.For
}

// faultInstant is the fault's next window boundary not yet passed (its
// start, then its end), when there is one.
func (d *driver) faultInstant() (time.Duration, bool) {
	f := d.fault
	if f == nil || f.next > 1 {
		return 0, false
	}
	return []time.Duration{f.f.At, f.f.At + f.f.For}[f.next], true
}

// passFault notes that the instant vt was played: boundaries up to it are
// passed.
func (d *driver) passFault(vt time.Duration) {
	for b, ok := d.faultInstant(); ok && b <= vt; b, ok = d.faultInstant() {
		d.fault.next++
	}
}

// liveness is what the scheduler knows of the nodes' heartbeats: in a
// nodes-down window, the downed nodes' last heartbeat was at its start,
// so decide.Plan declares them lost and requeues their tasks.
func (d *driver) liveness() decide.Liveness {
	f := d.fault
	if f == nil || f.f.Kind != FaultNodesDown || d.vt < f.f.At || d.vt >= f.f.At+f.f.For {
		return decide.Liveness{}
	}
	seen := map[string]time.Time{}
	for _, n := range f.down {
		if nd := d.st.Nodes[n]; nd != nil && nd.State != domain.NodeLost {
			seen[n] = d.epoch.Add(f.f.At).Add(-2 * faultTimeout)
		}
	}
	if len(seen) == 0 {
		return decide.Liveness{}
	}
	return decide.Liveness{LastSeen: seen, Timeout: faultTimeout}
}

// faultTimeout is the simulated node timeout (the scheduler's default
// order of magnitude); the nodes are declared lost at the window's start.
const faultTimeout = 30 * time.Second

// faultEnds brings the downed nodes back at the window's end: their agents
// report their inventory again (Available).
func (d *driver) faultEnds() error {
	f := d.fault
	if f == nil || f.f.Kind != FaultNodesDown || f.f.endDone || d.vt < f.f.At+f.f.For {
		return nil
	}
	f.f.endDone = true
	for i, n := range f.down {
		if _, err := d.append(events.Available{Node: n, GPUs: f.gpus[i], FreeGPUs: len(f.gpus[i]), BootID: "sim-back"}, "", nil); err != nil {
			return err
		}
	}
	return nil
}

// setFault prepares f on a cluster of nodes named as simulate names them.
func (d *driver) setFault(f Fault, nodes, perNode int) {
	d.fault = &faulting{f: f}
	if f.Kind != FaultNodesDown {
		return
	}
	width := max(3, len(fmt.Sprint(nodes)))
	for n := nodes - f.Nodes; n < nodes; n++ {
		name := fmt.Sprintf("n%0*d", width, n+1)
		gs := make([]events.GPU, perNode)
		for g := range gs {
			gs[g] = events.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, g), Index: g, Model: simGPUModel, MemoryMiB: simGPUMemMiB, Healthy: true}
		}
		d.fault.down = append(d.fault.down, name)
		d.fault.gpus = append(d.fault.gpus, gs)
	}
}
