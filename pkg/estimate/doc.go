// Package estimate owns the waiting person's side of gpuq, as pure code:
// the source document's baseline wait formula, the waiting playbook (what to
// do meanwhile) and the Advice record published on gpuq.advice.<task_id>.
package estimate
