package estimate

import (
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// whatIfState is the hypothetical state of a what-if: a copy of st's live
// tasks with the queued task id amended to gpus GPUs (0: unchanged) at
// priority prio (0: unchanged). Nil when id is not queued.
func whatIfState(st *domain.State, id string, gpus int, prio domain.Priority, now time.Time) *domain.State {
	t := st.Tasks[id]
	if t == nil || t.State != domain.Queued {
		return nil
	}
	c := st.CloneLive()
	am := events.Amended{TaskID: id, GPUs: gpus}
	if prio.Valid() {
		am.Priority = prio.String()
	}
	c.Apply(events.Record{Seq: c.Seq + 1, Envelope: events.Envelope{Type: am.EventType(), Time: now}, Event: am})
	return c
}

// AdviseWhatIf is the advice the queued task id would get if it asked for
// gpus GPUs (0: unchanged) at priority prio (0: unchanged), computed on
// the hypothetical state of WhatIf; its Method says "(what-if)". False
// when id is not queued.
func (e *Estimator) AdviseWhatIf(st *domain.State, id string, gpus int, prio domain.Priority, now time.Time) (Advice, bool) {
	c := whatIfState(st, id, gpus, prio, now)
	if c == nil {
		return Advice{}, false
	}
	v, _ := e.AdviseOne(c, id, now)
	v.Method += " (what-if)"
	return v, true
}
