// Package domaintest holds builders for tests of the fold and of everything
// that reads it: valid submissions, node inventories, placements and logs of
// events.Record values with sequence numbers and times.
//
//	log := domaintest.NewLog().Append(
//		domaintest.Node("n1").GPUs(4).Available(),
//		domaintest.Task().ID("t1").GPUs(2).Priority(domain.High).Submitted(),
//		domaintest.Dispatch("t1", domaintest.On("n1", 0, 1)),
//	)
//	st := log.Fold()
//
// Builders are values with chained setters; every setter returns the
// builder, and the defaults are a valid, unremarkable task or node.
package domaintest

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// Epoch is the time of the first record of a Log and the default
// SubmittedAt of a Task.
var Epoch = time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)

// TaskBuilder builds a task's submission.
type TaskBuilder struct{ s events.Submitted }

// Task returns a builder of a valid, preemptible, 1-GPU, medium task "t1"
// submitted at Epoch.
func Task() *TaskBuilder {
	return &TaskBuilder{s: events.Submitted{
		TaskID: "t1", Name: "train-resnet", Team: "vision", Priority: domain.Medium.String(),
		GPUs: 1, Hours: 1, Hypothesis: "a wider stem improves top-1", Command: "python train.py",
		Preemptible: true, PreemptSignal: "SIGUSR1", GraceS: 120, SubmittedAt: Epoch,
	}}
}

// ID sets the task id.
func (b *TaskBuilder) ID(id string) *TaskBuilder { b.s.TaskID = id; return b }

// Name sets the task name.
func (b *TaskBuilder) Name(n string) *TaskBuilder { b.s.Name = n; return b }

// Team sets the team.
func (b *TaskBuilder) Team(team string) *TaskBuilder { b.s.Team = team; return b }

// Priority sets the class.
func (b *TaskBuilder) Priority(p domain.Priority) *TaskBuilder { b.s.Priority = p.String(); return b }

// PriorityName sets the class's wire name verbatim (e.g. an invalid one).
func (b *TaskBuilder) PriorityName(p string) *TaskBuilder { b.s.Priority = p; return b }

// GPUs sets the number of GPUs asked for.
func (b *TaskBuilder) GPUs(n int) *TaskBuilder { b.s.GPUs = n; return b }

// Hours sets the estimated run time.
func (b *TaskBuilder) Hours(h float64) *TaskBuilder { b.s.Hours = h; return b }

// Hypothesis sets what the experiment tests.
func (b *TaskBuilder) Hypothesis(h string) *TaskBuilder { b.s.Hypothesis = h; return b }

// Command sets the command line.
func (b *TaskBuilder) Command(c string) *TaskBuilder { b.s.Command = c; return b }

// Preemptible sets whether the task may be preempted.
func (b *TaskBuilder) Preemptible(p bool) *TaskBuilder { b.s.Preemptible = p; return b }

// GPUModel sets the GPU model constraint.
func (b *TaskBuilder) GPUModel(m string) *TaskBuilder { b.s.GPUModel = m; return b }

// MinGPUMemMiB sets the per-GPU memory constraint.
func (b *TaskBuilder) MinGPUMemMiB(m int) *TaskBuilder { b.s.MinGPUMemMiB = m; return b }

// IdempotencyKey sets the idempotency key.
func (b *TaskBuilder) IdempotencyKey(k string) *TaskBuilder { b.s.IdempotencyKey = k; return b }

// SubmittedAt sets the task's place in line.
func (b *TaskBuilder) SubmittedAt(at time.Time) *TaskBuilder { b.s.SubmittedAt = at; return b }

// Deadline sets the finish-by time.
func (b *TaskBuilder) Deadline(at time.Time) *TaskBuilder { b.s.Deadline = &at; return b }

// Notify sets the task's own webhook destinations.
func (b *TaskBuilder) Notify(urls ...string) *TaskBuilder { b.s.Notify = urls; return b }

// Submitted returns the submission event.
func (b *TaskBuilder) Submitted() events.Submitted { return b.s }

// Request returns the request a person would have sent for this task.
func (b *TaskBuilder) Request() domain.Request {
	s := b.s
	return domain.Request{
		Name: s.Name, Team: s.Team, Priority: s.Priority, GPUs: s.GPUs, Hours: s.Hours,
		Hypothesis: s.Hypothesis, Command: s.Command, NoPreempt: !s.Preemptible,
		PreemptSignal: s.PreemptSignal, GraceS: s.GraceS, GPUModel: s.GPUModel,
		MinGPUMemMiB: s.MinGPUMemMiB, IdempotencyKey: s.IdempotencyKey, Deadline: s.Deadline, Notify: s.Notify,
	}
}

// GPU is the UUID of GPU i of a node built by Node.
func GPU(node string, i int) string { return fmt.Sprintf("GPU-%s-%d", node, i) }

// NodeBuilder builds a node's inventory.
type NodeBuilder struct {
	a         events.Available
	n         int
	model     string
	memMiB    int
	unhealthy map[int]bool
}

// Node returns a builder of node name with 8 healthy H100s.
func Node(name string) *NodeBuilder {
	return &NodeBuilder{a: events.Available{Node: name, BootID: "boot-1", Driver: "550.54"}, n: 8,
		model: "NVIDIA H100 80GB HBM3", memMiB: 81559, unhealthy: map[int]bool{}}
}

