package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	js "github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/auth"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
)

func newSubmit() *cobra.Command {
	var f clientFlags
	var r domain.Request
	var grace time.Duration
	var minMemGiB int
	var export, deadline string
	c := &cobra.Command{
		Use:   "submit --name N --team T --priority P --hypothesis TEXT --command CMD",
		Short: "Submit a task; prints its id",
		Long: `Submit a task; prints its id.

--deadline TIME|DURATION is a finish-by time: an RFC 3339 time
(2026-12-03T18:00:00Z, or with an offset) or a duration from now (6h,
90m, 2d12h), recorded as an absolute time. It changes nothing in the
scheduling; the notifier warns (deadline_at_risk) when the task's P90
start plus its predicted run passes it, and gpuq show and gpuq estimate
show it.

--notify URL (repeatable, at most 4) sends this task's notifications
(starts_soon, eta_changed, deadline_at_risk, started, completed, failed,
…) to the URL as JSON POSTs, like a team's destination (gpuq notify add)
but unsigned: the log holds no secret for them, and they carry the header
X-Gpuq-Signature-Status: unsigned. Use an unguessable URL (as Slack's
incoming webhooks are), or a team destination with a secret. The URL is
recorded with the task, so whoever may read the task may read it; it may
not carry a user or password.`,
		Example: `  gpuq submit --name sweep --team vision --hypothesis "lr 3e-4 beats 1e-3" \
    --command "python train.py" --gpus 4 --hours 6 \
    --deadline 2026-12-04T09:00:00+01:00 --notify https://hooks.slack.com/services/T0/B0/XYZ
  gpuq submit ... --deadline 8h`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := hoursFlag(r.Hours); err != nil {
				return err
			}
			if deadline != "" {
				d, err := parseDeadline(deadline, time.Now())
				if err != nil {
					return err
				}
				r.Deadline = &d
				if err := domain.CheckDeadline(r.Deadline, time.Now()); err != nil {
					return &exitError{exitInvalid, err}
				}
			}
			r.GraceS = grace.Seconds()
			env, notes, err := exportEnv(export, os.Environ())
			if err != nil {
				return err
			}
			for _, n := range notes {
				fmt.Fprintln(os.Stderr, "gpuq: "+n)
			}
			r.Env = env
			if wd, err := os.Getwd(); err == nil {
				r.Dir = wd
			}
			r.MinGPUMemMiB = minMemGiB * 1024
			// Check the rules that need no server first; maxima are the server's.
			// A GPU count or an estimate out of range is left to the
			// server, which states its own limits (one message per field,
			// whatever the input).
			local := r
			// Loopback notify URLs are the server's to refuse: gpuq dev takes them.
			if err := local.Validate(domain.Limits{MaxGPUs: 1 << 20, MaxHours: 1e9, NotifyLocal: true}); err != nil {
				var fe *domain.FieldError
				if !errors.As(err, &fe) || (fe.Field != "gpus" && fe.Field != "hours") {
					return &exitError{exitInvalid, err}
				}
			}
			return f.withClient(func(cl *api.Client) error {
				var out api.SubmitReply
				if err := cl.Call(api.OpSubmit, r, &out); err != nil {
					return err
				}
				if f.json {
					return printJSON(os.Stdout, map[string]any{"task_id": out.TaskID, "duplicate": out.Duplicate})
				}
				if out.Duplicate {
					fmt.Fprintf(os.Stderr, "idempotency key seen before: this is the original task\n")
				}
				fmt.Println(out.TaskID)
				return nil
			})
		},
	}
	f.add(c)
	fl := c.Flags()
	fl.StringVar(&r.Name, "name", "", "task name (required)")
	fl.StringVar(&r.Team, "team", "", "team (required)")
	fl.StringVar(&r.Priority, "priority", "medium", "critical|high|medium|low")
	fl.IntVar(&r.GPUs, "gpus", 1, "number of GPUs")
	fl.Float64Var(&r.Hours, "hours", 4, "estimated run time in hours")
	fl.StringVar(&r.Hypothesis, "hypothesis", "", "what the experiment tests (required)")
	fl.StringVar(&r.Command, "command", "", "shell command to run (required)")
	fl.BoolVar(&r.NoPreempt, "no-preempt", false, "the task may not be preempted")
	fl.StringVar(&r.IdempotencyKey, "idempotency-key", "", "retries with the same key return the original task")
	fl.StringVar(&r.PreemptSignal, "preempt-signal", "SIGUSR1", "signal delivered on preemption")
	fl.DurationVar(&grace, "grace", 120*time.Second, "time to checkpoint after the preemption signal")
	fl.StringVar(&r.GPUModel, "gpu-model", "", "only GPUs whose model contains this (e.g. A100, H100)")
	fl.IntVar(&minMemGiB, "min-gpu-mem", 0, "minimum memory per GPU in GiB")
	fl.BoolVar(&r.AllowUnplaceable, "allow-unplaceable", false, "queue the task even if no node of the cluster as it is could hold it (for a cluster about to grow)")
	fl.StringVar(&deadline, "deadline", "", "finish-by time: RFC 3339 (2026-12-03T18:00:00Z) or a duration from now (6h, 2d); the notifier warns when the task may miss it (deadline_at_risk)")
	fl.StringArrayVar(&r.Notify, "notify", nil, "webhook URL for this task's notifications (repeatable, at most 4; unsigned: see above)")
	fl.StringVar(&export, "export", "", "environment for the job. Default: yours, minus GPUQ_*, CUDA_VISIBLE_DEVICES, secret-looking names and values with credentials in a URL (each left out with a note). DEFAULT: an allowlist (PATH, HOME, USER, LANG, LC_*, TZ, PYTHONPATH, VIRTUAL_ENV, CONDA_*, …; docs/cli.md). ALL: yours minus the excluded names (warns; a value with credentials in a URL is refused). NONE. Or NAME and NAME=VALUE items joined by commas, after DEFAULT, ALL or NONE if given (DEFAULT,SEED=2)")
	return c
}

