package domain

import "github.com/gpuq/gpuq/pkg/events"

// NodeState is a node's scheduling status.
type NodeState string

// Node states.
const (
	NodeUp      NodeState = "up"
	NodeDrained NodeState = "drained"
	NodeLost    NodeState = "lost"
)

// GPU is one device of a node.
type GPU struct {
	UUID      string
	Index     int
	Model     string
	MemoryMiB int
	Healthy   bool
}

// Node is the folded state of one GPU host.
type Node struct {
	Name   string
	State  NodeState
	GPUs   []GPU
	BootID string
	Reason string
	// DrainPreempt: drained with --preempt; the scheduler preempts the
	// preemptible tasks still running there.
	DrainPreempt bool
	// away: the scheduler has no fresh heartbeat of the node (SetAway);
	// not a fact of the log, never in a snapshot.
	away bool
	// cells: the owner cell of each of GPUs (cells.go); never modified in
	// place, so copies share it.
	cells []int32
}

// Schedulable reports whether new work may be placed on the node: it is
// up and, for the scheduler, its heartbeat is fresh.
func (n *Node) Schedulable() bool { return n.State == NodeUp && !n.away }

// Away reports whether the scheduler marked the node away (SetAway).
func (n *Node) Away() bool { return n.away }

// Clone returns a deep copy.
func (n *Node) Clone() *Node {
	c := *n
	c.GPUs = append([]GPU(nil), n.GPUs...)
	return &c
}

func gpusFromEvent(in []events.GPU) []GPU {
	out := make([]GPU, len(in))
	for i, g := range in {
		out[i] = GPU{UUID: g.UUID, Index: g.Index, Model: g.Model, MemoryMiB: g.MemoryMiB, Healthy: g.Healthy}
	}
	return out
}
