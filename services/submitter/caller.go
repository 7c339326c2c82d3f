package submitter

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/auth"
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

// natsCaller reads the operation and the caller from a request's subject:
// gpuq.api.v1.<op> (no caller) or gpuq.api.v1.team.<team>.<op>.
func natsCaller(ctx context.Context, subject string) (context.Context, string) {
	if rest, ok := strings.CutPrefix(subject, api.TeamPrefix); ok {
		team, op, _ := strings.Cut(rest, ".")
		return withCaller(ctx, auth.Caller{Team: team}), op
	}
	return ctx, strings.TrimPrefix(subject, api.SubjectPrefix)
}

// authenticate resolves the bearer token of an HTTP request when tokens
// are configured: 401 without a known token (/healthz stays open).
func (s *server) authenticate(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if s.tokens == nil || r.URL.Path == "/healthz" {
		return r, true
	}
	c, err := s.tokens.Caller(r.Header.Get("Authorization"))
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpuq"`)
		writeError(w, &opError{Status: http.StatusUnauthorized, Field: "authorization", Msg: err.Error()})
		return r, false
	}
	return r.WithContext(withCaller(r.Context(), c)), true
}
