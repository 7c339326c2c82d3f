package submitter

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// nodeNotFound is a 404 naming the node.
func nodeNotFound(node string) error {
	return &opError{Status: http.StatusNotFound, NotFound: true, Field: "node", Msg: "node " + node + " not found"}
}

// nodes lists every node the log knows, with its GPUs and who holds them,
// and its last heartbeat where the heartbeat bucket is reachable.
func (s *server) nodes(ctx context.Context) ([]api.NodeView, error) {
	if err := s.sync(ctx); err != nil {
		return nil, err
	}
	var out []api.NodeView
	s.m.read(func(st *domain.State) {
		for _, name := range st.NodeNames() {
			out = append(out, nodeView(st, name, st.Nodes[name]))
		}
	})
	if kv := s.heartbeats(ctx); kv != nil {
		for i := range out {
			e, err := kv.Get(ctx, out[i].Node)
			if err != nil {
				continue
			}
			var beat struct {
				Time        time.Time      `json:"time"`
				Utilization map[string]int `json:"utilization"`
			}
			at := e.Created()
			if json.Unmarshal(e.Value(), &beat) == nil && !beat.Time.IsZero() {
				at = beat.Time
			}
			for j, g := range out[i].GPUs {
				if u, ok := beat.Utilization[g.UUID]; ok {
					out[i].GPUs[j].Utilization = &u
				}
			}
			at = at.UTC()
			out[i].LastHeartbeat = &at
		}
	}
	return out, nil
}

// nodeView is a node as the log knows it, with its GPUs and who holds
// them (no heartbeat); call it with the state locked.
func nodeView(st *domain.State, name string, n *domain.Node) api.NodeView {
	v := api.NodeView{Node: name, State: nodeState(n), Reason: n.Reason, BootID: n.BootID, GPUs: []api.GPUView{}}
	for _, g := range n.GPUs {
		gv := api.GPUView{UUID: g.UUID, Index: g.Index, Model: g.Model, MemoryMiB: g.MemoryMiB, Healthy: g.Healthy}
		if id := st.Owner[g.UUID]; id != "" {
			gv.TaskID = &id
		}
		v.GPUs = append(v.GPUs, gv)
	}
	return v
}

// nodeState is the operator's word for a node's state.
func nodeState(n *domain.Node) string {
	switch n.State {
	case domain.NodeUp:
		return "ready"
	default:
		return string(n.State)
	}
}

// heartbeats opens the agents' heartbeat bucket when the log is on
// JetStream (nil otherwise, or when it does not exist yet).
func (s *server) heartbeats(ctx context.Context) jetstream.KeyValue {
	j, ok := s.log.(interface{ JetStream() jetstream.JetStream })
	if !ok {
		return nil
	}
	kv, err := j.JetStream().KeyValue(ctx, events.HeartbeatBucket)
	if err != nil {
		return nil
	}
	return kv
}

// drain appends drained (preempt: its preemptible tasks are preempted and
// resume elsewhere) or, with undrain, undrained.
func (s *server) drain(ctx context.Context, req api.DrainRequest, undrain bool) (api.NodeView, error) {
	if err := mayAdmin(ctx, "draining a node"); err != nil {
		return api.NodeView{}, err
	}
	if !events.ValidKey(req.Node) {
		return api.NodeView{}, invalid("node", "must be a node name (one NATS subject token: no '.', '*', '>' or spaces)")
	}
	for field, text := range map[string]string{"reason": req.Reason, "by": req.By} {
		if err := domain.CheckText(field, text, false); err != nil {
			return api.NodeView{}, err
		}
	}
	if len(req.Reason) > 1024 {
		return api.NodeView{}, invalid("reason", "must be at most 1024 bytes")
	}
	if undrain && req.Preempt {
		return api.NodeView{}, invalid("preempt", "applies to drain only")
	}
	if err := s.sync(ctx); err != nil {
		return api.NodeView{}, err
	}
	var (
		known bool
		state domain.NodeState
	)
	s.m.read(func(st *domain.State) {
		if n := st.Nodes[req.Node]; n != nil {
			known, state = true, n.State
		}
	})
	if !known {
		return api.NodeView{}, nodeNotFound(req.Node)
	}
	var ev events.Event = events.Drained{Node: req.Node, Reason: req.Reason, By: req.By, Preempt: req.Preempt}
	if undrain {
		if state != domain.NodeDrained {
			return api.NodeView{}, &opError{Status: http.StatusConflict, Field: "node", Msg: "node " + req.Node + " is " + nodeState(&domain.Node{State: state}) + ", not drained"}
		}
		ev = events.Undrained{Node: req.Node, Reason: req.Reason, By: req.By}
	}
	ack, err := events.Append(ctx, s.log, ev, events.Meta{Time: s.now()}, "", nil)
	if err != nil {
		return api.NodeView{}, err
	}
	if err := s.m.waitFor(ctx, ack.Seq, s.syncTimeout); err != nil && !errors.Is(err, context.Canceled) {
		s.logger.Warn().Err(err).Msg("drain: read model behind")
	}
	all, err := s.nodes(ctx)
	if err != nil {
		return api.NodeView{}, err
	}
	for _, v := range all {
		if v.Node == req.Node {
			return v, nil
		}
	}
	return api.NodeView{}, nodeNotFound(req.Node)
}

func (s *server) httpNodes(w http.ResponseWriter, r *http.Request) {
	res, err := s.nodes(r.Context())
	s.respond(w, "nodes", res, err)
}

func (s *server) httpDrain(undrain bool) http.HandlerFunc {
	op := api.OpDrain
	if undrain {
		op = api.OpUndrain
	}
	return func(w http.ResponseWriter, r *http.Request) {
		var req api.DrainRequest
		err := readBody(w, r, &req)
		if err == nil {
			if req.Node != "" && req.Node != r.PathValue("node") {
				err = invalid("node", "differs from the node in the path")
			}
			req.Node = r.PathValue("node")
		}
		if err != nil {
			s.fail(w, op, err)
			return
		}
		res, err := s.drain(r.Context(), req, undrain)
		s.respond(w, op, res, err)
	}
}
