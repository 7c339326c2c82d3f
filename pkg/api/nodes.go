package api

import "time"

// Node operations.
const (
	OpNodes   = "nodes"
	OpDrain   = "drain"
	OpUndrain = "undrain"
)

// NodeView is one node as `gpuq node list` shows it.
type NodeView struct {
	Node string `json:"node"`
	// State is ready, drained or lost (and away: up in the log, but no
	// heartbeat for longer than a heartbeat timeout).
	State         string     `json:"state"`
	Reason        string     `json:"reason,omitempty"`
	LastHeartbeat *time.Time `json:"last_heartbeat"`
	BootID        string     `json:"boot_id,omitempty"`
	GPUs          []GPUView  `json:"gpus"`
}

// GPUView is one GPU of a node.
type GPUView struct {
	UUID      string  `json:"uuid"`
	Index     int     `json:"index"`
	Model     string  `json:"model"`
	MemoryMiB int     `json:"memory_mib"`
	Healthy   bool    `json:"healthy"`
	TaskID    *string `json:"task_id"`
	// Utilization is the busy percentage of the agent's last heartbeat,
	// where NVML reports it.
	Utilization *int `json:"utilization_pct,omitempty"`
}

// DrainRequest drains (or, for undrain, restores) a node.
type DrainRequest struct {
	Node    string `json:"node"`
	Reason  string `json:"reason,omitempty"`
	By      string `json:"by,omitempty"`
	Preempt bool   `json:"preempt,omitempty"`
}
