package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gpuq/gpuq/pkg/api"
)

// checkpointViaSocket reports a job's checkpoint through its task socket
// (GPUQ_TASK_SOCKET) when the request is for the job's own task. ok is
// false when there is no socket for it or the socket cannot be reached
// (an agent restarting): the caller goes over NATS instead. A refusal
// (4xx) is an exit-2 error naming the field; a checkpoint the node could
// not record (5xx) goes over NATS too.
func checkpointViaSocket(req api.CheckpointRequest) (out map[string]any, ok bool, err error) {
	path := os.Getenv("GPUQ_TASK_SOCKET")
	if path == "" || os.Getenv("GPUQ_TASK_ID") != req.TaskID {
		return nil, false, nil
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "unix", path)
		}}}
	body, _ := json.Marshal(map[string]any{"ref": req.Ref, "step": req.Step})
	resp, err := c.Post("http://task/v1/checkpoint", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, false, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, false, nil
	}
	switch {
	case resp.StatusCode < 300:
		return out, true, nil
	case resp.StatusCode < 500:
		field, _ := out["field"].(string)
		msg, _ := out["error"].(string)
		if field == "" {
			return nil, true, &exitError{exitInvalid, errors.New(msg)}
		}
		return nil, true, invalid(field, fmt.Sprintf("%s (task socket %s)", strings.TrimPrefix(msg, field+": "), path))
	}
	return nil, false, nil
}
