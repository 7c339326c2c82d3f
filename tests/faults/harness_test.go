//go:build faults

package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
)

// envInt reads an integer knob of the suite.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func binDir(t *testing.T) string {
	d := os.Getenv("GPUQ_FAULTS_BIN")
	if d == "" {
		t.Skip("GPUQ_FAULTS_BIN is not set: run `make test-faults`")
	}
	return d
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// proc is one service process (restartable: start again with the same args).
type proc struct {
	name, bin string
	args      []string
	env       []string
	logPath   string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	off  int64 // log size when this incarnation started
	runs int
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	fmt.Fprintf(f, "\n#### %s start %d at %s\n", p.name, p.runs+1, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Pdeathsig: a test binary killed by go test's timeout leaves no
	// service behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done, p.off = cmd, done, st.Size()
	p.runs++
	p.mu.Unlock()
}

func (p *proc) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *proc) signal(sig syscall.Signal) {
	if pid := p.pid(); pid != 0 && p.alive() {
		_ = syscall.Kill(pid, sig)
	}
}

// stop sends sig and waits up to d for the exit, then SIGKILLs.
func (p *proc) stop(sig syscall.Signal, d time.Duration) {
	if !p.alive() {
		return
	}
	p.signal(syscall.SIGCONT) // a stopped process cannot handle SIGTERM
	p.signal(sig)
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
	case <-time.After(d):
		p.signal(syscall.SIGKILL)
		<-done
	}
}

// logSince returns what this incarnation has logged.
func (p *proc) logSince() string {
	p.mu.Lock()
	off := p.off
	p.mu.Unlock()
	b, _ := os.ReadFile(p.logPath)
	if int64(len(b)) < off {
		return ""
	}
	return string(b[off:])
}