// parseDeadline reads --deadline: an RFC 3339 time, or a duration from
// now (Go's, with whole days allowed in front: 2d, 1d12h), which must be
// positive.
func parseDeadline(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	rest, days := s, 0
	if m := daysPrefix.FindStringSubmatch(s); m != nil {
		fmt.Sscan(m[1], &days)
		rest = m[2]
	}
	var d time.Duration
	if rest != "" {
		var err error
		if d, err = time.ParseDuration(rest); err != nil || (days > 0 && strings.HasPrefix(rest, "-")) {
			return time.Time{}, invalid("--deadline", fmt.Sprintf("%q is neither an RFC 3339 time (2026-12-03T18:00:00Z) nor a duration from now (6h, 90m, 2d12h)", s))
		}
	}
	if days > 366 {
		return time.Time{}, invalid("--deadline", fmt.Sprintf("must be at most 366 days ahead (got %s)", s))
	}
	d += time.Duration(days) * 24 * time.Hour
	if d <= 0 {
		return time.Time{}, invalid("--deadline", fmt.Sprintf("a duration from now must be positive (got %s)", s))
	}
	return now.Add(d).Truncate(time.Second), nil
}

var daysPrefix = regexp.MustCompile(`^(\d{1,4})d(.*)$`)

// hoursFlag refuses an estimate no server could take (NaN, an infinity,
// under a second) before it is sent: JSON cannot carry the first two.
func hoursFlag(h float64) error {
	if math.IsNaN(h) || math.IsInf(h, 0) || h < domain.MinHours {
		return invalid("--hours", fmt.Sprintf("must be a finite number of hours, at least 1 s (%.6f) (got %g)", domain.MinHours, h))
	}
	return nil
}

func oneID(c *cobra.Command, args []string) error {
	if len(args) != 1 || strings.TrimSpace(args[0]) == "" {
		return invalid("task_id", "exactly one task id is required")
	}
	if !events.ValidKey(args[0]) {
		return invalid("task_id", "must not contain spaces, '.', '*' or '>'")
	}
	return nil
}

