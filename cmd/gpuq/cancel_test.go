package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/api"
)

// TestCancelAll: several ids in one call, each answered, the exit code the
// worst of them; one id keeps the single-task output.
func TestCancelAll(t *testing.T) {
	answers := map[string]error{
		"ok1":     nil,
		"ok2":     nil,
		"done":    &api.Error{Field: "task_id", Msg: "task is already completed"},
		"missing": &api.Error{NotFound: true, Msg: "task missing not found"},
		"slow":    errors.New("nats: timeout"),
	}
	call := func(id string) (api.TaskView, error) {
		if err := answers[id]; err != nil {
			return api.TaskView{}, err
		}
		return api.TaskView{TaskID: id}, nil
	}
	cases := []struct {
		name    string
		ids     []string
		json    bool
		code    int
		stdout  string
		stderr  string // lines printed by cancelAll; the returned error is separate
		errLine string
	}{
		{name: "one id", ids: []string{"ok1"}, stdout: "ok1 cancelled\n"},
		{name: "one id refused", ids: []string{"done"}, code: exitInvalid, errLine: "task_id: task is already completed"},
		{name: "one id not found", ids: []string{"missing"}, code: exitNotFound, errLine: "task missing not found"},
		{name: "several all cancelled", ids: []string{"ok1", "ok2"}, stdout: "ok1 cancelled\nok2 cancelled\n"},
		{name: "several one refused", ids: []string{"ok1", "done", "ok2"}, code: exitInvalid,
			stdout: "ok1 cancelled\nok2 cancelled\n", stderr: "gpuq: done: task_id: task is already completed\n",
			errLine: "1 of 3 tasks not cancelled"},
		{name: "not found is worse than refused", ids: []string{"done", "missing", "ok1"}, code: exitNotFound,
			stdout: "ok1 cancelled\n", stderr: "gpuq: done: task_id: task is already completed\ngpuq: task missing not found\n",
			errLine: "2 of 3 tasks not cancelled"},
		{name: "error is worst", ids: []string{"missing", "slow", "done"}, code: exitErr,
			stderr:  "gpuq: task missing not found\ngpuq: slow: nats: timeout\ngpuq: done: task_id: task is already completed\n",
			errLine: "3 of 3 tasks not cancelled"},
		{name: "several json", ids: []string{"ok1", "missing", "ok2"}, json: true, code: exitNotFound,
			stdout: "[\n  {\n    \"task_id\": \"ok1\"", stderr: "gpuq: task missing not found\n", errLine: "1 of 3 tasks not cancelled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := cancelAll(tc.ids, call, tc.json, &out, &errb)
			got := 0
			if err != nil {
				got = code(err)
				if err.Error() != tc.errLine {
					t.Errorf("error %q, want %q", err, tc.errLine)
				}
			}
			if got != tc.code {
				t.Errorf("exit %d, want %d", got, tc.code)
			}
			if tc.json {
				if !strings.HasPrefix(out.String(), tc.stdout) || !strings.Contains(out.String(), `"task_id": "ok2"`) {
					t.Errorf("stdout %q, want a JSON array of ok1 and ok2", out.String())
				}
			} else if out.String() != tc.stdout {
				t.Errorf("stdout %q, want %q", out.String(), tc.stdout)
			}
			if errb.String() != tc.stderr {
				t.Errorf("stderr %q, want %q", errb.String(), tc.stderr)
			}
		})
	}
}

// TestCancelArgs: several ids are accepted (so the command goes on to
// connect, exit 1 with no server); a malformed one is refused before.
func TestCancelArgs(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"several ids reach the server", []string{"cancel", "a", "b", "--nats", "nats://127.0.0.1:1"}, exitErr, "connect to NATS"},
		{"one malformed among several", []string{"cancel", "a", "b.c"}, exitInvalid, `task_id: must not contain spaces, '.', '*' or '>' (got "b.c")`},
		{"none", []string{"cancel"}, exitInvalid, "task_id: at least one task id is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if c := run(tc.args, &out, &errb); c != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", c, tc.code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("stderr %q, want it to contain %q", errb.String(), tc.want)
			}
		})
	}
}
