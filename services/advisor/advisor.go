package advisor

import (
	"context"
	"encoding/json"
	"math"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// Config of the advisor.
type Config struct {
	Log    events.Log
	JS     jetstream.JetStream // publishes to the advice stream
	Policy *policy.Policy      // the scheduler's policy, for reasons
	Logger zerolog.Logger
	Now    func() time.Time
	Tick   time.Duration // re-advise without events (default 5 s)
	Ready  func()
}

// Advisor is one running advisor.
type Advisor struct {
	cfg  Config
	st   *domain.State
	last map[string]estimate.Advice
}

// Run blocks until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Tick == 0 {
		cfg.Tick = 5 * time.Second
	}
	if cfg.Policy == nil {
		cfg.Policy = policy.New(policy.Options{})
	}
	a := &Advisor{cfg: cfg, st: domain.NewState(), last: map[string]estimate.Advice{}}
	if _, err := cfg.JS.CreateOrUpdateStream(ctx, events.AdviceStream(1)); err != nil {
		return err
	}
	if _, err := events.ReadAll(ctx, cfg.Log, 1, "", func(r events.Record) error { a.st.Apply(r); return nil }); err != nil {
		return err
	}
	f, err := cfg.Log.Follow(ctx, a.st.Seq+1, "")
	if err != nil {
		return err
	}
	defer f.Close()
	recs := make(chan events.Stored, 1024)
	go func() {
		for {
			m, err := f.Next(ctx)
			if err != nil {
				close(recs)
				return
			}
			recs <- m
		}
	}()
	if cfg.Ready != nil {
		cfg.Ready()
	}
	tick := time.NewTicker(cfg.Tick)
	defer tick.Stop()
	for {
		a.publish(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case m, ok := <-recs:
			if !ok {
				return ctx.Err()
			}
			a.apply(m)
		drain:
			for {
				select {
				case m, ok := <-recs:
					if !ok {
						break drain
					}
					a.apply(m)
				default:
					break drain
				}
			}
		}
	}
}

func (a *Advisor) apply(m events.Stored) {
	r, err := events.Decode(m)
	if err != nil {
		a.cfg.Logger.Error().Err(err).Msg("advisor: undecodable event skipped")
		return
	}
	a.st.Apply(r)
}

// Advise computes the advice for every queued task, in queue order: the
// reason from the real policy (explained), the wait from the source's
// baseline formula, the first undone playbook item.
func Advise(st *domain.State, p *policy.Policy, now time.Time) []estimate.Advice {
	res := p.With(true).Plan(policy.Input{State: st, Now: now})
	var out []estimate.Advice
	for i, t := range st.Queued() {
		w := estimate.SeedFormula(st, t)
		act := estimate.NextAction(t)
		why := res.Waiting[t.ID]
		if why.Reason == "" {
			why.Reason, why.Blockers = "starting", []string{} // placed by this very pass
		}
		pos := why.Position
		if pos == 0 {
			pos = i + 1
		}
		out = append(out, estimate.Advice{
			TaskID: t.ID, State: string(t.State), Position: pos,
			P50WaitS: w.Seconds(), P90WaitS: 2 * w.Seconds(),
			P50Start: now.Add(w), P90Start: now.Add(2 * w), Method: "seed-formula",
			Reason: why.Reason, Blockers: why.Blockers, Action: act.Item, ActionText: act.Text,
			Suggestions: []string{}, BasedOnSeq: st.Seq, At: now,
		})
	}
	return out
}

// material reports whether new advice differs enough from old to publish.
func material(old, cur estimate.Advice) bool {
	if old.Position != cur.Position || old.Reason != cur.Reason || old.Action != cur.Action || old.Alert != cur.Alert || old.State != cur.State {
		return true
	}
	d := math.Abs(old.P50WaitS - cur.P50WaitS)
	return d > 60 && d > 0.1*math.Max(old.P50WaitS, 1)
}

func (a *Advisor) publish(ctx context.Context) {
	now := a.cfg.Now()
	adv := Advise(a.st, a.cfg.Policy, now)
	seen := map[string]bool{}
	for _, v := range adv {
		seen[v.TaskID] = true
		if old, ok := a.last[v.TaskID]; ok && !material(old, v) {
			continue
		}
		a.send(ctx, v)
	}
	// Tasks that left the queue get a final advice with their state.
	ids := make([]string, 0)
	for id := range a.last {
		if !seen[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		t := a.st.Tasks[id]
		if t == nil {
			delete(a.last, id)
			continue
		}
		a.send(ctx, estimate.Advice{TaskID: id, State: string(t.State), Reason: "", Blockers: []string{}, Suggestions: []string{},
			Action: "", BasedOnSeq: a.st.Seq, At: now})
		delete(a.last, id)
	}
}

func (a *Advisor) send(ctx context.Context, v estimate.Advice) {
	b, _ := json.Marshal(v)
	if _, err := a.cfg.JS.Publish(ctx, events.AdviceSubject(v.TaskID), b); err != nil {
		a.cfg.Logger.Warn().Err(err).Str("task", v.TaskID).Msg("advisor: publish failed")
		return
	}
	if v.State == string(domain.Queued) {
		a.last[v.TaskID] = v
	}
}
