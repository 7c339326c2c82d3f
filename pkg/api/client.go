package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Error is a failed request.
type Error struct {
	Msg      string
	Field    string
	NotFound bool
	// Status is the reply's HTTP-equivalent status (Reply.Status); 0 from
	// a server that does not send it.
	Status int
}

func (e *Error) Error() string {
	if e.Field != "" && e.Field != "-" {
		return e.Field + ": " + e.Msg
	}
	return e.Msg
}

// IsInvalid reports whether err is the caller's fault (a bad field).
func IsInvalid(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Field != ""
}

// IsRefused reports whether err is the server refusing the request — the
// caller's input, credentials or the task's state — rather than failing
// to answer it: a field named, not found, or a 4xx status (403 without a
// field: an operation these credentials may not ask for).
func IsRefused(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Field != "" || e.NotFound || e.Status >= 400 && e.Status < 500)
}

// IsNotFound reports whether err says the task does not exist.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.NotFound
}

// unanswered is a request nobody answered, said for people; it unwraps
// to the NATS error (nats.ErrNoResponders), so that a caller can tell it
// from a refusal.
type unanswered struct {
	msg string
	err error
}

func (e *unanswered) Error() string { return e.msg }
func (e *unanswered) Unwrap() error { return e.err }

// Client calls the submitter over NATS.
type Client struct {
	NC      *nats.Conn
	Timeout time.Duration
	// Team, when set, sends every request on the team's scoped subjects
	// (Subject): what a ci-<team> user may publish.
	Team string
	// Job, when set, sends every request on that run's job API subjects
	// (JobSubject): what a job's own credential may publish.
	Job *Job
	// Refused, when set, receives the connection's permission errors (from
	// its nats.ErrorHandler): a request on a subject the user may not
	// publish to then fails at once, as an Error on the field "creds",
	// instead of waiting for its timeout.
	Refused <-chan error
}

// request sends body on subj and waits for the reply at most to; a
// refusal of the server's (Refused) ends it at once as an Error on
// "creds" naming what (the operation).
func (c *Client) request(subj, what string, body []byte, to time.Duration) (*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), to)
	defer cancel()
	refused := make(chan error, 1)
	if c.Refused != nil {
		go func() {
			for {
				select {
				case err := <-c.Refused:
					if strings.Contains(err.Error(), `"`+subj+`"`) {
						refused <- err
						cancel()
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	m, err := c.NC.RequestWithContext(ctx, subj, body)
	select {
	case rerr := <-refused:
		return nil, &Error{Field: "creds", Msg: fmt.Sprintf("the NATS server refused %s to these credentials: %v", what, rerr)}
	default:
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = nats.ErrTimeout
	}
	return m, err
}

// Call sends req to op and decodes the result into out.
func (c *Client) Call(op string, req, out any) error {
	_, err := c.CallPage(op, req, out)
	return err
}

// CallPage is Call that also returns the reply's Next: the cursor of the
// next page of a paginated answer, "" on the last.
func (c *Client) CallPage(op string, req, out any) (next string, err error) {
	body, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	to := c.Timeout
	if to == 0 {
		to = 10 * time.Second
	}
	subj := Subject(c.Team, op)
	if c.Job != nil {
		subj = JobSubject(c.Job.Node, c.Job.Task, c.Job.Run, op)
	}
	m, err := c.request(subj, op, body, to)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return "", &unanswered{NoResponders(op, c.NC.ConnectedUrl()).Error(), err}
		}
		return "", err
	}
	var r Reply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return "", fmt.Errorf("bad reply: %w", err)
	}
	if r.Error != "" {
		return "", &Error{Msg: r.Error, Field: r.Field, NotFound: r.NotFound, Status: r.Status}
	}
	if out != nil {
		return r.Next, json.Unmarshal(r.Result, out)
	}
	return r.Next, nil
}

// Queue lists the tasks (every task with all), asking for them a page at
// a time (QueueRequest) until the last.
func (c *Client) Queue(all bool) ([]TaskView, error) {
	out := []TaskView{}
	after := ""
	for {
		var page []TaskView
		next, err := c.CallPage(OpQueue, QueueRequest{All: all, After: after}, &page)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if next == "" || next == after || len(page) == 0 {
			return out, nil
		}
		after = next
	}
}

// Service is the gpuq service that answers op: the advisor for estimate
// and stats, the submitter for the rest.
func Service(op string) string {
	if op == OpEstimate || op == OpStats {
		return AdvisorQueueGroup
	}
	return QueueGroup
}

// NoResponders is the error of a request to op that no service answered:
// it names the service that answers op (a service subscribes only once it
// has folded the log, so after a restart the advisor answers stats
// minutes after the submitter answers the rest; before, the CLI blamed
// the submitter).
func NoResponders(op, url string) error {
	svc := Service(op)
	return fmt.Errorf("no gpuq %s is answering %s on %s: it is not running, or still catching up with the log after a start (its /healthz, or gpuq dev's, says which); is `gpuq dev` or the %s running?",
		svc, op, url, svc)
}
