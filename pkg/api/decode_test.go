package api_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/gpuq/gpuq/pkg/api"
)

// TestDecode: the one strict decoding of the services' requests; every
// error names the field and the rule, with a 400.
func TestDecode(t *testing.T) {
	cases := map[string]struct {
		body  string
		field string // "" when valid
	}{
		"empty body":       {"", ""},
		"valid":            {`{"task_id":"t1","what_if_gpus":2}`, ""},
		"unknown field":    {`{"task_id":"t1","gpu":2}`, "body"},
		"wrong type":       {`{"task_id":1}`, "task_id"},
		"fraction for int": {`{"task_id":"t1","what_if_gpus":1.5}`, "what_if_gpus"},
		"repeated key":     {`{"task_id":"a","task_id":"b"}`, "task_id"},
		"not an object":    {`[1]`, "body"},
		"trailing data":    {`{"task_id":"t1"} {}`, "body"},
		"deep nesting":     {`{"task_id":` + deep(100) + `}`, "body"},
		"invalid JSON":     {`{"task_id":`, "body"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var req api.EstimateRequest
			_, err := api.Decode([]byte(tc.body), &req)
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.field != "" && err == nil:
				t.Fatalf("accepted, want an error naming %s", tc.field)
			case err != nil && (err.Field != tc.field || err.Status != http.StatusBadRequest || err.Msg == ""):
				t.Errorf("error %+v, want field %q, status 400 and a rule", err, tc.field)
			}
		})
	}
}

func deep(n int) string {
	b := make([]byte, 0, 2*n)
	for range n {
		b = append(b, '[')
	}
	for range n {
		b = append(b, ']')
	}
	return string(b)
}

// TestReplyOf: an *api.Error keeps its field, not-found and status; any
// other error is a 500.
func TestReplyOf(t *testing.T) {
	if r := api.ReplyOf(map[string]int{"a": 1}, nil); string(r.Result) != `{"a":1}` || r.Error != "" {
		t.Errorf("result reply %+v", r)
	}
	if r := api.ReplyOf(nil, &api.Error{Msg: "task t not found", NotFound: true, Status: 404}); !r.NotFound || r.Status != 404 {
		t.Errorf("not found reply %+v", r)
	}
	if r := api.ReplyOf(nil, errors.New("disk")); r.Status != http.StatusInternalServerError || r.Error == "" {
		t.Errorf("internal reply %+v", r)
	}
}
