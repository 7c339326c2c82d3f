package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"runtime"
	"runtime/metrics"
	"time"

	"github.com/google/uuid"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
)

// RawMsgBytes is the payload size of the raw publish measurement.
const RawMsgBytes = 256

// Rate is a count over a duration.
type Rate struct {
	N     int           `json:"n"`
	Bytes int64         `json:"bytes,omitempty"` // payload bytes moved
	Took  time.Duration `json:"took_ns"`
	// CPU is the process's CPU time over Took (server and client, both in
	// process): unlike Took, it hardly grows when other work shares the
	// machine.
	CPU time.Duration `json:"cpu_ns"`
}

// CPUPerOp is CPU time per counted item.
func (r Rate) CPUPerOp() time.Duration {
	if r.N == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.N)
}

// PerS is the rate per second.
func (r Rate) PerS() float64 {
	return perSecond(int64(r.N), r.Took)
}

// perSecond is n per second of d; 0 when d is not positive.
func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// RawPublish measures plain JetStream: n async publishes of RawMsgBytes
// random bytes, each with a Nats-Msg-Id, on the audit stream as gpuq
// creates it (file store, 24 h de-duplication window), one subject per
// message of the same shape as a submission's (gpuq.task.<36 chars>.submitted),
// from one goroutine with up to maxPending acks outstanding; the clock stops
// when every ack is in.
func RawPublish(ctx context.Context, dir string, n int) (Rate, error) {
	return rawPublish(ctx, dir, n, 1)
}

// RawPublishR3 is RawPublish on a 3-server cluster with the stream at R3:
// each publish is acknowledged once two of the three servers have it.
func RawPublishR3(ctx context.Context, dir string, n int) (Rate, error) {
	return rawPublish(ctx, dir, n, 3)
}

func rawPublish(ctx context.Context, dir string, n, replicas int) (Rate, error) {
	return pipelined(ctx, dir, n, replicas, func(j js.JetStream) (func(int) error, func() int64) {
		payload := make([]byte, RawMsgBytes)
		_, _ = rand.Read(payload)
		publish := func(i int) error {
			id := taskID(i)
			_, err := j.PublishAsync(events.TaskPrefix+id+".submitted", payload, js.WithMsgID("raw:"+id), stall)
			return err
		}
		return publish, func() int64 { return int64(n) * RawMsgBytes }
	})
}

// pipelined is the loop of RawPublish and Ingest: on a fresh cluster of
// replicas servers, setup (not timed) gives what publishes message i and
// the bytes published; n of them from one goroutine with up to maxPending
// acks outstanding, the clock stopping when every ack is in, and the
// stream then checked to hold n messages.
func pipelined(ctx context.Context, dir string, n, replicas int, setup func(js.JetStream) (publish func(i int) error, bytes func() int64)) (Rate, error) {
	nd, err := startNodes(ctx, dir, replicas)
	if err != nil {
		return Rate{}, err
	}
	defer nd.close()
	p, err := nd.publisher(nil)
	if err != nil {
		return Rate{}, err
	}
	defer p.close()
	publish, bytes := setup(p.js)
	start, cpu := time.Now(), cpuTime()
	for i := 0; i < n; i++ {
		if i%1024 == 0 && ctx.Err() != nil {
			return Rate{}, ctx.Err()
		}
		if err := publish(i); err != nil {
			return Rate{}, err
		}
	}
	if err := p.wait(ctx); err != nil {
		return Rate{}, err
	}
	took, cpu := time.Since(start), cpuTime()-cpu
	if err := expectSeq(ctx, nd, uint64(n)); err != nil {
		return Rate{}, err
	}
	return Rate{N: n, Bytes: bytes(), Took: took, CPU: cpu}, nil
}

// Ingest measures gpuq's submit path as a gateway runs it, pipelined: for
// each of n requests, domain.Request.Validate, the idempotency lookup in
// the fold's index (a map here), a UUID v7 task id, events.Encode of the
// submitted event and an async publish with the submitter's message id
// (submit:<team>:<key>). Like RawPublish: one goroutine, up to maxPending
// acks outstanding, the clock stops at the last ack. Not in the loop: the
// transport (HTTP or NATS request/reply, decoding the request) and the
// per-request wait for the fold that the submitter does before answering.
func Ingest(ctx context.Context, dir string, n int) (Rate, error) {
	return ingest(ctx, dir, n, 1)
}

// IngestR3 is Ingest on a 3-server cluster with the stream at R3.
func IngestR3(ctx context.Context, dir string, n int) (Rate, error) {
	return ingest(ctx, dir, n, 3)
}

