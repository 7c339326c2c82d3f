package bench

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/decide"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
	"github.com/gpuq/gpuq/pkg/metrics"
	"github.com/gpuq/gpuq/pkg/policy"
	"github.com/gpuq/gpuq/pkg/service"
)

// testScheduler is the scheduler of this package's tests (it cannot
// import services/scheduler, which gpuq bench passes): the runtime's fold,
// decide.Plan with the default policy once its own appends are folded,
// the appends with the service's message ids and guards, awaited in the
// reaction; no lease, heartbeats, digest or snapshots. Its metrics are
// the service's pass and decision metrics.
func testScheduler(ctx context.Context, log *jetstream.Log, reg prometheus.Registerer, ready func()) error {
	pol := policy.New(policy.DefaultOptions())
	pred := estimate.NewPredictor(0)
	m := metrics.NewScheduler(reg, "bench-test", func() (bool, uint64) { return true, 0 })
	f := service.New("bench-test", log, zerolog.Nop(), nil)
	var waitFor uint64
	return f.Run(ctx, service.Hooks{
		Applied: func(st *domain.State, r events.Record, skipped string) {
			if skipped == "" {
				pred.Learn(st, r)
			}
		},
		CaughtUp: func(context.Context) error { ready(); return nil },
		React: func(ctx context.Context) error {
			var (
				cmds  []decide.Command
				start = time.Now()
			)
			f.Read(func(st *domain.State) {
				if st.Seq >= waitFor {
					cmds = decide.Plan(st, pol, start, decide.Liveness{}, pred.ForPolicy(start))
				}
			})
			if len(cmds) == 0 {
				return nil
			}
			msgs := make([]events.Msg, len(cmds))
			for i, c := range cmds {
				subj, data, _, err := events.Encode(c.Event, events.Meta{Time: start})
				if err != nil {
					return err
				}
				msgs[i] = events.Msg{Subject: subj, Data: data, MsgID: c.MsgID, Expect: c.Expect}
			}
			for i, r := range events.AppendAll(ctx, log, msgs) {
				switch {
				case errors.Is(r.Err, events.ErrConflict):
					m.Refused()
				case r.Err != nil:
					return r.Err
				default:
					waitFor = max(waitFor, r.Ack.Seq)
					if !r.Ack.Duplicate {
						m.Decided(cmds[i].Event)
					}
				}
			}
			m.Pass(time.Since(start))
			return nil
		},
		Tick: time.Second,
	})
}