func newShow() *cobra.Command {
	var f clientFlags
	var tf timeFmt
	c := &cobra.Command{
		Use:   "show ID",
		Short: "Show one task",
		Args:  oneID,
		RunE: func(c *cobra.Command, args []string) error {
			return f.withClient(func(cl *api.Client) error {
				var v api.TaskView
				if err := cl.Call(api.OpShow, api.IDRequest{TaskID: args[0]}, &v); err != nil {
					return err
				}
				// While queued, the reason is the advisor's latest word on it.
				if v.State == string(domain.Queued) {
					if j, err := js.New(cl.NC); err == nil {
						ctx, cancel := context.WithTimeout(c.Context(), 3*time.Second)
						if a, err := lastAdvice(ctx, j, v.TaskID); err == nil && a.State == v.State && a.Reason != "" {
							v.Reason = a.Reason
						}
						cancel()
					}
				}
				return showTask(f.json, v, tf)
			})
		},
	}
	f.add(c)
	tf.add(c)
	return c
}

// showTask prints one task as JSON or for people (show, amend).
func showTask(asJSON bool, v api.TaskView, tf timeFmt) error {
	if asJSON {
		return printJSON(os.Stdout, v)
	}
	printTask(os.Stdout, v, tf, time.Now())
	return nil
}