func ingest(ctx context.Context, dir string, n, replicas int) (Rate, error) {
	return pipelined(ctx, dir, n, replicas, func(j js.JetStream) (func(int) error, func() int64) {
		sub := newSubmitter(j)
		publish := func(i int) error { return sub.submit(request(i), time.Now()) }
		return publish, func() int64 { return sub.bytes }
	})
}

// submitter is the pipelined submit path of Ingest and Lifecycle.
type submitter struct {
	js    js.JetStream
	idem  map[string]string
	bytes int64
}

func newSubmitter(j js.JetStream) *submitter {
	return &submitter{js: j, idem: map[string]string{}}
}

// submit validates r and publishes its submitted event asynchronously; a
// known idempotency key publishes nothing.
func (s *submitter) submit(r domain.Request, now time.Time) error {
	if err := r.Validate(domain.DefaultLimits); err != nil {
		return err
	}
	k := domain.IdemKey(r.Team, r.IdempotencyKey)
	if _, dup := s.idem[k]; dup {
		return nil
	}
	u, err := uuid.NewV7()
	if err != nil {
		return err
	}
	subj, data, _, err := events.Encode(submittedOf(r, u.String(), now), events.Meta{Time: now})
	if err != nil {
		return err
	}
	if _, err := s.js.PublishAsync(subj, data, js.WithMsgID(submitMsgID(r.Team, r.IdempotencyKey)), stall); err != nil {
		return err
	}
	s.idem[k] = u.String()
	s.bytes += int64(len(data))
	return nil
}

func expectSeq(ctx context.Context, nd *node, want uint64) error {
	last, err := nd.lastSeq(ctx)
	if err != nil {
		return err
	}
	if last != want {
		return fmt.Errorf("bench: the stream holds %d messages, want %d", last, want)
	}
	return nil
}

// LogResult is what the history log measurements found.
type LogResult struct {
	Events      int           `json:"events"`
	LogBytes    int64         `json:"log_bytes"` // envelope bytes
	RawReplay   Rate          `json:"raw_replay"`
	Fold        Rate          `json:"fold"`
	FoldMem     FoldMem       `json:"fold_mem"` // of the fold that counts
	Rounds      int           `json:"rounds"`
	Restart     time.Duration `json:"restart_ns"` // server start + stream open + snapshot + fold of the tail
	RestartCPU  time.Duration `json:"restart_cpu_ns"`
	ServerStart time.Duration `json:"server_start_ns"` // of Restart: server recovery and stream open
	Tasks       int           `json:"tasks"`           // in the folded state
	Ignored     int           `json:"ignored"`         // facts the fold refused (0 for a sound log)
	// The fold's two halves in memory, on the first sampleEvents events
	// (no server in the loop): events.Decode alone, then State.Apply
	// alone on the decoded records.
	Decode Rate `json:"decode_in_memory"`
	Apply  Rate `json:"apply_in_memory"`
	// Snapshot is the snapshot the restart starts from.
	Snapshot SnapshotResult `json:"snapshot"`
	// Aged is the same restart once the log's events are older than the
	// stream's de-duplication window (see History, step 5): Restart,
	// ServerStart and the snapshot's parts of that restart.
	Aged AgedRestart `json:"aged"`
	// Services: each service's restart from its own snapshot at the same
	// sequence, the server up (History, step 4b), in Services order.
	Services []ServiceRestart `json:"services"`
}

// AgedRestart is History's step 5.
type AgedRestart struct {
	Restart     time.Duration `json:"restart_ns"`
	ServerStart time.Duration `json:"server_start_ns"`
	// Snapshot: the sequence the restart loaded, its tail, and its
	// load, decode and tail-fold times (the snapshot's size and cost are
	// LogResult.Snapshot's).
	Snapshot SnapshotResult `json:"snapshot"`
}

// sampleEvents is how many events History keeps for the in-memory split.
const sampleEvents = 20_000

