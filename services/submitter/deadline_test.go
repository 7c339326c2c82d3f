package submitter

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/api"
)

// TestSubmitDeadlineNotify: a deadline (finish-by time) and a task's own
// notify URLs are checked the same over HTTP and NATS (the submitter's
// one submit: domain.Request.Validate and domain.CheckDeadline), refused
// naming the field, and recorded as given when valid. The harness's clock
// starts at t0.
func TestSubmitDeadlineNotify(t *testing.T) {
	at := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339) }
	type want struct {
		status int
		field  string // "" : accepted
		msg    string
	}
	cases := map[string]struct {
		edit map[string]any
		want want
	}{
		"deadline in six hours":     {edit: map[string]any{"deadline": at(6 * time.Hour)}, want: want{status: 201}},
		"deadline with an offset":   {edit: map[string]any{"deadline": t0.Add(2 * time.Hour).In(time.FixedZone("", 3600)).Format(time.RFC3339)}, want: want{status: 201}},
		"deadline passed":           {edit: map[string]any{"deadline": at(-time.Hour)}, want: want{400, "deadline", "must be in the future"}},
		"deadline more than a year": {edit: map[string]any{"deadline": at(400 * 24 * time.Hour)}, want: want{400, "deadline", "at most 366 days ahead"}},
		"deadline not a time":       {edit: map[string]any{"deadline": "6h"}, want: want{400, "deadline", ""}},
		"deadline a number":         {edit: map[string]any{"deadline": 21600}, want: want{400, "deadline", ""}},
		"notify one https":          {edit: map[string]any{"notify": []string{"https://hooks.example.com/T0/B0/x"}}, want: want{status: 201}},
		"notify four":               {edit: map[string]any{"notify": []string{"https://a.example/1", "https://a.example/2", "https://a.example/3", "https://a.example/4"}}, want: want{status: 201}},
		"notify five":               {edit: map[string]any{"notify": []string{"https://a.example/1", "https://a.example/2", "https://a.example/3", "https://a.example/4", "https://a.example/5"}}, want: want{400, "notify", "at most 4"}},
		"notify with a password":    {edit: map[string]any{"notify": []string{"https://u:pw@a.example/x"}}, want: want{400, "notify", "must not carry a user or password"}},
		"notify ftp":                {edit: map[string]any{"notify": []string{"ftp://a.example/x"}}, want: want{400, "notify", "http:// or https://"}},
		"notify loopback":           {edit: map[string]any{"notify": []string{"http://127.0.0.1:8080/x"}}, want: want{400, "notify", "only in gpuq dev"}},
		"notify metadata address":   {edit: map[string]any{"notify": []string{"http://169.254.169.254/"}}, want: want{400, "notify", "only in gpuq dev"}},
		"notify too long":           {edit: map[string]any{"notify": []string{"https://a.example/" + strings.Repeat("a", 2100)}}, want: want{400, "notify", "at most 2048 bytes"}},
		"notify not a list":         {edit: map[string]any{"notify": "https://a.example/x"}, want: want{400, "notify", ""}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			body := submitBody(t, tc.edit)
			check := func(transport string, status int, field, msg string, result []byte) {
				t.Helper()
				if tc.want.field != "" {
					if status != tc.want.status || field != tc.want.field || !strings.Contains(msg, tc.want.msg) {
						t.Fatalf("%s: %d %q %q, want %d %q …%s…", transport, status, field, msg, tc.want.status, tc.want.field, tc.want.msg)
					}
					return
				}
				var rep api.SubmitReply
				if status != tc.want.status || json.Unmarshal(result, &rep) != nil || rep.TaskID == "" {
					t.Fatalf("%s: %d %s %s, want %d and a task", transport, status, field, msg, tc.want.status)
				}
				v, err := h.s.show(h.ctx, rep.TaskID)
				if err != nil {
					t.Fatal(err)
				}
				if d, ok := tc.edit["deadline"].(string); ok {
					want, _ := time.Parse(time.RFC3339, d)
					if v.Deadline == nil || !v.Deadline.Equal(want) || v.Deadline.Location() != time.UTC {
						t.Fatalf("%s: recorded deadline %v, want %v in UTC", transport, v.Deadline, want)
					}
				}
				if n, ok := tc.edit["notify"].([]string); ok && !slices.Equal(v.Notify, n) {
					t.Fatalf("%s: recorded notify %v, want %v", transport, v.Notify, n)
				}
			}
			w := h.httpCall("POST", "/v1/tasks", body)
			var hr api.Reply
			_ = json.Unmarshal(w.Body.Bytes(), &hr)
			check("HTTP", w.Code, hr.Field, hr.Error, w.Body.Bytes())

			r := h.natsCall(api.OpSubmit, body)
			status := http.StatusCreated
			if r.Error != "" {
				_, err := h.s.dispatch(h.ctx, api.OpSubmit, []byte(body))
				status = asOpError(err).Status
			}
			check("NATS", status, r.Field, r.Error, r.Result)
			if tc.want.field != "" {
				if q, err := h.s.queue(h.ctx, true); err != nil || len(q) != 0 {
					t.Fatalf("%d tasks after a refusal (%v)", len(q), err)
				}
			}
		})
	}
}

// A keyed retry with other notify URLs is another request (409 naming
// notify); with another deadline it is the same one (a relative deadline
// resolves to another time at each retry), but with none it is not.
func TestIdempotencyDeadlineNotify(t *testing.T) {
	h := newHarness(t, nil)
	first := submitBody(t, map[string]any{"idempotency_key": "k1", "deadline": t0.Add(6 * time.Hour).Format(time.RFC3339), "notify": []string{"https://a.example/1"}})
	if w := h.httpCall("POST", "/v1/tasks", first); w.Code != 201 {
		t.Fatalf("first: %d %s", w.Code, w.Body)
	}
	cases := map[string]struct {
		edit   map[string]any
		status int
		msg    string
	}{
		"another deadline: the same": {edit: map[string]any{"deadline": t0.Add(7 * time.Hour).Format(time.RFC3339), "notify": []string{"https://a.example/1"}}, status: 200},
		"no deadline: another":       {edit: map[string]any{"notify": []string{"https://a.example/1"}}, status: 409, msg: "deadline"},
		"other notify: another":      {edit: map[string]any{"deadline": t0.Add(6 * time.Hour).Format(time.RFC3339), "notify": []string{"https://a.example/2"}}, status: 409, msg: "notify"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.edit["idempotency_key"] = "k1"
			w := h.httpCall("POST", "/v1/tasks", submitBody(t, tc.edit))
			if w.Code != tc.status || !strings.Contains(w.Body.String(), tc.msg) {
				t.Fatalf("%d %s, want %d …%s…", w.Code, w.Body, tc.status, tc.msg)
			}
		})
	}
}