func attach(f *clientFlags) (*jetstream.Log, func(), error) {
	nc, err := f.connect()
	if err != nil {
		return nil, nil, err
	}
	if f.team != "" {
		nc.Close()
		return nil, nil, refused("the credentials %s act for team %s through the request API and may not read the log itself: use an auditor or admin credential", f.creds, f.team)
	}
	if f.job != nil {
		nc.Close()
		return nil, nil, refused("the credentials %s are task %s's job's: they reach only its checkpoint and history, not the log", f.creds, f.job.Task)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := jetstream.Attach(ctx, nc, "")
	if err != nil {
		nc.Close()
		select {
		case rerr := <-f.refused:
			return nil, nil, refused("the NATS server refused reading the log to the credentials %s: %v", f.creds, rerr)
		default:
		}
		return nil, nil, err
	}
	return l, nc.Close, nil
}

func historyEntry(r events.Record) api.HistoryEntry {
	return api.HistoryEntry{Seq: r.Seq, Type: string(r.Envelope.Type), Time: r.Envelope.Time, ID: r.Envelope.ID,
		CausationID: r.Envelope.CausationID, Data: r.Envelope.Data}
}

// entryFmt is how history and watch print events for people.
type entryFmt struct {
	timeFmt
	wide bool
}

func (f *entryFmt) add(c *cobra.Command) {
	f.timeFmt.add(c)
	c.Flags().BoolVar(&f.wide, "wide", false, "print whole payloads (on a terminal they are shortened)")
}

// printEntry prints one event: sequence, time with its zone, wire name,
// payload; the payload shortened when short is set.
func printEntry(w io.Writer, e api.HistoryEntry, f entryFmt, short bool) {
	data := string(e.Data)
	if short && !f.wide {
		data = shorten(e.Data)
	}
	fmt.Fprintf(w, "%6d  %s  %-17s  %s\n", e.Seq, f.ms(e.Time), e.Type, data)
}

func newHistory() *cobra.Command {
	var f clientFlags
	var ef entryFmt
	c := &cobra.Command{
		Use:   "history ID",
		Short: "A task's events in log order, from the log itself",
		Args:  oneID,
		RunE: func(c *cobra.Command, args []string) error {
			out, err := readHistory(c.Context(), &f, args[0])
			if err != nil {
				return err
			}
			if len(out) == 0 {
				return &exitError{exitNotFound, fmt.Errorf("task %s not found", args[0])}
			}
			if f.json {
				return printJSON(os.Stdout, out)
			}
			short := isTTY(os.Stdout)
			for _, e := range out {
				printEntry(os.Stdout, e, ef, short)
			}
			return nil
		},
	}
	f.add(c)
	ef.add(c)
	return c
}

// readHistory reads a task's events from the log, or, with a team's
// credentials (which may not read the log), from the submitter's history
// operation, which checks the team.
func readHistory(ctx context.Context, f *clientFlags, id string) ([]api.HistoryEntry, error) {
	out := []api.HistoryEntry{}
	if f.scoped() {
		err := f.withClient(func(cl *api.Client) error {
			return cl.Call(api.OpHistory, api.IDRequest{TaskID: id}, &out)
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	err := f.withLog(func(l *jetstream.Log) error {
		_, err := events.ReadAll(ctx, l, 1, events.TaskSubjects(id), func(r events.Record) error {
			out = append(out, historyEntry(r))
			return nil
		})
		return err
	})
	return out, err
}

func newCancel() *cobra.Command {
	var f clientFlags
	c := &cobra.Command{
		Use:   "cancel ID...",
		Short: "Cancel tasks; a running task's process is stopped",
		Args:  someIDs,
		RunE: func(c *cobra.Command, args []string) error {
			return f.withClient(func(cl *api.Client) error {
				by := os.Getenv("USER")
				call := func(id string) (api.TaskView, error) {
					var v api.TaskView
					err := cl.Call(api.OpCancel, api.IDRequest{TaskID: id, By: by}, &v)
					return v, err
				}
				return cancelAll(args, call, f.json, c.OutOrStdout(), c.ErrOrStderr())
			})
		},
	}
	f.add(c)
	return c
}

// someIDs is one task id or more, each well-formed.
func someIDs(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return invalid("task_id", "at least one task id is required")
	}
	for _, id := range args {
		if strings.TrimSpace(id) == "" {
			return invalid("task_id", "must not be empty")
		}
		if !events.ValidKey(id) {
			return invalid("task_id", fmt.Sprintf("must not contain spaces, '.', '*' or '>' (got %q)", id))
		}
	}
	return nil
}

// severity orders exit codes for "the worst of them": an error (the cancel
// may or may not have happened) over not found over refused.
func severity(code int) int {
	switch code {
	case 0:
		return 0
	case exitInvalid:
		return 1
	case exitNotFound:
		return 2
	}
	return 3
}

// cancelAll cancels each id in turn and answers each: "<id> cancelled" on
// stdout, or "gpuq: <id>: <error>" on stderr (the id once when the error
// names it). One id keeps the single-task
// form (its error is the command's); several end with a summary line and
// the worst exit code. With asJSON, one id prints the task object, several
// a JSON array of the cancelled tasks.
func cancelAll(ids []string, call func(id string) (api.TaskView, error), asJSON bool, stdout, stderr io.Writer) error {
	if len(ids) == 1 {
		v, err := call(ids[0])
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdout, v)
		}
		fmt.Fprintf(stdout, "%s cancelled\n", v.TaskID)
		return nil
	}
	worst, failed := 0, 0
	views := []api.TaskView{}
	for _, id := range ids {
		v, err := call(id)
		if err != nil {
			failed++
			if msg := err.Error(); strings.Contains(msg, id) {
				fmt.Fprintf(stderr, "gpuq: %s\n", msg)
			} else {
				fmt.Fprintf(stderr, "gpuq: %s: %s\n", id, msg)
			}
			if c := code(err); severity(c) > severity(worst) {
				worst = c
			}
			continue
		}
		if asJSON {
			views = append(views, v)
		} else {
			fmt.Fprintf(stdout, "%s cancelled\n", v.TaskID)
		}
	}
	if asJSON {
		if err := printJSON(stdout, views); err != nil {
			return err
		}
	}
	if failed > 0 {
		return &exitError{worst, fmt.Errorf("%d of %d tasks not cancelled", failed, len(ids))}
	}
	return nil
}

func newAmend() *cobra.Command {
	var f clientFlags
	var tf timeFmt
	var r api.AmendRequest
	c := &cobra.Command{
		Use:   "amend ID [--gpus N] [--priority P] [--hours H] [--hypothesis T]",
		Short: "Change a queued task without losing its place in line",
		Args:  oneID,
		RunE: func(c *cobra.Command, args []string) error {
			r.TaskID = args[0]
			if !c.Flags().Changed("gpus") && !c.Flags().Changed("priority") && !c.Flags().Changed("hours") && !c.Flags().Changed("hypothesis") {
				return invalid("amend", "give at least one of --gpus, --priority, --hours, --hypothesis")
			}
			if c.Flags().Changed("gpus") && r.GPUs < 1 {
				return invalid("gpus", fmt.Sprintf("must be ≥ 1 (got %d)", r.GPUs))
			}
			if c.Flags().Changed("hours") {
				if err := hoursFlag(r.Hours); err != nil {
					return err
				}
			}
			if c.Flags().Changed("priority") {
				if _, err := domain.ParsePriority(r.Priority); err != nil {
					return invalid("priority", "must be one of critical, high, medium, low")
				}
			}
			return f.withClient(func(cl *api.Client) error {
				var v api.TaskView
				if err := cl.Call(api.OpAmend, r, &v); err != nil {
					return err
				}
				return showTask(f.json, v, tf)
			})
		},
	}
	f.add(c)
	tf.add(c)
	c.Flags().IntVar(&r.GPUs, "gpus", 0, "new GPU count")
	c.Flags().StringVar(&r.Priority, "priority", "", "new class")
	c.Flags().Float64Var(&r.Hours, "hours", 0, "new estimated hours")
	c.Flags().StringVar(&r.Hypothesis, "hypothesis", "", "new hypothesis")
	return c
}

func newChecklist() *cobra.Command {
	var f clientFlags
	var doneItem, undo string
	c := &cobra.Command{
		Use:   "checklist ID --done ITEM",
		Short: "Mark a waiting-playbook item (code_review, experiment_plan, documentation) done",
		Args:  oneID,
		RunE: func(c *cobra.Command, args []string) error {
			req := api.ChecklistRequest{TaskID: args[0], Item: doneItem, Done: true}
			if undo != "" {
				req.Item, req.Done = undo, false
			}
			if req.Item == "" {
				return invalid("done", "give --done ITEM (one of "+strings.Join(domain.ChecklistItems, ", ")+")")
			}
			return f.withClient(func(cl *api.Client) error {
				var v api.TaskView
				if err := cl.Call(api.OpChecklist, req, &v); err != nil {
					return err
				}
				if f.json {
					return printJSON(os.Stdout, v)
				}
				for _, it := range domain.ChecklistItems {
					mark := " "
					if v.Checklist[it] {
						mark = "x"
					}
					fmt.Printf("[%s] %s\n", mark, it)
				}
				return nil
			})
		},
	}
	f.add(c)
	c.Flags().StringVar(&doneItem, "done", "", "item to mark done")
	c.Flags().StringVar(&undo, "undo", "", "item to mark not done")
	return c
}

func newCheckpoint() *cobra.Command {
	var f clientFlags
	var ref, task string
	var step int64
	c := &cobra.Command{
		Use:   "checkpoint --ref REF [--step N]",
		Short: "Report a saved checkpoint (from inside a job: task from GPUQ_TASK_ID)",
		Long: "Report a saved checkpoint (from inside a job: task from GPUQ_TASK_ID).\n\n" +
			"The submitter records it only while the task is running or preempting;\n" +
			"any other state is refused (exit 2), an unknown task is exit 3.\n\n" +
			"Inside a job on a server with credentials (gpuq auth init), GPUQ_NATS_CREDS\n" +
			"is the run's own credential: the request goes to the job API of that run\n" +
			"(gpuq.api.v1.job.<node>.<task>.<run>.checkpoint), the only one it may use.\n" +
			"When NATS cannot be reached the ref is kept for the node's agent to report.\n\n" +
			"Inside a job with a task socket (GPUQ_TASK_SOCKET), the checkpoint of its own\n" +
			"task goes through the socket to the node's agent: no NATS credential is needed,\n" +
			"and the agent keeps it while NATS is out of reach. Without a reachable socket\n" +
			"it goes over NATS as above.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return invalid("ref", fmt.Sprintf("give it with --ref; checkpoint takes no arguments (got %q)", args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, _ []string) error {
			if task == "" {
				task = os.Getenv("GPUQ_TASK_ID")
			}
			if c, err := auth.LoadCreds(f.creds); f.creds != "" && err == nil && c.Job() != nil {
				// A job's own credential (GPUQ_NATS_CREDS): its run's job API.
				if task == "" {
					task = c.Task
				}
				if task != c.Task {
					return invalid("task", fmt.Sprintf("the credentials %s are task %s's job's, not task %s's", f.creds, c.Task, task))
				}
			}
			if task == "" {
				return invalid("task", "give --task or run inside a job (GPUQ_TASK_ID)")
			}
			if !events.ValidKey(task) {
				return invalid("task", "must not contain spaces, '.', '*' or '>'")
			}
			req := api.CheckpointRequest{TaskID: task, Ref: ref, Step: step}
			if err := req.Validate(); err != nil {
				return &exitError{exitInvalid, err}
			}
			if out, ok, err := checkpointViaSocket(req); ok || err != nil {
				if err != nil {
					return err
				}
				if f.json {
					return printJSON(os.Stdout, out)
				}
				if out["spooled"] == true {
					fmt.Fprintf(c.ErrOrStderr(), "gpuq: %v\n", out["note"])
				}
				return nil
			}
			cl, done, err := f.client()
			if err != nil {
				return spoolCheckpoint(task, ref, err, c.ErrOrStderr())
			}
			defer done()
			var out api.CheckpointReply
			if err := cl.Call(api.OpCheckpoint, req, &out); err != nil {
				var ae *api.Error
				if errors.As(err, &ae) {
					return err
				}
				return spoolCheckpoint(task, ref, err, c.ErrOrStderr())
			}
			if f.json {
				return printJSON(os.Stdout, map[string]any{"task_id": out.TaskID, "ref": out.Ref, "seq": out.Seq, "state": out.State})
			}
			return nil
		},
	}
	f.add(c)
	c.Flags().StringVar(&ref, "ref", "", "checkpoint reference (a path or URI)")
	c.Flags().Int64Var(&step, "step", 0, "the training step the checkpoint holds (0: not given)")
	c.Flags().StringVar(&task, "task", "", "task id (default $GPUQ_TASK_ID)")
	return c
}