// History measures reading a log of real gpuq events (see history: nodes
// becoming available, tasks submitted, dispatched, started, completed):
//
//  1. Build the log: total events, async publishes without message ids.
//  2. rounds times, alternately: the raw replay (an ordered consumer over
//     the stream, touching each message's data) and the fold
//     (events.ReadAll through the JetStream adapter, decoding every
//     envelope, and domain.State.Apply). The best round of each counts.
//  3. A snapshot as the scheduler takes it (the state and the run-time
//     predictor, stored in the snapshot bucket), covering all but the last
//     restartTail(total) events: the most a scheduler folds after its
//     snapshot when it crashed (after a clean stop, none).
//  4. A cold restart: stop the server, start a new one on the same store,
//     open the stream as a service does, load the snapshot and fold the
//     events after it. The data is in the OS page cache. Step 1 wrote
//     every event within the last minute, so all of them are inside the
//     stream's de-duplication window (24 h), and the server's recovery
//     reloads each one to rebuild its table of message ids: the worst
//     case, a log that grew by 1M events within a day.
//     4b. With the server up, each service's restart (Services) from its
//     own snapshot (at the same sequence; the advisor's, which snapshots
//     ten times as often, closer to the end), as the service restarts
//     (service.Snapshots, then service.Fold's catch-up with its fold
//     hook): see services.go.
//  5. The same restart of the same log once its events are older than the
//     window, as in a log that took more than a day to grow: the server's
//     recovery then reloads none of them. A day cannot pass in a
//     benchmark, so the window is shortened to agedWindow instead (a
//     stream update, between two runs of the server, not measured), the
//     benchmark waits it out, and the measured start opens the stream as
//     gpuq does, which restores the 24 h window (the server does not
//     rebuild its table on that update: the ids it would load are all
//     older than the window anyway).
func History(ctx context.Context, dir string, nodes, total, rounds int) (LogResult, error) {
	res := LogResult{Events: total, Rounds: rounds}
	nd, err := startNode(ctx, dir)
	if err != nil {
		return res, err
	}
	defer nd.close()

	// 1. The log.
	var sample []events.Stored
	if res.LogBytes, sample, err = writeHistory(ctx, nd, nodes, total); err != nil {
		return res, err
	}

	// 2. Raw replay and fold, alternately.
	for r := 0; r < max(rounds, 1); r++ {
		raw, err := rawReplay(ctx, nd.log.JetStream(), total)
		if err != nil {
			return res, err
		}
		if res.RawReplay.Took == 0 || raw.Took < res.RawReplay.Took {
			res.RawReplay = raw
		}
		fold, mem, st, err := foldLog(ctx, nd.log)
		if err != nil {
			return res, err
		}
		if res.Fold.Took == 0 || fold.Took < res.Fold.Took {
			res.Fold, res.FoldMem = fold, mem
		}
		res.Tasks, res.Ignored = len(st.Tasks), st.Ignored
		if fold.N != total {
			return res, fmt.Errorf("bench: the fold read %d events, want %d", fold.N, total)
		}
	}

	res.Decode, res.Apply, err = split(sample)
	if err != nil {
		return res, err
	}
	sample = nil

	// 3. The snapshot.
	tail := restartTail(total)
	if res.Snapshot, err = takeSnapshot(ctx, nd, uint64(total-tail)); err != nil {
		return res, fmt.Errorf("snapshot: %w", err)
	}
	res.Snapshot.TailEvents = tail
	if err := takeServiceSnapshots(ctx, nd.log, total); err != nil {
		return res, fmt.Errorf("service snapshots: %w", err)
	}

	// 4. Restart.
	check := func(st *domain.State, n int) error {
		if n != tail || st.Seq != uint64(total) || len(st.Tasks) != res.Tasks {
			return fmt.Errorf("bench: the restart folded %d events after the snapshot (want %d), up to %d (want %d), %d tasks (want %d)",
				n, tail, st.Seq, total, len(st.Tasks), res.Tasks)
		}
		return nil
	}
	nd.stop()
	runtime.GC()
	start, cpu := time.Now(), cpuTime()
	if err := nd.start(ctx); err != nil {
		return res, err
	}
	res.ServerStart = time.Since(start)
	st, n, err := restartFromSnapshot(ctx, nd.log, &res.Snapshot)
	if err != nil {
		return res, err
	}
	res.Restart, res.RestartCPU = time.Since(start), cpuTime()-cpu
	if err := check(st, n); err != nil {
		return res, err
	}
	st = nil

	// 4b. Each service's restart, the server up.
	for _, svc := range Services {
		sr, err := restartService(ctx, nd.log, svc, total)
		if err != nil {
			return res, err
		}
		res.Services = append(res.Services, sr)
	}

	// 5. The aged restart.
	if err := nd.age(ctx, agedWindow); err != nil {
		return res, fmt.Errorf("aging the log: %w", err)
	}
	runtime.GC()
	res.Aged.Snapshot = SnapshotResult{TailEvents: tail} // the restart fills in what it loaded and how long it took
	start = time.Now()
	if err := nd.start(ctx); err != nil {
		return res, err
	}
	res.Aged.ServerStart = time.Since(start)
	if st, n, err = restartFromSnapshot(ctx, nd.log, &res.Aged.Snapshot); err != nil {
		return res, err
	}
	res.Aged.Restart = time.Since(start)
	if err := check(st, n); err != nil {
		return res, err
	}
	return res, nil
}

