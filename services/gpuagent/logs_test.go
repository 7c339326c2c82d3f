package gpuagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/embedded"
)

// TestReadLog: the pieces of a task's output.log the agent answers.
func TestReadLog(t *testing.T) {
	dir := t.TempDir()
	write := func(id, s string) {
		p := LogPath(dir, id)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("t1", "one\ntwo\nthree\nfour\n")
	write("t2", "no newline at the end")
	write("t3", "héllo") // é is two bytes: 'h' 0xc3 0xa9 'l' 'l' 'o'
	write("t4", "")
	type want struct {
		data       string
		offset     int64
		next, size int64
		field      string
		notFound   bool
	}
	for name, tc := range map[string]struct {
		req  api.LogsRequest
		want want
	}{
		"whole file":              {api.LogsRequest{TaskID: "t1"}, want{data: "one\ntwo\nthree\nfour\n", next: 19, size: 19}},
		"from an offset":          {api.LogsRequest{TaskID: "t1", Offset: 8}, want{data: "three\nfour\n", offset: 8, next: 19, size: 19}},
		"offset past the end":     {api.LogsRequest{TaskID: "t1", Offset: 100}, want{offset: 19, next: 19, size: 19}},
		"bounded":                 {api.LogsRequest{TaskID: "t1", MaxBytes: 4}, want{data: "one\n", next: 4, size: 19}},
		"tail 2":                  {api.LogsRequest{TaskID: "t1", Tail: 2}, want{data: "three\nfour\n", offset: 8, next: 19, size: 19}},
		"tail more than there is": {api.LogsRequest{TaskID: "t1", Tail: 10}, want{data: "one\ntwo\nthree\nfour\n", next: 19, size: 19}},
		"tail without a newline":  {api.LogsRequest{TaskID: "t2", Tail: 1}, want{data: "no newline at the end", next: 21, size: 21}},
		"tail bounded":            {api.LogsRequest{TaskID: "t1", Tail: 2, MaxBytes: 5}, want{data: "four\n", offset: 14, next: 19, size: 19}},
		"no split character":      {api.LogsRequest{TaskID: "t3", MaxBytes: 2}, want{data: "h", next: 1, size: 6}},
		"empty output":            {api.LogsRequest{TaskID: "t4"}, want{}},
		"not started here":        {api.LogsRequest{TaskID: "t9"}, want{notFound: true}},
		"no id":                   {api.LogsRequest{}, want{field: "task_id"}},
		"a path for an id":        {api.LogsRequest{TaskID: "a/b"}, want{field: "task_id"}},
		"negative offset":         {api.LogsRequest{TaskID: "t1", Offset: -1}, want{field: "offset"}},
		"negative tail":           {api.LogsRequest{TaskID: "t1", Tail: -1}, want{field: "tail"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ReadLog(dir, "node-1", tc.req)
			var e *api.Error
			switch {
			case tc.want.field != "" || tc.want.notFound:
				if !errors.As(err, &e) || e.Field != tc.want.field || e.NotFound != tc.want.notFound {
					t.Fatalf("err = %v, want field %q not_found %v", err, tc.want.field, tc.want.notFound)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if got.Data != tc.want.data || got.Offset != tc.want.offset || got.Next != tc.want.next || got.Size != tc.want.size {
				t.Errorf("got %q [%d, %d) of %d, want %q [%d, %d) of %d", got.Data, got.Offset, got.Next, got.Size,
					tc.want.data, tc.want.offset, tc.want.next, tc.want.size)
			}
			if got.Node != "node-1" || got.Path != LogPath(dir, tc.req.TaskID) {
				t.Errorf("node %q path %q", got.Node, got.Path)
			}
		})
	}
}

// TestServeLogs: the agent answers on its node's subject, through NATS.
func TestServeLogs(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect("logs-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	dir := t.TempDir()
	p := LogPath(dir, "t1")
	_ = os.MkdirAll(filepath.Dir(p), 0o755)
	_ = os.WriteFile(p, []byte("hello from the node\n"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeLogs(ctx, LogsConfig{NC: nc, Node: "node-7", DataDir: dir}) }()
	t.Cleanup(func() { cancel(); <-done })
	cl := &api.Client{NC: nc, Timeout: 2 * time.Second}
	var got api.LogsReply
	for i := 0; i < 100; i++ { // until subscribed
		if got, err = cl.Logs("node-7", api.LogsRequest{TaskID: "t1"}); err == nil || !strings.Contains(err.Error(), "no gpuq agent") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || got.Data != "hello from the node\n" {
		t.Fatalf("logs = %+v, %v", got, err)
	}
	if _, err := cl.Logs("node-7", api.LogsRequest{TaskID: "nope"}); !api.IsNotFound(err) {
		t.Errorf("unknown task: %v, want not found", err)
	}
	if _, err := cl.Logs("node-8", api.LogsRequest{TaskID: "t1"}); err == nil || !strings.Contains(err.Error(), "node-8") {
		t.Errorf("a node without an agent: %v, want an error naming it", err)
	}
}

// TestAnswerLogsBounded: a logs request goes through the same bounded
// pass as the submitter's: nesting past 64 levels, repeated keys and
// invalid text are refused naming the field, before anything is read.
func TestAnswerLogsBounded(t *testing.T) {
	cfg := LogsConfig{Node: "node-1", DataDir: t.TempDir()}
	for name, tc := range map[string]struct {
		body, wantField, wantMsg string
	}{
		"nested 65 deep":     {`{"task_id":"t1","x":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`, "body", "deeper than 64 levels"},
		"a million brackets": {strings.Repeat("[", 1<<20), "body", "deeper than 64 levels"},
		"repeated key":       {`{"task_id":"t1","task_id":"a"}`, "task_id", "is given twice"},
		"lone surrogate":     {`{"task_id":"t\ud800"}`, "task_id", "lone surrogate"},
		"overflowing number": {`{"task_id":"t1","offset":1e999}`, "offset", "must be a finite number"},
	} {
		t.Run(name, func(t *testing.T) {
			r := answerLogs(cfg, []byte(tc.body))
			if r.Field != tc.wantField || !strings.Contains(r.Error, tc.wantMsg) {
				t.Fatalf("reply %+v, want field %q …%s…", r, tc.wantField, tc.wantMsg)
			}
		})
	}
}
