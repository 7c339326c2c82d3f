package gpuagent

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/services/gpuagent/inventory"
)

// heartbeats puts the node's heartbeat every interval; lastOK is when
// NATS last accepted one.
func (a *Agent) heartbeats(ctx context.Context, kv jetstream.KeyValue) {
	t := time.NewTicker(a.cfg.Heartbeat)
	defer t.Stop()
	for {
		running := 0
		for _, pr := range a.snapshotProcs() {
			if pr {
				running++
			}
		}
		a.procMu.Lock()
		util := a.util
		a.procMu.Unlock()
		v, _ := json.Marshal(map[string]any{"node": a.cfg.Node, "boot_id": a.boot, "time": a.cfg.Now().UTC(), "running": running, "utilization": util})
		pctx, cancel := context.WithTimeout(ctx, a.cfg.Heartbeat)
		_, err := kv.Put(pctx, a.cfg.Node, v)
		cancel()
		switch {
		case err == nil:
			a.lastOK.Store(a.cfg.Now().UnixNano())
		case ctx.Err() == nil:
			a.cfg.Logger.Warn().Err(err).Msg("gpuagent: heartbeat failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// snapshotProcs is, without the fold's lock, whether each run is live
// (for the heartbeat's count only).
func (a *Agent) snapshotProcs() []bool {
	a.procMu.Lock()
	defer a.procMu.Unlock()
	return append([]bool(nil), a.liveRuns...)
}

// identity is the log's (events.Identifier), "" when the log cannot name
// itself (then every run is adopted, as before run records had it).
func (a *Agent) identity(ctx context.Context) string {
	idr, ok := a.cfg.Log.(events.Identifier)
	if !ok {
		return ""
	}
	var err error
	for try := 0; try < 5 && ctx.Err() == nil; try++ {
		var id string
		if id, err = idr.Identity(ctx); err == nil {
			return id
		}
		time.Sleep(200 * time.Millisecond)
	}
	a.cfg.Logger.Warn().Err(err).Msg("gpuagent: the log does not say which it is; adopting every run under the data directory")
	return ""
}

// busy is the GPUs live processes of this node hold, by UUID → run.
func (a *Agent) busy() map[string]string {
	out := map[string]string{}
	for _, pr := range a.procs {
		if pr.live() {
			for _, g := range pr.gpus {
				out[g] = pr.key
			}
		}
	}
	for _, p := range a.others {
		if !p.Exited() {
			for _, g := range p.Spec().GPUs {
				out[g] = "a run of another log (" + p.RunDir() + ")"
			}
		}
	}
	return out
}

// announce publishes available on start and whenever the inventory or
// health changed; health changes also publish unhealthy.
func (a *Agent) announce(ctx context.Context, force bool) error {
	gpus, err := a.inv.GPUs()
	if err != nil {
		return err
	}
	a.setUtil(gpus)
	if !force && sameInventory(gpus, a.gpus) {
		return nil
	}
	var bad []string
	for _, g := range gpus {
		if !g.Healthy {
			bad = append(bad, g.UUID)
		}
	}
	prevBad := map[string]bool{}
	for _, g := range a.gpus {
		if !g.Healthy {
			prevBad[g.UUID] = true
		}
	}
	a.gpus = gpus
	busy := a.busy()
	ev := events.Available{Node: a.cfg.Node, BootID: a.boot, Driver: a.inv.Driver()}
	for _, g := range gpus {
		ev.GPUs = append(ev.GPUs, events.GPU{UUID: g.UUID, Index: g.Index, Model: g.Model, MemoryMiB: g.MemoryMiB, Healthy: g.Healthy})
		if g.Healthy && !a.view.held[g.UUID] && busy[g.UUID] == "" {
			ev.FreeGPUs++
		}
	}
	if _, err := events.Append(ctx, a.cfg.Log, ev, events.Meta{Time: a.cfg.Now()}, "", nil); err != nil {
		return err
	}
	var newBad []string
	for _, u := range bad {
		if !prevBad[u] {
			newBad = append(newBad, u)
		}
	}
	if len(newBad) > 0 {
		reason := "NVML reports the GPU unhealthy"
		if r, ok := a.inv.UnhealthyReason(newBad[0]); ok && r != "" {
			reason = r
		}
		_, err = events.Append(ctx, a.cfg.Log, events.Unhealthy{Node: a.cfg.Node, GPUs: newBad, Reason: reason}, events.Meta{Time: a.cfg.Now()}, "", nil)
	}
	return err
}

// sameInventory compares two reads of the GPUs, utilization aside (it
// travels with the heartbeat, not in the log).
func sameInventory(a, b []inventory.GPU) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.Utilization, y.Utilization = 0, 0
		if x != y {
			return false
		}
	}
	return true
}

// setUtil keeps the GPUs' utilization for the next heartbeat.
func (a *Agent) setUtil(gpus []inventory.GPU) {
	util := map[string]int{}
	for _, g := range gpus {
		if g.Utilization >= 0 && g.UUID != "" {
			util[g.UUID] = g.Utilization
		}
	}
	a.procMu.Lock()
	a.util = util
	a.procMu.Unlock()
}