// writeHistory appends total events of history(nodes) to nd's log with
// async publishes and returns their bytes and the first sampleEvents of
// them.
func writeHistory(ctx context.Context, nd *node, nodes, total int) (int64, []events.Stored, error) {
	p, err := nd.publisher(nil)
	if err != nil {
		return 0, nil, err
	}
	defer p.close()
	var (
		bytes  int64
		sample []events.Stored
	)
	err = history(nodes, total, func(e events.Event, at time.Time) error {
		subj, data, _, err := events.Encode(e, events.Meta{Time: at})
		if err != nil {
			return err
		}
		if len(sample) < sampleEvents {
			sample = append(sample, events.Stored{Seq: uint64(len(sample) + 1), Subject: subj, Data: data, Time: at})
		}
		bytes += int64(len(data))
		_, err = p.js.PublishAsync(subj, data, stall)
		return err
	})
	if err == nil {
		err = p.wait(ctx)
	}
	if err == nil {
		err = expectSeq(ctx, nd, uint64(total))
	}
	return bytes, sample, err
}

// split times events.Decode and State.Apply separately on msgs.
func split(msgs []events.Stored) (dec, app Rate, err error) {
	recs := make([]events.Record, len(msgs))
	start, cpu := time.Now(), cpuTime()
	for i, m := range msgs {
		if recs[i], err = events.Decode(m); err != nil {
			return dec, app, err
		}
	}
	dec = Rate{N: len(msgs), Took: time.Since(start), CPU: cpuTime() - cpu}
	st := domain.NewState()
	start, cpu = time.Now(), cpuTime()
	for _, r := range recs {
		st.Apply(r)
	}
	app = Rate{N: len(recs), Took: time.Since(start), CPU: cpuTime() - cpu}
	return dec, app, nil
}

// rawReplay reads n messages with an ordered consumer from the start, as
// the adapter does (same pull batch), without decoding.
func rawReplay(ctx context.Context, j js.JetStream, n int) (Rate, error) {
	start, cpu := time.Now(), cpuTime()
	c, err := j.OrderedConsumer(ctx, events.StreamName, js.OrderedConsumerConfig{DeliverPolicy: js.DeliverAllPolicy})
	if err != nil {
		return Rate{}, err
	}
	it, err := c.Messages(js.PullMaxMessages(4096))
	if err != nil {
		return Rate{}, err
	}
	defer it.Stop()
	var bytes int64
	for i := 0; i < n; i++ {
		m, err := it.Next()
		if err != nil {
			return Rate{}, err
		}
		bytes += int64(len(m.Data()))
	}
	return Rate{N: n, Bytes: bytes, Took: time.Since(start), CPU: cpuTime() - cpu}, nil
}

// FoldMem is what a fold did to the process's heap (the embedded server's
// included: it runs in the process).
type FoldMem struct {
	// GCs is the garbage collections that ran during the fold.
	GCs uint64 `json:"gcs"`
	// HeapPeak is the most heap held by objects (live or not yet swept),
	// sampled every foldSampleEvery events; HeapLive the heap the last
	// collection before the fold's end found live.
	HeapPeak uint64 `json:"heap_peak_bytes"`
	HeapLive uint64 `json:"heap_live_bytes"`
}

// foldSampleEvery is how often foldLog samples the heap.
const foldSampleEvery = 4096

// foldLog folds the whole log into a fresh state: events.ReadAll (the
// adapter's ordered consumer, events.Decode) and domain.State.Apply, what
// every service does on start.
func foldLog(ctx context.Context, l *jetstream.Log) (Rate, FoldMem, *domain.State, error) {
	var mem FoldMem
	gcs0 := heapMetrics(&mem)
	start, cpu := time.Now(), cpuTime()
	st := domain.NewState()
	n := 0
	_, err := events.ReadAll(ctx, l, 1, "", func(r events.Record) error {
		st.Apply(r)
		if n++; n%foldSampleEvery == 0 {
			heapMetrics(&mem)
		}
		return nil
	})
	rate := Rate{N: n, Took: time.Since(start), CPU: cpuTime() - cpu}
	mem.GCs = heapMetrics(&mem) - gcs0
	return rate, mem, st, err
}

// heapMetrics raises m.HeapPeak to the heap held by objects now, sets
// m.HeapLive, and returns the collections so far.
func heapMetrics(m *FoldMem) (gcs uint64) {
	s := [3]metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s[:])
	m.HeapPeak = max(m.HeapPeak, s[0].Value.Uint64())
	m.HeapLive = s[1].Value.Uint64()
	return s[2].Value.Uint64()
}
