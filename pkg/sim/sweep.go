package sim

// SweepResult is a run over several cluster sizes (`gpuq sim --nodes
// 8,16,32`): one entry per size, smallest first.
type SweepResult struct {
	Sweep []SweepEntry `json:"sweep"`
}

// SweepEntry is one cluster size of a sweep: its node count and the
// Result a run with that one size gives, byte for byte (its scenario says
// the size, the jobs left out as larger than it, and the offered load on
// it).
type SweepEntry struct {
	Nodes int `json:"nodes"`
	Result
}
