package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/api"
)

func queueViews() []api.TaskView {
	t0 := time.Date(2026, 11, 29, 22, 0, 0, 0, time.UTC)
	start, end := t0.Add(time.Minute), t0.Add(31*time.Minute)
	zero, one := 0, 1
	return []api.TaskView{
		{TaskID: "t-run", Name: "a", Team: "vision", Priority: "critical", GPUs: 8, State: "running", Node: "node-1", SubmittedAt: t0, StartedAt: &start,
			Placements: []api.PlacementView{{Node: "node-1"}}},
		{TaskID: "t-q", Name: "b", Team: "nlp", Priority: "high", GPUs: 4, State: "queued", SubmittedAt: t0},
		{TaskID: "t-done", Name: "c", Team: "vision", Priority: "low", GPUs: 2, State: "completed", Node: "node-1", SubmittedAt: t0,
			StartedAt: &start, EndedAt: &end, ExitCode: &zero, Reason: "completed: exit code 0"},
		{TaskID: "t-fail", Name: "d", Team: "nlp", Priority: "low", GPUs: 1, State: "failed", Node: "node-1", SubmittedAt: t0,
			StartedAt: &start, EndedAt: &end, ExitCode: &one},
	}
}

// TestQueueFilter: --team, --state and --priority, like squeue's -A, -t, -p.
func TestQueueFilter(t *testing.T) {
	for name, tc := range map[string]struct {
		team, state, prio string
		want              []string
		all               bool
		field             string
	}{
		"none":             {want: []string{"t-run", "t-q", "t-done", "t-fail"}},
		"team":             {team: "nlp", want: []string{"t-q", "t-fail"}},
		"two states":       {state: "running,queued", want: []string{"t-run", "t-q"}},
		"a finished state": {state: "failed", want: []string{"t-fail"}, all: true},
		"priority":         {prio: "LOW", want: []string{"t-done", "t-fail"}},
		"all three":        {team: "vision", state: "completed", prio: "low", want: []string{"t-done"}, all: true},
		"bad state":        {state: "done", field: "state"},
		"bad priority":     {prio: "urgent", field: "priority"},
	} {
		t.Run(name, func(t *testing.T) {
			f, err := parseQueueFilter(tc.team, tc.state, tc.prio)
			if tc.field != "" {
				if err == nil || code(err) != exitInvalid || !strings.HasPrefix(err.Error(), tc.field+": must be one of") {
					t.Fatalf("err = %v, want exit 2 naming %s and the rule", err, tc.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range queueViews() {
				if f.keep(v) {
					got = append(got, v.TaskID)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" || f.needsAll() != tc.all {
				t.Errorf("kept (-want +got):\n%s all %v, want %v", diff, f.needsAll(), tc.all)
			}
		})
	}
}

// TestPrintQueue: END, ELAPSED and EXIT for finished tasks; -o wide and name.
func TestPrintQueue(t *testing.T) {
	now := time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC)
	vs := queueViews()
	for name, tc := range map[string]struct {
		vs     []api.TaskView
		output string
		want   string
	}{
		"unfinished": {vs[:2], "", "" +
			"TASK   NAME  TEAM    PRIORITY  GPUS  STATE    NODE    SUBMITTED\n" +
			"t-run  a     vision  critical  8     running  node-1  2026-11-29 22:00:00 UTC\n" +
			"t-q    b     nlp     high      4     queued           2026-11-29 22:00:00 UTC\n"},
		"with finished": {vs[1:3], "", "" +
			"TASK    NAME  TEAM    PRIORITY  GPUS  STATE      NODE    SUBMITTED                END                      ELAPSED  EXIT\n" +
			"t-q     b     nlp     high      4     queued             2026-11-29 22:00:00 UTC                                    \n" +
			"t-done  c     vision  low       2     completed  node-1  2026-11-29 22:00:00 UTC  2026-11-29 22:31:00 UTC  30m0s    0\n"},
		"wide": {vs[:1], "wide", "" +
			"TASK   NAME  TEAM    PRIORITY  GPUS  STATE    NODE    SUBMITTED                STARTED                  END  ELAPSED  EXIT  REASON\n" +
			"t-run  a     vision  critical  8     running  node-1  2026-11-29 22:00:00 UTC  2026-11-29 22:01:00 UTC       59m0s          \n"},
		"name": {vs, "name", "t-run\nt-q\nt-done\nt-fail\n"},
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := printQueue(&b, tc.vs, tc.output, timeFmt{utc: true}, now); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestQueueFlags: bad values are exit 2 before anything is asked.
func TestQueueFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"output":   {"queue", "-o", "yaml"},
		"state":    {"queue", "--state", "finished"},
		"priority": {"queue", "--priority", "p1"},
	} {
		t.Run(name, func(t *testing.T) {
			if code, _ := runCLI(t, append(args, "--nats", "nats://127.0.0.1:1")...); code != exitInvalid {
				t.Errorf("gpuq %v: exit %d, want 2", args, code)
			}
		})
	}
}

// TestSummarise: `gpuq stats` without an argument counts tasks by state
// and the GPUs held.
func TestSummarise(t *testing.T) {
	s := summarise(queueViews())
	want := map[string]int{"queued": 1, "dispatched": 0, "running": 1, "preempting": 0, "completed": 1, "failed": 1, "cancelled": 0}
	if diff := cmp.Diff(want, s.states); diff != "" || s.gpus != 8 || s.teams["vision"]["gpus_held"] != 8 {
		t.Errorf("states (-want +got):\n%s gpus %d, teams %v", diff, s.gpus, s.teams)
	}
	var b bytes.Buffer
	printSummary(&b, s)
	if !strings.HasPrefix(b.String(), "tasks: 1 queued, 0 dispatched, 1 running, 0 preempting, 1 completed, 1 failed, 0 cancelled\nGPUs held: 8\n") {
		t.Errorf("summary:\n%s", b.String())
	}
}

// TestExportEnv: --export ALL, NONE, NAME, NAME=VALUE (like sbatch); a
// secret-looking variable that a mode sending "yours" leaves out is named
// in a note of its own.
func TestExportEnv(t *testing.T) {
	environ := []string{"HOME=/home/ada", "SEED=1", "GITHUB_TOKEN=x", "GPUQ_NODE=n", "LC_ALL=C", "CONDA_PREFIX=/opt/c"}
	for name, tc := range map[string]struct {
		spec  string
		env   []string // instead of environ
		want  map[string]string
		notes int
		named []string // each in a note of its own
		bad   string
	}{
		"default": {spec: "DEFAULT", want: map[string]string{"HOME": "/home/ada", "LC_ALL": "C", "CONDA_PREFIX": "/opt/c"}},
		"no --export": {spec: "", notes: 1, named: []string{"GITHUB_TOKEN"},
			want: map[string]string{"HOME": "/home/ada", "SEED": "1", "LC_ALL": "C", "CONDA_PREFIX": "/opt/c"}},
		"no --export, each secret-looking name named": {spec: "", env: []string{"MY_API_TOKEN=t", "AWS_SECRET_ACCESS_KEY=k", "SSH_AUTH_SOCK=/s", "DEPLOY_KEY=d", "SEED=1", "GPUQ_NODE=n"},
			notes: 4, named: []string{"AWS_SECRET_ACCESS_KEY", "DEPLOY_KEY", "MY_API_TOKEN", "SSH_AUTH_SOCK"}, want: map[string]string{"SEED": "1"}},
		"default names no secret": {spec: "DEFAULT", env: []string{"MY_API_TOKEN=t", "HOME=/h"}, want: map[string]string{"HOME": "/h"}},
		"none names no secret":    {spec: "NONE,SEED=2", env: []string{"MY_API_TOKEN=t"}, want: map[string]string{"SEED": "2"}},
		"no --export, credentials in a URL left out": {spec: "", env: []string{"DATABASE_URL=postgres://ada:pw@db/x", "SEED=1"}, notes: 1,
			want: map[string]string{"SEED": "1"}},
		"default and a name":          {spec: "DEFAULT,SEED", want: map[string]string{"HOME": "/home/ada", "LC_ALL": "C", "CONDA_PREFIX": "/opt/c", "SEED": "1"}},
		"all":                         {spec: "ALL", notes: 2, named: []string{"GITHUB_TOKEN"}, want: map[string]string{"HOME": "/home/ada", "SEED": "1", "LC_ALL": "C", "CONDA_PREFIX": "/opt/c"}},
		"credentials in a URL, ALL":   {spec: "ALL", env: []string{"DATABASE_URL=postgres://ada:pw@db/x"}, bad: "DATABASE_URL carries credentials in a URL"},
		"credentials in a URL, given": {spec: "NONE,PIP_INDEX_URL=https://u:tok@pypi.example/simple", bad: "PIP_INDEX_URL carries credentials"},
		"a URL without credentials":   {spec: "NONE,DATA=s3://bucket/x,GIT=ssh://git@github.com/a/b", want: map[string]string{"DATA": "s3://bucket/x", "GIT": "ssh://git@github.com/a/b"}},
		"a DSN by name":               {spec: "SENTRY_DSN=https://k@o.ingest/1", bad: "never exported"},
		"none":                        {spec: "NONE"},
		"names":                       {spec: "SEED", want: map[string]string{"SEED": "1"}},
		"a value":                     {spec: "FOO=1", want: map[string]string{"FOO": "1"}},
		"all and a value":             {spec: "ALL,SEED=2", notes: 2, named: []string{"GITHUB_TOKEN"}, want: map[string]string{"HOME": "/home/ada", "SEED": "2", "LC_ALL": "C", "CONDA_PREFIX": "/opt/c"}},
		"none and values":             {spec: "NONE,FOO=1,BAR=", want: map[string]string{"FOO": "1", "BAR": ""}},
		"unset name":                  {spec: "NOPE", notes: 1},
		"bad name":                    {spec: "1FOO=1", bad: "is not a variable name"},
		"all later":                   {spec: "SEED,ALL", bad: "must come first"},
		"a secret":                    {spec: "GITHUB_TOKEN=y", bad: "never exported"},
	} {
		t.Run(name, func(t *testing.T) {
			env := environ
			if tc.env != nil {
				env = tc.env
			}
			got, notes, err := exportEnv(tc.spec, env)
			if tc.bad != "" {
				if err == nil || code(err) != exitInvalid || !strings.Contains(err.Error(), tc.bad) || !strings.HasPrefix(err.Error(), "export: ") {
					t.Fatalf("err = %v, want exit 2 on export: …%s", err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" || len(notes) != tc.notes {
				t.Errorf("(-want +got):\n%s notes %q", diff, notes)
			}
			for _, n := range tc.named {
				i := slices.IndexFunc(notes, func(s string) bool {
					return strings.HasPrefix(s, "export: "+n+" left out: its name looks like a secret")
				})
				if i < 0 || !strings.Contains(notes[i], "another way") {
					t.Errorf("no note naming %s, why and what to do instead: %q", n, notes)
				}
			}
		})
	}
}