// exportEnv picks the environment exported with a task, like Slurm's
// --export: DEFAULT (the allowlist domain.DefaultExport), ALL (everything
// but the names that look like secrets, with a warning in notes), NONE, or
// a comma-separated list of NAME (its value here) and NAME=VALUE (that
// value), optionally after one of those (DEFAULT,FOO=1: the allowlist and
// FOO=1). A value cannot contain a comma. A NAME that is not set here is
// left out, with a note in notes. A value with credentials in a URL is
// refused, naming the variable: the log keeps every submission forever.
// Without --export and with ALL, each secret-looking name of environ is
// named in a note of its own, with why and what to do instead.
func exportEnv(spec string, environ []string) (env map[string]string, notes []string, err error) {
	all := map[string]string{}
	secrets := map[string]string{} // secret-looking name → why
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if why, secret := domain.SecretName(k); secret {
			secrets[k] = why
		}
		if !domain.ExportExcluded(k) {
			all[k] = v
		}
	}
	// leftOut names each secret-looking variable of the environment that
	// a mode sending "yours" leaves out, one note each.
	leftOut := func() {
		for _, k := range sortedNames(secrets) {
			notes = append(notes, fmt.Sprintf("export: %s left out: its name looks like a secret's (it %s), and the log keeps every submission forever; "+
				"no --export sends such a name: give the job its credentials another way (a file on the node, a secret store)", k, secrets[k]))
		}
	}
	items := strings.Split(spec, ",")
	out := map[string]string{}
	switch strings.ToUpper(strings.TrimSpace(items[0])) {
	case "":
		// No --export: the environment a job usually needs, as Slurm's
		// --export=ALL gives it, without what looks like a secret — by
		// name, or by a value carrying credentials in a URL. Nothing of
		// that reaches the log, which keeps every submission forever.
		leftOut()
		for _, k := range sortedNames(all) {
			if domain.CredentialInURL(all[k]) {
				notes = append(notes, fmt.Sprintf("export: %s left out: its value carries credentials in a URL, and the log keeps every submission forever", k))
				continue
			}
			out[k] = all[k]
		}
		items = items[1:]
	case "DEFAULT":
		for k, v := range all {
			if domain.DefaultExported(k) {
				out[k] = v
			}
		}
		items = items[1:]
	case "ALL":
		out, items = all, items[1:]
		leftOut()
		notes = append(notes, "export: ALL sends your whole environment but secret-looking names into the audit log, which keeps it forever; the default sends only "+strings.Join(domain.DefaultExport, " ")+" (add others with --export DEFAULT,NAME)")
	case "NONE":
		items = items[1:]
	}
	for _, it := range items {
		k, v, hasValue := strings.Cut(strings.TrimSpace(it), "=")
		if k == "" && !hasValue {
			continue
		}
		switch {
		case !envName.MatchString(k):
			return nil, nil, invalid("export", fmt.Sprintf("%q is not a variable name: give DEFAULT, ALL, NONE, NAME or NAME=VALUE, joined by commas (a letter or _, then letters, digits, _)", k))
		case strings.EqualFold(k, "ALL") || strings.EqualFold(k, "NONE") || strings.EqualFold(k, "DEFAULT"):
			return nil, nil, invalid("export", k+" must come first")
		case domain.ExportExcluded(k):
			return nil, nil, invalid("export", k+" is never exported (set by the agent, or looks like a secret)")
		case hasValue:
			out[k] = v
		default:
			if val, ok := all[k]; ok {
				out[k] = val
			} else {
				notes = append(notes, fmt.Sprintf("export: %s is not set here; not exported (NAME=VALUE gives a value)", k))
			}
		}
	}
	if err := domain.CheckEnvValues(out); err != nil {
		var fe *domain.FieldError
		errors.As(err, &fe)
		return nil, nil, invalid("export", fe.Rule+" (leave it out: --export DEFAULT or NONE with the names you need)")
	}
	if len(out) == 0 {
		return nil, notes, nil
	}
	return out, notes, nil
}

