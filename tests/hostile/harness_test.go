//go:build hostile

package hostile

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// The shared `gpuq dev` processes, one per auth mode, started on first use
// and stopped when the suite ends. Cases that could break a process (the
// memory case, a data directory's restart) start their own.
var (
	sharedMu  sync.Mutex
	shared    = map[bool]*dev{}
	suiteDir  string
	gpuqPath  string
	suiteFail error
)

func TestMain(m *testing.M) {
	var err error
	if suiteDir, err = os.MkdirTemp("", "gpuq-hostile-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gpuqPath = os.Getenv("GPUQ_HOSTILE_BIN")
	if gpuqPath == "" {
		gpuqPath = "../../bin/gpuq"
	}
	if gpuqPath, err = filepath.Abs(gpuqPath); err != nil {
		suiteFail = err
	} else if _, err := os.Stat(gpuqPath); err != nil {
		suiteFail = fmt.Errorf("%v: run `make test-hostile` (it builds bin/gpuq), or set GPUQ_HOSTILE_BIN", err)
	}
	code := m.Run()
	for _, d := range shared {
		d.stop()
	}
	if code != 0 || os.Getenv("GPUQ_HOSTILE_KEEP") != "" {
		fmt.Fprintf(os.Stderr, "hostile: gpuq dev logs and data kept in %s\n", suiteDir)
	} else {
		os.RemoveAll(suiteDir)
	}
	os.Exit(code)
}

func bin(t *testing.T) string {
	t.Helper()
	if suiteFail != nil {
		t.Fatal(suiteFail)
	}
	return gpuqPath
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

// uniq is a name no other case uses.
func uniq(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// dev is one `gpuq dev` process.
type dev struct {
	name     string
	data     string // --data
	authDir  string // --auth ("" without)
	httpAddr string // host:port
	natsURL  string
	logPath  string
	extra    []string

	cmd  *exec.Cmd
	done chan struct{}
	err  error // the process's exit, once done
}

// devOpts says how to start a dev.
type devOpts struct {
	auth    bool     // with --auth (a directory of `gpuq auth init --teams vision,nlp`)
	authDir string   // an existing auth directory instead of a new one
	data    string   // an existing data directory instead of a new one
	extra   []string // more flags (e.g. --nodes 0)
}

var devSeq int

func newDev(t *testing.T, name string, o devOpts) *dev {
	t.Helper()
	sharedMu.Lock()
	devSeq++
	n := devSeq
	sharedMu.Unlock()
	dir := filepath.Join(suiteDir, fmt.Sprintf("%02d-%s", n, name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d := &dev{name: name, data: o.data, authDir: o.authDir, extra: o.extra, logPath: filepath.Join(dir, "dev.log")}
	if d.data == "" {
		d.data = filepath.Join(dir, "data")
	}
	if o.auth && d.authDir == "" {
		d.authDir = filepath.Join(dir, "auth")
		out, err := exec.Command(bin(t), "auth", "init", d.authDir, "--teams", "vision,nlp").CombinedOutput()
		if err != nil {
			t.Fatalf("gpuq auth init: %v: %s", err, out)
		}
	}
	d.httpAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	d.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	return d
}

func (d *dev) args() []string {
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(d.natsURL, "nats://"))
	a := []string{"dev", "--data", d.data, "--nats-port", port, "--http", d.httpAddr, "--heartbeat", "500ms"}
	if d.authDir != "" {
		a = append(a, "--auth", d.authDir)
	}
	return append(a, d.extra...)
}

// launch starts the process and returns at once.
func (d *dev) launch(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "\n#### gpuq %s\n", strings.Join(d.args(), " "))
	cmd := exec.Command(bin(t), d.args()...)
	cmd.Stdout, cmd.Stderr = f, f
	// Pdeathsig: a suite killed by go test's timeout leaves no gpuq dev behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	d.cmd, d.done = cmd, make(chan struct{})
	go func() { d.err = cmd.Wait(); f.Close(); close(d.done) }()
}

// start launches the process and waits for /healthz to say ok.
func (d *dev) start(t *testing.T) *dev {
	t.Helper()
	d.launch(t)
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			t.Fatalf("gpuq dev (%s) exited before it was ready: %v; log:\n%s", d.name, d.err, d.logTail(20))
		default:
		}
		if code, _ := d.health(); code == http.StatusOK {
			return d
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("gpuq dev (%s) not healthy in 90 s; log:\n%s", d.name, d.logTail(20))
	return nil
}

func (d *dev) health() (int, string) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + d.httpAddr + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (d *dev) alive() bool {
	if d.done == nil {
		return false
	}
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

func (d *dev) pid() int { return d.cmd.Process.Pid }

// stop ends the process: SIGTERM, then SIGKILL after 15 s.
func (d *dev) stop() {
	if !d.alive() {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

func (d *dev) kill() {
	if d.alive() {
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

func (d *dev) logTail(n int) string {
	b, _ := os.ReadFile(d.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sharedDev is the suite's gpuq dev of that auth mode.
func sharedDev(t *testing.T, auth bool) *dev {
	t.Helper()
	sharedMu.Lock()
	d := shared[auth]
	sharedMu.Unlock()
	if d != nil && d.alive() {
		return d
	}
	name := "shared-plain"
	if auth {
		name = "shared-auth"
	}
	d = newDev(t, name, devOpts{auth: auth}).start(t)
	sharedMu.Lock()
	shared[auth] = d
	sharedMu.Unlock()
	return d
}

// ownDev is a gpuq dev for one case only, stopped when it ends.
func ownDev(t *testing.T, name string, o devOpts) *dev {
	t.Helper()
	d := newDev(t, name, o).start(t)
	t.Cleanup(d.stop)
	return d
}

// token is the HTTP bearer token of a team ("admin" for the admin's).
func (d *dev) token(t *testing.T, who string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.authDir, "tokens", who))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func (d *dev) creds(role string) string { return filepath.Join(d.authDir, "creds", role+".creds") }

// ---- HTTP ----

// reply is an HTTP answer.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error // transport error (Status 0)
}

// errBody is the error shape of every failure.
type errBody struct {
	Error    string `json:"error"`
	Field    string `json:"field"`
	NotFound bool   `json:"not_found"`
}

func (r reply) errBody() errBody {
	var e errBody
	_ = json.Unmarshal(r.Body, &e)
	return e
}

func (r reply) String() string {
	if r.Err != nil {
		return "transport error: " + r.Err.Error()
	}
	b := r.Body
	if len(b) > 300 {
		b = append(b[:300:300], "…"...)
	}
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(b))
}

var httpClient = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// req is one HTTP request; hdr "Host" sets the Host header, a header with
// an empty value is left out (Content-Type is application/json on a POST
// unless hdr says otherwise).
func (d *dev) req(method, path string, hdr map[string]string, body []byte) reply {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	r, err := http.NewRequest(method, "http://"+d.httpAddr+path, rd)
	if err != nil {
		return reply{Err: err}
	}
	if method == http.MethodPost {
		r.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		switch {
		case k == "Host":
			r.Host = v
		case v == "":
			r.Header.Del(k)
		default:
			r.Header.Set(k, v)
		}
	}
	resp, err := httpClient.Do(r)
	if err != nil {
		return reply{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: b, Err: err}
}

// auth is the Authorization header of who on an --auth dev (nil without).
func (d *dev) auth(t *testing.T, who string) map[string]string {
	if d.authDir == "" {
		return map[string]string{}
	}
	return map[string]string{"Authorization": "Bearer " + d.token(t, who)}
}

func with(h map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// task is a valid submission of team vision; edit it per case.
func task(name string) map[string]any {
	return map[string]any{"name": name, "team": "vision", "priority": "low", "gpus": 1, "hours": 0.5,
		"hypothesis": "hostile: " + name, "command": "echo " + name}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// submit submits over HTTP as team vision and returns the task id.
func (d *dev) submit(t *testing.T, body map[string]any) string {
	t.Helper()
	r := d.req("POST", "/v1/tasks", d.auth(t, "vision"), mustJSON(body))
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("submit %v: %s", body["name"], r)
	}
	var rep struct {
		TaskID string `json:"task_id"`
	}
	if err := json.Unmarshal(r.Body, &rep); err != nil || rep.TaskID == "" {
		t.Fatalf("submit answered %s", r)
	}
	return rep.TaskID
}

// view is what show answers (the fields the suite reads).
type view struct {
	TaskID    string   `json:"task_id"`
	Name      string   `json:"name"`
	State     string   `json:"state"`
	GPUs      int      `json:"gpus"`
	Hours     float64  `json:"hours"`
	Command   string   `json:"command"`
	StartedAt *string  `json:"started_at"`
	Reason    string   `json:"reason"`
	Env       []string `json:"-"`
}

func (d *dev) show(t *testing.T, id string) view {
	t.Helper()
	r := d.req("GET", "/v1/tasks/"+id, d.auth(t, "vision"), nil)
	if r.Status != http.StatusOK {
		t.Fatalf("show %s: %s", id, r)
	}
	var v view
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("show %s: %v: %s", id, err, r)
	}
	return v
}

func (d *dev) waitState(t *testing.T, id string, states ...string) view {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var v view
	for time.Now().Before(deadline) {
		v = d.show(t, id)
		for _, s := range states {
			if v.State == s {
				return v
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("task %s is %s after 60 s, want one of %v", id, v.State, states)
	return v
}

// everything is the raw answer of the whole queue over HTTP, every page
// of it: pages of ?limit= follow the Link rel="next" header (or a next
// cursor in the body); a server without pages answers all at once.
func (d *dev) everything(t *testing.T) string {
	t.Helper()
	var all strings.Builder
	path := "/v1/tasks?all=true&limit=1000"
	for range 10000 {
		r := d.req("GET", path, d.admin(t), nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET %s: %s", path, r)
		}
		all.Write(r.Body)
		next := ""
		for _, l := range r.Header.Values("Link") {
			for _, part := range strings.Split(l, ",") {
				if u, rest, ok := strings.Cut(strings.TrimSpace(part), ">"); ok && strings.Contains(rest, `rel="next"`) {
					next = strings.TrimPrefix(u, "<")
				}
			}
		}
		if next == "" {
			var page struct {
				Next string `json:"next"`
			}
			if json.Unmarshal(r.Body, &page) == nil && page.Next != "" {
				next = "/v1/tasks?all=true&limit=1000&after=" + page.Next
			}
		}
		if next == "" {
			break
		}
		if i := strings.Index(next, "/v1/"); i > 0 {
			next = next[i:] // an absolute URL
		}
		path = next
	}
	return all.String()
}

// admin is the admin's Authorization header (none without --auth).
func (d *dev) admin(t *testing.T) map[string]string { return d.auth(t, "admin") }

// ---- NATS ----

// natsReply is api.Reply as the wire has it.
type natsReply struct {
	Result   json.RawMessage `json:"result"`
	Error    string          `json:"error"`
	Field    string          `json:"field"`
	NotFound bool            `json:"not_found"`
}

// connect opens a NATS connection as role ("" without --auth).
func (d *dev) connect(t *testing.T, role string) *nats.Conn {
	t.Helper()
	opts := []nats.Option{nats.Name("gpuq-hostile"), nats.Timeout(10 * time.Second)}
	if d.authDir != "" && role != "" {
		opts = append(opts, nats.UserCredentials(d.creds(role)))
		// A role may subscribe to its own inbox prefix only (the creds
		// file names it in a comment, as the gpuq CLI reads it).
		if b, err := os.ReadFile(d.creds(role)); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "# inbox: "); ok {
					opts = append(opts, nats.CustomInboxPrefix(strings.TrimSpace(v)))
				}
			}
		}
	}
	// Permission errors arrive asynchronously: keep them quiet.
	opts = append(opts, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	nc, err := nats.Connect(d.natsURL, opts...)
	if err != nil {
		t.Fatalf("connect as %q: %v", role, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// call sends a raw request on subject and decodes the api.Reply.
func call(nc *nats.Conn, subject string, body []byte, timeout time.Duration) (natsReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		return natsReply{}, err
	}
	var r natsReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return natsReply{}, fmt.Errorf("reply %q: %w", m.Data, err)
	}
	return r, nil
}

// ---- CLI ----

type cliResult struct {
	Code           int
	Stdout, Stderr string
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d; stdout %q; stderr %q", r.Code, clip(r.Stdout), clip(r.Stderr))
}

func clip(s string) string {
	if len(s) > 400 {
		return s[:400] + "…"
	}
	return s
}

// cli runs bin/gpuq with args (and env, on top of a minimal environment).
func cli(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("gpuq %v: %v", args, err)
	}
	return cliResult{code, out.String(), errb.String()}
}

// natsFlags are the CLI's connection flags for role.
func (d *dev) natsFlags(role string) []string {
	f := []string{"--nats", d.natsURL}
	if d.authDir != "" && role != "" {
		f = append(f, "--creds", d.creds(role))
	}
	return f
}

// ---- memory ----

// procStatusKB reads a field (VmRSS, VmHWM) of /proc/PID/status in kB.
func procStatusKB(pid int, field string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return -1
}

// memGuard watches a process's resident memory and kills it when it
// grows past limitKB over its start: a suite that finds the finding must
// not take the machine with it.
type memGuard struct {
	stop   chan struct{}
	done   chan struct{}
	killed bool
	peakKB int
}

func guard(d *dev, limitKB int) *memGuard {
	g := &memGuard{stop: make(chan struct{}), done: make(chan struct{})}
	base := procStatusKB(d.pid(), "VmRSS")
	go func() {
		defer close(g.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-tick.C:
			}
			rss := procStatusKB(d.pid(), "VmRSS")
			if rss < 0 {
				return
			}
			g.peakKB = max(g.peakKB, rss)
			if rss-base > limitKB {
				g.killed = true
				_ = syscall.Kill(d.pid(), syscall.SIGKILL)
				return
			}
		}
	}()
	return g
}

func (g *memGuard) end() *memGuard { close(g.stop); <-g.done; return g }