// GPUs sets the number of GPUs; their UUIDs are GPU(name, 0..n-1).
func (b *NodeBuilder) GPUs(n int) *NodeBuilder { b.n = n; return b }

// Model sets every GPU's model.
func (b *NodeBuilder) Model(m string) *NodeBuilder { b.model = m; return b }

// MemoryMiB sets every GPU's memory.
func (b *NodeBuilder) MemoryMiB(m int) *NodeBuilder { b.memMiB = m; return b }

// Unhealthy marks GPUs (by index) unhealthy in the inventory.
func (b *NodeBuilder) Unhealthy(idx ...int) *NodeBuilder {
	for _, i := range idx {
		b.unhealthy[i] = true
	}
	return b
}

// BootID sets the agent's boot id.
func (b *NodeBuilder) BootID(id string) *NodeBuilder { b.a.BootID = id; return b }

// Available returns the inventory event.
func (b *NodeBuilder) Available() events.Available {
	a := b.a
	a.GPUs = make([]events.GPU, b.n)
	a.FreeGPUs = 0
	for i := range a.GPUs {
		a.GPUs[i] = events.GPU{UUID: GPU(a.Node, i), Index: i, Model: b.model, MemoryMiB: b.memMiB, Healthy: !b.unhealthy[i]}
		if !b.unhealthy[i] {
			a.FreeGPUs++
		}
	}
	return a
}

// On is a placement on GPUs (by index) of a node built by Node.
func On(node string, idx ...int) events.Placement {
	p := events.Placement{Node: node, GPUs: make([]string, len(idx))}
	for i, x := range idx {
		p.GPUs[i] = GPU(node, x)
	}
	return p
}

// Dispatch is the scheduler's placement of a task.
func Dispatch(task string, ps ...events.Placement) events.Dispatched {
	return events.Dispatched{TaskID: task, Placements: ps, Reason: "fits"}
}

// UnknownTask is an event of a type this build does not know, on a task's
// subjects. Append it with Log.Append.
func UnknownTask(task string, typ events.Type) events.Unknown {
	return events.Unknown{Type: typ, Version: events.SchemaVersion, K: task, Raw: []byte(`{}`)}
}

// UnknownNode is an event of a type this build does not know, on a node's
// subjects. Append it with Log.AppendOn(NodeSubject(...), ...).
func UnknownNode(node string, typ events.Type) events.Unknown {
	return events.Unknown{Type: typ, Version: events.SchemaVersion, K: node, Raw: []byte(`{}`)}
}

// NodeSubject is the subject of an event of type typ about node.
func NodeSubject(node string, typ events.Type) string {
	return events.NodePrefix + node + "." + string(typ)
}

// Record is e as the log would have decoded it at sequence seq, written at
// time at, on events.Subject(e).
func Record(seq uint64, at time.Time, e events.Event) events.Record {
	return RecordOn(seq, at, events.Subject(e), e)
}

// RecordOn is Record on an explicit subject (for unknown node events).
func RecordOn(seq uint64, at time.Time, subject string, e events.Event) events.Record {
	env := events.Envelope{ID: fmt.Sprintf("evt-%d", seq), Type: e.EventType(), Version: events.SchemaVersion, Time: at}
	if u, ok := e.(events.Unknown); ok {
		env.Version, env.Data = u.Version, u.Raw
	} else if b, err := json.Marshal(e); err == nil {
		env.Data = b
	}
	return events.Record{Seq: seq, Subject: subject, Envelope: env, Event: e}
}

// Log builds a sequence of records: sequences from 1 without gaps, times
// from Epoch a second apart unless set.
type Log struct {
	recs []events.Record
	next time.Time
	step time.Duration
}

// NewLog returns an empty log whose first record is at Epoch.
func NewLog() *Log { return &Log{next: Epoch, step: time.Second} }

// Step sets the time between consecutive records.
func (l *Log) Step(d time.Duration) *Log { l.step = d; return l }

// At sets the time of the next record; later ones follow it by Step.
func (l *Log) At(t time.Time) *Log { l.next = t; return l }

// Append adds events at the next sequences, on their subjects.
func (l *Log) Append(es ...events.Event) *Log {
	for _, e := range es {
		l.add(events.Subject(e), e)
	}
	return l
}

// AppendOn adds one event on an explicit subject.
func (l *Log) AppendOn(subject string, e events.Event) *Log {
	l.add(subject, e)
	return l
}

func (l *Log) add(subject string, e events.Event) {
	l.recs = append(l.recs, RecordOn(uint64(len(l.recs)+1), l.next, subject, e))
	l.next = l.next.Add(l.step)
}

// Records returns the records so far (the log's own slice; do not modify).
func (l *Log) Records() []events.Record { return l.recs }

// LastSeq is the sequence of the last record (0 if none).
func (l *Log) LastSeq() uint64 { return uint64(len(l.recs)) }

// Fold applies the log to a new state.
func (l *Log) Fold() *domain.State { return Fold(l.recs) }

// Fold applies records, in order, to a new state.
func Fold(rs []events.Record) *domain.State {
	st := domain.NewState()
	for _, r := range rs {
		st.Apply(r)
	}
	return st
}