// waitLog waits until this incarnation's log contains s.
func (p *proc) waitLog(t *testing.T, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(p.logSince(), s) {
			return
		}
		if !p.alive() {
			t.Fatalf("%s exited before logging %q; log tail:\n%s", p.name, s, tail(p.logSince(), 15))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not log %q in %s; log tail:\n%s", p.name, s, d, tail(p.logSince(), 15))
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cluster is one NATS server and the services around it, in a temp dir.
type cluster struct {
	t        *testing.T
	bin, dir string
	natsPort int
	url      string
	nats     *proc
	procs    []*proc
	marks    string // where the test tasks write their start/end marks

	nc  *nats.Conn
	log *jetstream.Log
	api *api.Client
}

func newCluster(t *testing.T) *cluster {
	bin := binDir(t)
	dir := t.TempDir()
	c := &cluster{t: t, bin: bin, dir: dir, natsPort: freePort(t), marks: filepath.Join(dir, "marks")}
	c.url = fmt.Sprintf("nats://127.0.0.1:%d", c.natsPort)
	if err := os.MkdirAll(c.marks, 0o755); err != nil {
		t.Fatal(err)
	}
	c.nats = c.add("nats", "gpuq-natsd", nil, "--port", strconv.Itoa(c.natsPort), "--store", filepath.Join(dir, "jetstream"))
	c.startNATS()
	t.Cleanup(c.shutdown)
	return c
}

func (c *cluster) add(name, bin string, env []string, args ...string) *proc {
	p := &proc{name: name, bin: filepath.Join(c.bin, bin), args: args, env: env, logPath: filepath.Join(c.dir, name+".log")}
	if name != "nats" {
		c.procs = append(c.procs, p)
	}
	return p
}

func (c *cluster) startNATS() {
	c.t.Helper()
	c.nats.start(c.t)
	c.nats.waitLog(c.t, "gpuq-natsd: ready", 30*time.Second)
}

// connect opens the test's own client connection and the log (after the
// services created the stream).
func (c *cluster) connect() {
	c.t.Helper()
	nc, err := nats.Connect(c.url, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond), nats.Name("gpuq-faults"))
	if err != nil {
		c.t.Fatal(err)
	}
	c.nc = nc
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		l, err := jetstream.Attach(ctx, nc, "")
		if err == nil {
			c.log = l
			break
		}
		if ctx.Err() != nil {
			c.t.Fatalf("attach to the event stream: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.api = &api.Client{NC: nc, Timeout: 20 * time.Second}
}

func (c *cluster) common() []string { return []string{"--nats", c.url, "--log-level", "debug"} }

// submitter adds a submitter with HTTP on its own port; it returns the
// process and the HTTP base URL.
func (c *cluster) submitter(name string) (*proc, string) {
	port := freePort(c.t)
	p := c.add(name, "gpuq-submitter", nil, append(c.common(), "--http", fmt.Sprintf("127.0.0.1:%d", port))...)
	return p, fmt.Sprintf("http://127.0.0.1:%d", port)
}

func (c *cluster) scheduler(name string, extra ...string) *proc {
	return c.add(name, "gpuq-scheduler", nil, append(append(c.common(), "--instance", name), extra...)...)
}

func (c *cluster) agent(node string, gpus int, extra ...string) *proc {
	args := append(c.common(), "--node", node, "--mock", "--gpus", strconv.Itoa(gpus), "--heartbeat", "500ms",
		"--kill-after", "2s", "--data-dir", filepath.Join(c.dir, "agents", node), "--checkpoint-dir", filepath.Join(c.dir, "ckpt"),
		// A clean stop at the end of a scenario stops the tasks (a kill -9
		// in a scenario leaves them to the next agent, as in production).
		"--stop-tasks-on-exit")
	return c.add("agent-"+node, "gpuq-agent", nil, append(args, extra...)...)
}

func (c *cluster) advisor() *proc { return c.add("advisor", "gpuq-advisor", nil, c.common()...) }

// startAll starts every service process and waits for each to be ready.
func (c *cluster) startAll(ps ...*proc) {
	c.t.Helper()
	for _, p := range ps {
		p.start(c.t)
	}
	for _, p := range ps {
		c.waitReady(p)
	}
}

func (c *cluster) waitReady(p *proc) {
	c.t.Helper()
	want := `"message":"ready`
	p.waitLog(c.t, want, 60*time.Second)
}

func (c *cluster) shutdown() {
	var wg sync.WaitGroup
	for _, p := range c.procs {
		wg.Add(1)
		go func(p *proc) { defer wg.Done(); p.stop(syscall.SIGTERM, 8*time.Second) }(p)
	}
	wg.Wait()
	if c.nc != nil {
		c.nc.Close()
	}
	c.nats.stop(syscall.SIGTERM, 5*time.Second)
	if c.t.Failed() || os.Getenv("GPUQ_FAULTS_KEEP") != "" {
		keep := filepath.Join(os.TempDir(), "gpuq-faults-logs", c.t.Name())
		_ = os.MkdirAll(keep, 0o755)
		for _, p := range append([]*proc{c.nats}, c.procs...) {
			if b, err := os.ReadFile(p.logPath); err == nil {
				_ = os.WriteFile(filepath.Join(keep, filepath.Base(p.logPath)), b, 0o644)
			}
		}
		c.t.Logf("service logs kept in %s", keep)
	}
}

// gpuq runs the CLI against this cluster and returns its stdout.
func (c *cluster) gpuq(args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(c.bin, "gpuq"), append(args, "--nats", c.url)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("gpuq %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// request is a valid submission; cmd is the task's command.
func request(name, cmd string, gpus int) domain.Request {
	return domain.Request{Name: name, Team: "alpha", Priority: "medium", GPUs: gpus, Hours: 0.01,
		Hypothesis: "faults: " + name, Command: cmd}
}

// submit submits over the NATS API, retrying (as CI would) on errors that
// are not the caller's fault until d has passed.
func (c *cluster) submit(req domain.Request, d time.Duration) (api.SubmitReply, error) {
	deadline := time.Now().Add(d)
	for {
		var rep api.SubmitReply
		err := c.api.Call(api.OpSubmit, req, &rep)
		if err == nil || api.IsInvalid(err) || time.Now().After(deadline) {
			return rep, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// submitHTTP posts one submission to a submitter's HTTP API.
func submitHTTP(base string, req domain.Request) (api.SubmitReply, error) {
	body, _ := json.Marshal(req)
	resp, err := http.Post(base+"/v1/tasks", "application/json", bytes.NewReader(body))
	if err != nil {
		return api.SubmitReply{}, err
	}
	defer resp.Body.Close()
	var rep api.SubmitReply
	b := new(bytes.Buffer)
	_, _ = b.ReadFrom(resp.Body)
	if resp.StatusCode/100 != 2 {
		return rep, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(b.String()))
	}
	if err := json.Unmarshal(b.Bytes(), &rep); err != nil {
		return rep, fmt.Errorf("HTTP reply %q: %w", b.String(), err)
	}
	return rep, nil
}

// rec is one record of the log as the test reads it: decoded when it
// decodes, with the stream's own timestamp.
type rec struct {
	events.Stored
	r   events.Record
	err error
}

// readLog reads the whole stream with a fresh ordered consumer; records
// that do not decode are kept with their error.
func (c *cluster) readLog() []rec {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out []rec
	for attempt := 0; ; attempt++ {
		out = out[:0]
		_, err := c.log.Read(ctx, 1, "", func(m events.Stored) error {
			m.Data = append([]byte(nil), m.Data...)
			_, err := events.Decode(m)
			out = append(out, rec{Stored: m, r: events.DecodeRecord(m), err: err})
			return nil
		})
		if err == nil {
			return out
		}
		if strings.Contains(err.Error(), "maximum consumers limit") {
			// The services have used up the stream's consumers; read
			// message by message, which needs none.
			c.t.Logf("read the log: %v; reading it message by message", err)
			return c.readLogDirect(ctx)
		}
		if attempt == 5 || ctx.Err() != nil {
			c.t.Fatalf("read the log: %v", err)
		}
		time.Sleep(time.Second)
	}
}

// readLogDirect reads the stream with one get per sequence.
func (c *cluster) readLogDirect(ctx context.Context) []rec {
	c.t.Helper()
	j, err := js.New(c.nc)
	if err != nil {
		c.t.Fatal(err)
	}
	s, err := j.Stream(ctx, events.StreamName)
	if err != nil {
		c.t.Fatal(err)
	}
	last, err := c.log.LastSeq(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	out := make([]rec, 0, last)
	for seq := uint64(1); seq <= last; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			c.t.Fatalf("get message %d: %v", seq, err)
		}
		st := events.Stored{Seq: m.Sequence, Subject: m.Subject, Data: m.Data, Time: m.Time}
		_, err = events.Decode(st)
		out = append(out, rec{Stored: st, r: events.DecodeRecord(st), err: err})
	}
	return out
}

// fold is a clean replay: a fresh domain.State over every record as the
// services fold it (events.DecodeRecord: the log's time; undecodable
// records skipped by State.Apply).
func fold(recs []rec, upTo uint64) *domain.State {
	st := domain.NewState()
	for _, x := range recs {
		if upTo > 0 && x.Seq > upTo {
			break
		}
		st.Apply(x.r)
	}
	return st
}

// waitFor polls cond every 200 ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// states returns task id → state from the log's clean fold.
func states(st *domain.State, ids []string) map[domain.TaskState]int {
	out := map[domain.TaskState]int{}
	for _, id := range ids {
		if t := st.Tasks[id]; t != nil {
			out[t.State]++
		} else {
			out["absent"]++
		}
	}
	return out
}

// counters is a scenario's result line: fault counters (the scenario
// fails if any is non-zero) and, after '#', what it measured.
type counters struct {
	name  string
	keys  []string
	vals  map[string]int
	info  []string
	start time.Time
}

func newCounters(name string, keys ...string) *counters {
	c := &counters{name: name, keys: keys, vals: map[string]int{}, start: time.Now()}
	return c
}

func (c *counters) add(k string, n int) {
	if _, ok := c.vals[k]; !ok && !contains(c.keys, k) {
		c.keys = append(c.keys, k)
	}
	c.vals[k] += n
}

func (c *counters) note(format string, a ...any) { c.info = append(c.info, fmt.Sprintf(format, a...)) }

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// report prints the one summary line (stdout and the summary file) and
// fails the test when a fault counter is non-zero.
func (c *counters) report(t *testing.T) {
	if t.Failed() { // a t.Fatal cut the scenario short: it proved nothing
		c.add("aborted", 1)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "scenario=%s", c.name)
	bad := false
	for _, k := range c.keys {
		fmt.Fprintf(&b, " %s=%d", k, c.vals[k])
		if c.vals[k] != 0 {
			bad = true
		}
	}
	res := "PASS"
	if bad {
		res = "FAIL"
	}
	fmt.Fprintf(&b, " result=%s # took=%.0fs", res, time.Since(c.start).Seconds())
	for _, s := range c.info {
		b.WriteString(" " + s)
	}
	line := b.String()
	fmt.Println(line)
	if f := os.Getenv("GPUQ_FAULTS_SUMMARY"); f != "" {
		if fh, err := os.OpenFile(f, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			fmt.Fprintln(fh, line)
			fh.Close()
		}
	}
	if bad {
		t.Errorf("%s", line)
	}
}

// markCmd is a task command that records when its process ran on which
// GPUs (start and end marks, the end also on SIGTERM), then sleeps s.
func (c *cluster) markCmd(s float64) string {
	f := filepath.Join(c.marks, "$GPUQ_TASK_ID")
	mark := func(kind string) string {
		return fmt.Sprintf(`echo "%s $GPUQ_TASK_ID $GPUQ_NODE $CUDA_VISIBLE_DEVICES $(date +%%s%%N)" >> %s`, kind, f)
	}
	return fmt.Sprintf(`trap '%s; exit 143' TERM; %s; sleep %g & wait $!; %s`,
		strings.ReplaceAll(mark("e"), "'", `'\''`), mark("s"), s, mark("e"))
}

// physicalOverlaps reads the marks and counts pairs of task processes that
// ran on one GPU at the same time (a process without an end mark runs
// until now).
func (c *cluster) physicalOverlaps() (int, []string) {
	type run struct {
		task       string
		start, end int64
	}
	byGPU := map[string][]run{}
	files, _ := os.ReadDir(c.marks)
	now := time.Now().UnixNano()
	for _, f := range files {
		fh, err := os.Open(filepath.Join(c.marks, f.Name()))
		if err != nil {
			continue
		}
		var open []run
		var gpus [][]string
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) != 5 {
				continue
			}
			ts, _ := strconv.ParseInt(fs[4], 10, 64)
			switch fs[0] {
			case "s":
				open = append(open, run{task: fs[1], start: ts, end: now})
				var gs []string
				for _, g := range strings.Split(fs[3], ",") {
					gs = append(gs, fs[2]+"/"+g)
				}
				gpus = append(gpus, gs)
			case "e":
				for i := range open {
					if open[i].end == now {
						open[i].end = ts
						break
					}
				}
			}
		}
		fh.Close()
		for i, r := range open {
			for _, g := range gpus[i] {
				byGPU[g] = append(byGPU[g], r)
			}
		}
	}
	n := 0
	var detail []string
	for g, rs := range byGPU {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
		for i := range rs {
			for j := i + 1; j < len(rs) && rs[j].start < rs[i].end; j++ {
				n++ // two tasks, or one task's command twice
				detail = append(detail, fmt.Sprintf("%s: %s [%d,%d] and %s [%d,%d]", g, rs[i].task, rs[i].start, rs[i].end, rs[j].task, rs[j].start, rs[j].end))
			}
		}
	}
	return n, detail
}

// publishRaw publishes bytes on a subject through JetStream and returns
// the stream sequence it got.
func (c *cluster) publishRaw(subject string, data []byte) (uint64, error) {
	j, err := js.New(c.nc)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := j.Publish(ctx, subject, data)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// envelope is a hand-written envelope (a foreign or skewed writer).
func envelope(typ events.Type, v int, at time.Time, data any) []byte {
	raw, _ := json.Marshal(data)
	b, _ := json.Marshal(events.Envelope{ID: newID(), Type: typ, Version: v, Time: at.UTC(), Data: raw})
	return b
}

// queueHTTP lists tasks over a submitter's HTTP API (NATS replies are
// bounded by the server's max payload; a list of 10,000 tasks is not).
func queueHTTP(base string, all bool) ([]api.TaskView, error) {
	resp, err := http.Get(fmt.Sprintf("%s/v1/tasks?all=%v", base, all))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	var out []api.TaskView
	err = json.NewDecoder(resp.Body).Decode(&out)
	return out, err
}

// show asks the submitter for one task over NATS.
func (c *cluster) show(id string) (api.TaskView, error) {
	var v api.TaskView
	err := c.api.Call(api.OpShow, api.IDRequest{TaskID: id}, &v)
	return v, err
}

// waitState waits until the task is in state s; it returns the last state seen.
func (c *cluster) waitState(id string, s string, d time.Duration) (string, bool) {
	last := ""
	ok := waitFor(d, func() bool {
		v, err := c.show(id)
		if err == nil {
			last = v.State
		}
		return last == s
	})
	return last, ok
}

// ready reports whether this incarnation of p logged its ready line within d.
func (p *proc) ready(d time.Duration) bool {
	return waitFor(d, func() bool { return strings.Contains(p.logSince(), `"message":"ready`) || !p.alive() }) &&
		strings.Contains(p.logSince(), `"message":"ready`)
}

// waitAll waits, for at most d in all, until every task is in state s;
// it returns the ones that are not, with the state they are in.
func (c *cluster) waitAll(ids []string, s string, d time.Duration) map[string]string {
	pending := map[string]string{}
	for _, id := range ids {
		pending[id] = "?"
	}
	waitFor(d, func() bool {
		for id := range pending {
			if v, err := c.show(id); err == nil {
				if v.State == s {
					delete(pending, id)
				} else {
					pending[id] = v.State
				}
			}
		}
		return len(pending) == 0
	})
	return pending
}

// logUnfinished logs, for each acknowledged task the clean fold does not
// hold as completed, its state and every record on its subject, so a
// failed run says where the task stopped.
func logUnfinished(t *testing.T, recs []rec, st *domain.State, ids []string) {
	t.Helper()
	for _, id := range ids {
		task := st.Tasks[id]
		if task != nil && task.State == domain.Completed {
			continue
		}
		state := domain.TaskState("absent")
		if task != nil {
			state = task.State
		}
		var hist []string
		for _, x := range recs {
			if strings.HasPrefix(x.Subject, events.TaskPrefix+id+".") {
				hist = append(hist, fmt.Sprintf("seq %d %s %s %T", x.Seq, x.Time.Format("15:04:05.000"), x.Subject, x.r.Event))
			}
		}
		t.Logf("task %s is %s; its records:\n  %s", id, state, strings.Join(hist, "\n  "))
	}
}
