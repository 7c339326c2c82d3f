package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/api"
)

// stallRider carries a command that follows a task by asking (logs -f,
// watch with a team's credentials) across a NATS stall, as watch's
// JetStream follower rides one out: a request that goes unanswered — a
// timeout, no responder (a submitter or an agent restarting), a
// connection reconnecting, the server's own failure (5xx) — is asked
// again every wait until it is answered or the command is stopped, with
// one note on stderr when the stall begins and one when it ends. A
// refusal (exit 2 or 3) and a connection that gave up for good end the
// command at once, as they do any other.
type stallRider struct {
	stderr io.Writer
	wait   time.Duration
	since  time.Time // when the current stall began; zero when none
}

// do calls fn until it returns anything but a stall, or ctx ends.
func (r *stallRider) do(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if !stalled(err) {
			if err == nil && !r.since.IsZero() {
				fmt.Fprintf(r.stderr, "gpuq: NATS answers again after %s; going on\n", elapsed(time.Since(r.since)))
				r.since = time.Time{}
			}
			return err
		}
		if r.since.IsZero() {
			r.since = time.Now()
			fmt.Fprintf(r.stderr, "gpuq: %v; asking again every %s until it answers (Ctrl-C to stop)\n", err, r.wait)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(r.wait):
		}
	}
}

// stalled reports whether err is a request that went unanswered for now
// rather than refused: worth asking again.
func stalled(err error) bool {
	var ae *api.Error
	switch {
	case err == nil, errors.Is(err, nats.ErrConnectionClosed):
		return false
	case errors.As(err, &ae):
		return ae.Status >= 500
	}
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, context.DeadlineExceeded)
}
