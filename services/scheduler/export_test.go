package scheduler

import "github.com/gpuq/gpuq/pkg/domain"

// Snapshot returns a copy of the live state (nil before the first fold).
func (s *Scheduler) Snapshot() *domain.State {
	s.mu.Lock()
	f, lead := s.fold, s.lead
	s.mu.Unlock()
	if f == nil || !lead {
		return nil
	}
	var c *domain.State
	f.Read(func(st *domain.State) { c = st.Clone() })
	return c
}