func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// envName is a portable environment variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// taskExists reports whether the log holds the task's submission.
func taskExists(ctx context.Context, l events.Log, id string) bool {
	found := false
	_, _ = l.Read(ctx, 1, events.TaskPrefix+id+"."+string(events.TypeSubmitted), func(events.Stored) error {
		found = true
		return nil
	})
	return found
}

// PendingRefFile is where a job's checkpoint ref waits, under its
// GPUQ_CHECKPOINT_DIR, when NATS cannot be reached; the node's agent
// reports it when NATS is back (services/gpuagent reads the same name).
const PendingRefFile = ".gpuq-pending-ref"

// spoolCheckpoint keeps the ref of a job's checkpoint for its agent when
// NATS is unreachable (a partitioned node): inside a job, the report is
// not lost and the job goes on; outside one, it is the error it was.
func spoolCheckpoint(task, ref string, cause error, stderr io.Writer) error {
	dir := os.Getenv("GPUQ_CHECKPOINT_DIR")
	if dir == "" || os.Getenv("GPUQ_TASK_ID") != task {
		return cause
	}
	path := filepath.Join(dir, PendingRefFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(ref), 0o644); err != nil {
		return cause
	}
	if err := os.Rename(tmp, path); err != nil {
		return cause
	}
	fmt.Fprintf(stderr, "gpuq: NATS unreachable (%v); the checkpoint is kept in %s and the agent reports it when NATS is back\n", cause, path)
	return nil
}

// withLog attaches to the log (see attach), runs fn with it and closes
// the connection after.
func (f *clientFlags) withLog(fn func(*jetstream.Log) error) error {
	l, done, err := attach(f)
	if err != nil {
		return err
	}
	defer done()
	return fn(l)
}
