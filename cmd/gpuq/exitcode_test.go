package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
)

// TestCode: the one mapping of errors to exit codes. A refusal — the
// input, the task's state, the credentials, a conflict — is exit 2
// whether or not the server names a field; a task not found is 3; only
// what went wrong on the way or in the server is 1.
func TestCode(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want int
	}{
		"nothing":                           {nil, 0},
		"a field the CLI checks":            {invalid("hours", "must be a finite number"), exitInvalid},
		"a domain field error":              {&domain.FieldError{Field: "gpus", Rule: "must be between 1 and 64 (got 0)"}, exitInvalid},
		"a field the server names":          {&api.Error{Field: "gpus", Msg: "must be between 1 and 64 (got 100)", Status: 400}, exitInvalid},
		"an old server's field (no status)": {&api.Error{Field: "priority", Msg: "must be one of …"}, exitInvalid},
		"a team draining a node (403, no field)": {&api.Error{Msg: "draining a node is for the admin; the caller acts for team nlp", Status: 403},
			exitInvalid},
		"another team's task (403)":        {&api.Error{Field: "task_id", Msg: "task … belongs to team vision", Status: 403}, exitInvalid},
		"a state that does not allow it":   {&api.Error{Field: "task_id", Msg: "task is running; only queued tasks can be amended", Status: 409}, exitInvalid},
		"a conflict without a field (409)": {&api.Error{Msg: "task … kept changing during 5 attempts; try again", Status: 409}, exitInvalid},
		"an idempotency key reused (409)":  {&api.Error{Field: "idempotency_key", Msg: "was used with another payload", Status: 409}, exitInvalid},
		"a body too large (413)":           {&api.Error{Field: "body", Msg: "is larger than 524288 bytes", Status: 413}, exitInvalid},
		"credentials the server refuses":   {&api.Error{Field: "creds", Msg: "the NATS server refused cancel to these credentials"}, exitInvalid},
		"a refusal, wrapped":               {fmt.Errorf("node-1: %w", &api.Error{Msg: "for the admin", Status: 403}), exitInvalid},
		"the CLI refusing the credentials": {refused("the credentials %s may not read the log itself", "ci-nlp.creds"), exitInvalid},
		"a task not found":                 {&api.Error{Msg: "task 01a2… not found", NotFound: true, Status: 404}, exitNotFound},
		"a task not found, an old server":  {&api.Error{Msg: "task 01a2… not found", NotFound: true}, exitNotFound},
		"a node not found (a field, 404)":  {&api.Error{Field: "node", Msg: "node n9 not found", NotFound: true, Status: 404}, exitInvalid},
		"an exit code the CLI chose":       {&exitError{exitTimeout, errors.New("task … has not started after 10s")}, exitTimeout},
		"the server's failure (500)":       {&api.Error{Msg: "internal error: nats: timeout", Status: 500}, exitErr},
		"the server not ready (503)":       {&api.Error{Msg: "request timed out", Status: 503}, exitErr},
		"an old server's failure":          {&api.Error{Msg: "internal error: disk full"}, exitErr},
		"NATS timed out":                   {nats.ErrTimeout, exitErr},
		"nobody answering":                 {fmt.Errorf("no gpuq submitter is answering: %w", nats.ErrNoResponders), exitErr},
		"the command's own deadline":       {context.DeadlineExceeded, exitErr},
		"anything else":                    {errors.New("connect to NATS at nats://127.0.0.1:4222: no servers available"), exitErr},
	} {
		t.Run(name, func(t *testing.T) {
			if got := code(tc.err); got != tc.want {
				t.Errorf("code(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}
