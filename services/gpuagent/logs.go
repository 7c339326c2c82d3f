package gpuagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/events"
)

// LogsConfig configures ServeLogs.
type LogsConfig struct {
	NC   *nats.Conn
	Node string
	// DataDir is the agent's: task output is <DataDir>/tasks/<id>/output.log,
	// the file the runner appends the job's stdout and stderr to.
	DataDir string
	Logger  zerolog.Logger
}

// ServeLogs answers log requests for this node's tasks on
// api.LogsSubject(node) until ctx ends: the output of a task that ran here,
// read from its output.log, so `gpuq logs` and the HTTP API work when the
// node is another machine. It reads files only; it never touches a task's
// process. Requests are answered one at a time, in the subscription's
// callback; each read is bounded by api.MaxLogChunk.
func ServeLogs(ctx context.Context, cfg LogsConfig) error {
	stop, err := StartLogs(cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	stop()
	return nil
}

// StartLogs subscribes as ServeLogs does and returns once subscribed; stop
// unsubscribes.
func StartLogs(cfg LogsConfig) (stop func(), err error) {
	if cfg.NC == nil {
		return nil, errors.New("gpuagent: logs: no NATS connection")
	}
	if !events.ValidKey(cfg.Node) {
		return nil, fmt.Errorf("gpuagent: logs: invalid node name %q", cfg.Node)
	}
	sub, err := cfg.NC.Subscribe(api.LogsSubject(cfg.Node), func(m *nats.Msg) {
		if err := api.Respond(m, answerLogs(cfg, m.Data)); err != nil {
			cfg.Logger.Debug().Err(err).Msg("gpuagent: logs reply not sent")
		}
	})
	if err != nil {
		return nil, fmt.Errorf("gpuagent: logs: subscribing to %s: %w", api.LogsSubject(cfg.Node), err)
	}
	if err := cfg.NC.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("gpuagent: logs: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// answerLogs answers one request body.
func answerLogs(cfg LogsConfig, data []byte) api.Reply {
	var req api.LogsRequest
	if _, derr := api.Decode(data, &req); derr != nil {
		return api.ReplyOf(nil, derr)
	}
	out, err := ReadLog(cfg.DataDir, cfg.Node, req)
	if err != nil {
		var e *api.Error
		if !errors.As(err, &e) {
			cfg.Logger.Warn().Err(err).Str("task_id", req.TaskID).Msg("gpuagent: reading a task's output failed")
		}
		return api.ReplyOf(nil, err)
	}
	return api.ReplyOf(out, nil)
}

// LogPath is where a task's output is on the node whose agent keeps its
// data in dataDir.
func LogPath(dataDir, taskID string) string {
	return filepath.Join(dataDir, "tasks", taskID, "output.log")
}

// tailWindow bounds how far back from the end ReadLog looks for the
// start of the last N lines.
const tailWindow = 4 << 20

// ReadLog reads the piece of a task's output that req asks for. Errors are
// *api.Error: a field error for a bad request, NotFound when this node has
// no output for the task.
func ReadLog(dataDir, node string, req api.LogsRequest) (api.LogsReply, error) {
	id := req.TaskID
	switch {
	case id == "":
		return api.LogsReply{}, &api.Error{Field: "task_id", Msg: "is required"}
	case !events.ValidKey(id) || strings.ContainsAny(id, `/\`):
		return api.LogsReply{}, &api.Error{Field: "task_id", Msg: "must not contain spaces, '.', '*', '>', '/' or '\\'"}
	case req.Offset < 0:
		return api.LogsReply{}, &api.Error{Field: "offset", Msg: fmt.Sprintf("must be ≥ 0 (got %d)", req.Offset)}
	case req.Tail < 0:
		return api.LogsReply{}, &api.Error{Field: "tail", Msg: fmt.Sprintf("must be ≥ 0 (got %d)", req.Tail)}
	case req.MaxBytes < 0:
		return api.LogsReply{}, &api.Error{Field: "max_bytes", Msg: fmt.Sprintf("must be ≥ 0 (got %d)", req.MaxBytes)}
	}
	limit := int64(req.MaxBytes)
	if limit == 0 || limit > api.MaxLogChunk {
		limit = api.MaxLogChunk
	}
	path := LogPath(dataDir, id)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return api.LogsReply{}, &api.Error{NotFound: true, Msg: fmt.Sprintf("node %s has no output for task %s (it has not started there)", node, id)}
	}
	if err != nil {
		return api.LogsReply{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return api.LogsReply{}, err
	}
	size := st.Size()
	from := min(req.Offset, size)
	if req.Tail > 0 {
		if from, err = tailStart(f, size, req.Tail); err != nil {
			return api.LogsReply{}, err
		}
		if size-from > limit {
			from = size - limit // the last lines are longer than a reply: their end
		}
	}
	n := min(size-from, limit)
	buf := make([]byte, n)
	k, err := f.ReadAt(buf, from)
	if err != nil && !errors.Is(err, io.EOF) {
		return api.LogsReply{}, err
	}
	buf = buf[:k]
	if from+int64(k) < size {
		buf = buf[:runeCut(buf)] // the rest of a split character comes next time
	}
	return api.LogsReply{TaskID: id, Node: node, Path: path, Offset: from, Next: from + int64(len(buf)), Size: size, Data: string(buf)}, nil
}

// tailStart is the offset of the last n lines of a file of the given size
// (a last line without its newline counts), looking back at most
// tailWindow bytes.
func tailStart(f *os.File, size int64, n int) (int64, error) {
	from := max(0, size-tailWindow)
	buf := make([]byte, size-from)
	k, err := f.ReadAt(buf, from)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	buf = buf[:k]
	end := len(buf)
	if end > 0 && buf[end-1] == '\n' {
		end-- // the final newline ends the last line
	}
	for i := 0; i < n; i++ {
		j := bytes.LastIndexByte(buf[:end], '\n')
		if j < 0 {
			return from, nil
		}
		end = j
	}
	return from + int64(end) + 1, nil
}

// runeCut is the length of b without a UTF-8 character cut at its end.
func runeCut(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}
