// Package inventory owns GPU discovery and GPU health for one gpuagent host.
//
// It talks to GPUs only through go-nvml's nvml.Interface. Open loads the real
// NVML library (libnvidia-ml.so.1, via dlopen); when that is impossible (no
// driver, no library) or when a mock is asked for, it builds a go-nvml mock
// server of the chosen model and size instead and says so in Backend. Every
// read (count, handles, UUID, name, memory, driver version) goes through the
// nvml.Interface methods whichever backend is in use: the mock is only a
// backend, never read through its struct fields.
//
// Mock GPU UUIDs are derived from the node name and GPU index, so an agent
// that restarts on the same node sees the same GPUs.
//
// Health is local knowledge: a GPU is unhealthy when it was marked with
// MarkUnhealthy (for example after an Xid reported by WatchXid, or by tests)
// or when NVML returns an error while reading it. Publishing inventory and
// health as events is the agent's business, not this package's.
package inventory
