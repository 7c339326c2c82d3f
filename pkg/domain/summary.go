package domain

// TaskCount is a group of tasks a Summary counts: by state, priority class
// and team.
type TaskCount struct {
	State    TaskState
	Priority Priority
	Team     string
}

// Summary is what the metrics read of a fold, computed under its lock and
// published (service.Fold.Summary), so that a scrape never takes the
// lock: tasks by state, class and team; nodes by state; GPUs in all,
// healthy on schedulable nodes and free; the newest leader epoch; the
// sequence it stands at.
type Summary struct {
	Seq                 uint64
	Tasks               map[TaskCount]int
	Nodes               map[NodeState]int
	GPUs, Healthy, Free int
	Epoch               uint64
}

// Summarize counts the state (see Summary). It reads every task: call it
// at most every so often, not per record.
func (s *State) Summarize() *Summary {
	sum := &Summary{Seq: s.Seq, Tasks: map[TaskCount]int{}, Nodes: map[NodeState]int{}, Epoch: s.Epoch}
	for _, t := range s.Tasks {
		sum.Tasks[TaskCount{t.State, t.Priority, t.Team}]++
	}
	for _, n := range s.Nodes {
		sum.Nodes[n.State]++
		sum.GPUs += len(n.GPUs)
	}
	sum.Healthy, sum.Free = s.TotalGPUs()
	return sum
}
