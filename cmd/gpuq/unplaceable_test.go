package main

import (
	"context"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/services/advisor"
	"github.com/gpuq/gpuq/services/scheduler"
)

// TestUnplaceableSubmit: a task no node could ever hold is refused at
// submit (exit 2, the field and the reason); --allow-unplaceable queues
// it, estimate then says to change the request, and wait exits 4.
func TestUnplaceableSubmit(t *testing.T) {
	s := newStack(t)
	var sched *scheduler.Scheduler
	s.submitter()
	s.scheduler(&sched)
	s.start("advisor", func(ctx context.Context, ready func()) error {
		return advisor.Run(ctx, advisor.Config{Log: s.log, JS: s.log.JetStream(), NC: s.nc, Logger: quiet, Ready: ready})
	})
	s.agent("node-1", 8) // mock A100s, 40 GiB
	url := s.srv.URL()
	submit := []string{"submit", "--name", "n", "--team", "t", "--hypothesis", "h", "--command", "true", "--hours", "0.01", "--nats", url}
	for name, tc := range map[string]struct {
		args []string
		code int
		msg  string
	}{
		"no such model":   {[]string{"--gpu-model", "TPU"}, exitInvalid, `gpu_model: cannot run on this cluster: no node has a GPU whose model contains "TPU"`},
		"no GPU that big": {[]string{"--min-gpu-mem", "100000"}, exitInvalid, "min_gpu_mem_mib: cannot run on this cluster: no GPU has 102400000 MiB"},
		"more than all":   {[]string{"--gpus", "12"}, exitInvalid, "gpus: cannot run on this cluster: the cluster has 8 GPUs in all (got 12)"},
		"fits":            {[]string{"--gpus", "8"}, 0, ""},
		"queued anyway":   {[]string{"--gpus", "12", "--allow-unplaceable"}, 0, ""},
		"a model it has":  {[]string{"--gpu-model", "a100"}, 0, ""},
	} {
		t.Run(name, func(t *testing.T) {
			root := newRoot()
			root.SetArgs(append(submit, tc.args...))
			err := root.Execute()
			got := 0
			if err != nil {
				got = code(err)
			}
			if got != tc.code || tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg)) {
				t.Errorf("exit %d (%v), want %d with %q", got, err, tc.code, tc.msg)
			}
		})
	}

	// The one queued anyway: the advice says why, wait exits 4.
	var vs []api.TaskView
	if err := s.client().Call(api.OpQueue, api.QueueRequest{}, &vs); err != nil {
		t.Fatal(err)
	}
	id := ""
	for _, v := range vs {
		if v.GPUs == 12 {
			id = v.TaskID
		}
	}
	if id == "" {
		t.Fatal("the task queued anyway is not in the queue")
	}
	var a estimate.Advice
	wait(t, func() bool {
		return s.client().Call(api.OpEstimate, api.EstimateRequest{TaskID: id}, &a) == nil && a.Action == estimate.ChangeRequest
	})
	if !strings.Contains(a.ActionText, "the cluster has 8 GPUs in all (got 12)") || a.Method != "never" {
		t.Errorf("advice %+v, want never, change_request and why", a)
	}
	if code, _ := runCLI(t, "wait", id, "--timeout", "20s", "--nats", url); code != exitNotRun {
		t.Errorf("wait: exit %d, want 4", code)
	}

	// Amending a task that fits to more GPUs than the cluster has is
	// refused as a submission would be; the unplaceable one keeps waiting.
	var all []api.TaskView
	if err := s.client().Call(api.OpQueue, api.QueueRequest{All: true}, &all); err != nil {
		t.Fatal(err)
	}
	fits := ""
	for _, v := range all {
		if v.GPUs == 8 {
			fits = v.TaskID
		}
	}
	err := s.client().Call(api.OpAmend, api.AmendRequest{TaskID: fits, GPUs: 12}, nil)
	if !api.IsInvalid(err) || !strings.Contains(err.Error(), "gpus: cannot run on this cluster: the cluster has 8 GPUs in all (got 12)") {
		t.Errorf("amend to 12 GPUs: %v, want invalid naming the cluster's size", err)
	}
}
