package submitter

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/domain"
)

// Who a request acts for. A request without a caller in its context (no
// HTTP tokens configured, or the NATS API's unscoped subjects, which the
// NATS server lets only trusted roles publish to) may act on every task.
// A team's caller — an HTTP token of the team, or a request on
// gpuq.api.v1.team.<team>.<op> — sees and changes only its team's tasks,
// submits only for its team, and may not drain nodes.

type callerKey struct{}

func withCaller(ctx context.Context, c auth.Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// authedKey marks a request whose caller was authenticated: an HTTP
// token, or a NATS subject that the server lets only that credential
// publish (Config.NATSAuth).
type authedKey struct{}

func withAuthenticated(ctx context.Context, c auth.Caller) context.Context {
	return context.WithValue(withCaller(ctx, c), authedKey{}, true)
}

// actor is who acted, as the log records it: the authenticated
// credential's name (auth.Caller.Name); false when the caller was not
// authenticated (no tokens, NATS without gpuq's roles).
func actor(ctx context.Context) (string, bool) {
	c, ok := ctx.Value(callerKey{}).(auth.Caller)
	if authed, _ := ctx.Value(authedKey{}).(bool); !ok || !authed {
		return "", false
	}
	return c.Name(), true
}

func callerOf(ctx context.Context) (auth.Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(auth.Caller)
	return c, ok && !c.Admin
}

// forbidden is 403 naming the teams.
func forbidden(field, msg string) error {
	return &opError{Status: http.StatusForbidden, Field: field, Msg: msg}
}

// mayTask refuses a team's caller another team's task.
func mayTask(ctx context.Context, id, team string) error {
	if c, ok := callerOf(ctx); ok && !c.May(team) {
		return forbidden("task_id", fmt.Sprintf("task %s belongs to team %s; the caller acts for team %s", id, team, c.Team))
	}
	return nil
}

// mayTeam refuses a team's caller a submission for another team, and
// fills in its team when the request names none.
func mayTeam(ctx context.Context, team *string) error {
	c, ok := callerOf(ctx)
	if !ok {
		return nil
	}
	if *team == "" {
		*team = c.Team
	}
	if *team != c.Team {
		return forbidden("team", fmt.Sprintf("the caller acts for team %s and may not submit for team %s", c.Team, *team))
	}
	return nil
}

// mayAdmin refuses a team's caller an operation on the whole cluster.
func mayAdmin(ctx context.Context, what string) error {
	if c, ok := callerOf(ctx); ok {
		return forbidden("", fmt.Sprintf("%s is for the admin; the caller acts for team %s", what, c.Team))
	}
	return nil
}

// A job's caller — a request on the job API,
// gpuq.api.v1.job.<node>.<task>.<run>.<op>, which only that run's own
// credential (and the admin) may publish — acts for that run of that task
// only: its checkpoint and its history, while the task runs (or is being
// preempted) on that node from that dispatch. Once the run ended, or the
// task was requeued and dispatched again, the credential is good for
// nothing.

type jobKey struct{}

func jobOf(ctx context.Context) *api.Job {
	j, _ := ctx.Value(jobKey{}).(*api.Job)
	return j
}

// jobTask fills in and checks the task id of a job's request.
func jobTask(ctx context.Context, id *string) error {
	j := jobOf(ctx)
	if j == nil {
		return nil
	}
	if *id == "" {
		*id = j.Task
	}
	if *id != j.Task {
		return forbidden("task_id", fmt.Sprintf("the caller is task %s's job and may not act on task %s", j.Task, *id))
	}
	return nil
}

// mayJob refuses a job's caller a task that is not running its run: 409
// when the task is no longer running (the run ended), 403 when it runs
// another run or on another node.
func mayJob(ctx context.Context, t *domain.Task) error {
	j := jobOf(ctx)
	if j == nil {
		return nil
	}
	if t.ID != j.Task {
		return forbidden("task_id", fmt.Sprintf("the caller is task %s's job and may not act on task %s", j.Task, t.ID))
	}
	if t.State != domain.Running && t.State != domain.Preempting {
		return &opError{Status: http.StatusConflict, Field: "task_id",
			Msg: fmt.Sprintf("task %s is %s: a job's credential is good only while its run lasts", t.ID, t.State)}
	}
	if t.Node != j.Node || t.DispatchSeq != j.Run {
		return forbidden("task_id", fmt.Sprintf("task %s runs as dispatch %d on %s; the credential is for dispatch %d on %s, a run that is over",
			t.ID, t.DispatchSeq, t.Node, j.Run, j.Node))
	}
	return nil
}

// natsCaller reads the operation and the caller from a request's subject:
// gpuq.api.v1.<op> (no caller), gpuq.api.v1.team.<team>.<op> or
// gpuq.api.v1.job.<node>.<task>.<run>.<op>. A job subject that does not
// parse gets the op "" (refused as unknown).
func natsCaller(ctx context.Context, subject string) (context.Context, string) {
	if rest, ok := strings.CutPrefix(subject, api.JobPrefix); ok {
		parts := strings.Split(rest, ".")
		if len(parts) != 4 {
			return ctx, ""
		}
		run, err := strconv.ParseUint(parts[2], 10, 64)
		if err != nil {
			return ctx, ""
		}
		return context.WithValue(ctx, jobKey{}, &api.Job{Node: parts[0], Task: parts[1], Run: run}), parts[3]
	}
	if rest, ok := strings.CutPrefix(subject, api.TeamPrefix); ok {
		team, op, _ := strings.Cut(rest, ".")
		return withCaller(ctx, auth.Caller{Team: team}), op
	}
	return ctx, strings.TrimPrefix(subject, api.SubjectPrefix)
}

// authenticate resolves the bearer token of an HTTP request when tokens
// are configured: 401 without a known token (/healthz stays open).
func (s *server) authenticate(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if s.tokens == nil || r.URL.Path == "/healthz" || publicPage(r) {
		return r, true
	}
	c, err := s.tokens.Caller(r.Header.Get("Authorization"))
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpuq"`)
		writeError(w, &opError{Status: http.StatusUnauthorized, Field: "authorization", Msg: err.Error()})
		return r, false
	}
	return r.WithContext(withAuthenticated(r.Context(), c)), true
}

// natsContext is natsCaller, and under Config.NATSAuth the credential the
// server vouches for: the team of a team subject, the admin on an unscoped
// subject (only the admin role may publish there). A job's subject names
// its run, not a person: it stays as natsCaller left it.
func (s *server) natsContext(ctx context.Context, subject string) (context.Context, string) {
	ctx, op := natsCaller(ctx, subject)
	if !s.natsAuth || jobOf(ctx) != nil {
		return ctx, op
	}
	c, ok := ctx.Value(callerKey{}).(auth.Caller)
	if !ok {
		c = auth.Caller{Admin: true}
	}
	return withAuthenticated(ctx, c), op
}
