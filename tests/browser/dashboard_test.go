//go:build browser

package browser

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// chromiumPath finds a chromium: $GPUQ_CHROMIUM, else the usual names on
// PATH. "" when there is none.
func chromiumPath() string {
	if p := os.Getenv("GPUQ_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artefacts is where the screenshots, gpuq dev's log and data go: a new
// directory per run under $GPUQ_ARTIFACTS/browser, else under the system's
// temporary directory; it is kept, and its path is logged.
func artefacts(t *testing.T) string {
	t.Helper()
	parent := os.Getenv("GPUQ_ARTIFACTS")
	if parent != "" {
		parent = filepath.Join(parent, "browser")
		if err := os.MkdirAll(parent, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := os.MkdirTemp(parent, "gpuq-browser-"+time.Now().UTC().Format("20060102T150405Z")+"-")
	if err != nil {
		t.Fatal(err)
	}
	return dir
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

// devStack is one `gpuq dev` process on free ports: one mock node of 8 GPUs.
type devStack struct {
	base string // http://127.0.0.1:port
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func startDev(t *testing.T, dir string, extra ...string) *devStack {
	t.Helper()
	bin := os.Getenv("GPUQ_BROWSER_BIN")
	if bin == "" {
		bin = "../../bin/gpuq"
	}
	bin, err := filepath.Abs(bin)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		t.Fatalf("%v: run `make test-browser` (it builds bin/gpuq), or set GPUQ_BROWSER_BIN", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	d := &devStack{base: "http://" + addr, log: filepath.Join(dir, "dev.log"), done: make(chan struct{})}
	f, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(bin, append([]string{"dev", "--data", filepath.Join(dir, "data"), "--nats-port", strconv.Itoa(freePort(t)),
		"--http", addr, "--gpus", "8", "--heartbeat", "500ms"}, extra...)...)
	d.cmd.Stdout, d.cmd.Stderr = f, f
	// Pdeathsig: a test killed by go test's timeout leaves no gpuq dev behind.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	go func() { _ = d.cmd.Wait(); f.Close(); close(d.done) }()
	// Runs after the stop below: the data directory is kept on a failure.
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(filepath.Join(dir, "data"))
		}
	})
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			t.Fatalf("gpuq dev exited before it was ready; log %s:\n%s", d.log, tail(d.log))
		default:
		}
		if resp, err := http.Get(d.base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("gpuq dev not healthy in 90 s; log %s:\n%s", d.log, tail(d.log))
	return nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

func (d *devStack) submit(t *testing.T, body map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(d.base+"/v1/tasks", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var rep struct {
		TaskID string `json:"task_id"`
	}
	if resp.StatusCode/100 != 2 || json.Unmarshal(out, &rep) != nil || rep.TaskID == "" {
		t.Fatalf("submit %v: %d %s", body["name"], resp.StatusCode, out)
	}
	return rep.TaskID
}

func (d *devStack) state(t *testing.T, id string) string {
	t.Helper()
	resp, err := http.Get(d.base + "/v1/tasks/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		State string `json:"state"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return v.State
}

func (d *devStack) waitState(t *testing.T, id, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	got := ""
	for time.Now().Before(deadline) {
		if got = d.state(t, id); got == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("task %s: state %q after %s, want %q; gpuq dev log %s:\n%s", id, got, within, want, d.log, tail(d.log))
}

// row is what the page shows of one task (the queue table's row of
// data-id), with the marks that tell a reload apart.
type row struct {
	Present bool   `json:"present"`
	State   string `json:"state"`   // the State cell
	P50     string `json:"p50"`     // the Start P50 cell's text
	P50Time string `json:"p50time"` // its <time datetime>
	Reason  string `json:"reason"`  // the Reason cell
	Mark    string `json:"mark"`    // window.__gpuqMark, set once after the load
	Fresh   string `json:"fresh"`   // the freshness badge
}

const rowJS = `(() => {
  const r = document.querySelector('#queue tbody tr[data-id="%s"]');
  const c = (i) => r && r.cells[i] ? r.cells[i].textContent.trim() : "";
  const tm = r && r.cells[7] ? r.cells[7].querySelector("time") : null;
  return {present: !!r, state: c(6), p50: c(7), p50time: tm ? tm.getAttribute("datetime") : "", reason: c(10),
    mark: String(window.__gpuqMark || ""),
    fresh: (document.getElementById("fresh") || {}).textContent || ""};
})()`

// console gathers what the page reports: JavaScript exceptions and
// console.error calls fail the test.
type console struct {
	mu   sync.Mutex
	errs []string
	navs int // main-frame navigations
}

func (c *console) add(s string) { c.mu.Lock(); c.errs = append(c.errs, s); c.mu.Unlock() }

func (c *console) snapshot() ([]string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errs...), c.navs
}

func TestDashboardWaitingRowGoesLive(t *testing.T) {
	chrome := chromiumPath()
	if chrome == "" {
		t.Skip("browser test skipped: no chromium found (apt-get install chromium, or set GPUQ_CHROMIUM to a chromium or chrome binary)")
	}
	out := artefacts(t)
	t.Logf("artefacts (screenshots, gpuq dev log): %s", out)
	d := startDev(t, out)

	// Task A fills the node's 8 GPUs until the test creates its release file.
	release := filepath.Join(out, "release-a")
	a := d.submit(t, map[string]any{"name": "fills-node", "team": "vision", "priority": "medium", "gpus": 8, "hours": 1,
		"hypothesis": "browser test: holds every GPU", "command": fmt.Sprintf("while [ ! -e %q ]; do sleep 0.2; done", release)})
	d.waitState(t, a, "running", 30*time.Second)
	b := d.submit(t, map[string]any{"name": "waits-for-gpus", "team": "vision", "priority": "medium", "gpus": 8, "hours": 0.5,
		"hypothesis": "browser test: waits for fills-node", "command": "sleep 120"})

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1600, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancelC := chromedp.NewContext(actx)
	defer cancelC()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()

	con := &console{}
	// Listen starts the browser and opens the tab; it hears every event
	// from then on.
	if err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg := e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil && e.ExceptionDetails.Exception.Description != "" {
				msg += ": " + e.ExceptionDetails.Exception.Description
			}
			con.add("exception: " + msg)
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
				var parts []string
				for _, a := range e.Args {
					if a.Value != nil {
						parts = append(parts, string(a.Value))
					} else {
						parts = append(parts, a.Description)
					}
				}
				con.add("console." + string(e.Type) + ": " + strings.Join(parts, " "))
			}
		case *page.EventFrameNavigated:
			if e.Frame.ParentID == "" {
				con.mu.Lock()
				con.navs++
				con.mu.Unlock()
			}
		}
	}); err != nil {
		t.Fatalf("starting %s: %v", chrome, err)
	}

	// shot keeps a screenshot of the page as a test artefact.
	shot := func(name string) error {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			return fmt.Errorf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(out, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			return err
		}
		t.Logf("screenshot: %s", p)
		return nil
	}
	read := func() row {
		t.Helper()
		r, err := chromedp.Run(ctx, chromedp.Evaluate[row](fmt.Sprintf(rowJS, b)))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		return r
	}
	// until polls the page until ok says so; on timeout it keeps a
	// screenshot and fails with what the page showed last.
	until := func(what string, within time.Duration, ok func(row) bool) row {
		t.Helper()
		deadline := time.Now().Add(within)
		var r row
		for {
			r = read()
			if ok(r) {
				return r
			}
			if time.Now().After(deadline) {
				if err := shot("failed.png"); err != nil {
					t.Log(err)
				}
				errs, _ := con.snapshot()
				t.Fatalf("%s: not within %s; the row of %s: %+v; page errors: %q; gpuq dev log %s", what, within, b, r, errs, d.log)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// Load the page once and mark the window: a reload would lose the mark.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(d.base+"/"),
		chromedp.WaitVisible(chromedp.ID("queue")),
		chromedp.Evaluate[chromedp.Void](`window.__gpuqMark = "loaded-once"`),
	); err != nil {
		t.Fatalf("loading %s/: %v", d.base, err)
	}

	// 1. The waiting task is listed with its start estimate and its reason.
	waiting := until("the waiting task listed with its P50 start and reason", 30*time.Second, func(r row) bool {
		return r.Present && r.State == "queued" && r.P50Time != "" && r.Reason != ""
	})
	t.Logf("waiting row: state %q, P50 %q (%s), reason %q; badge %q", waiting.State, waiting.P50, waiting.P50Time, waiting.Reason, waiting.Fresh)
	if !strings.Contains(waiting.Fresh, "live") {
		t.Errorf("freshness badge %q, want it live", waiting.Fresh)
	}
	if err := shot("1-waiting.png"); err != nil {
		t.Fatal(err)
	}

	// 1b. The other views, without a reload: the cluster's grid and the
	// busy node's timeline from the policy's plan (the running task to its
	// predicted end, the waiting one's reservation after it), the teams,
	// the waiting task's page; and 10,000 queued rows rendered in ≤ 1 s.
	views(t, ctx, d, a, b, out, shot)

	// 2. The first task ends; the waiting row changes without a reload:
	// it leaves the queued view, and the running view shows it started.
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.waitState(t, a, "completed", 30*time.Second)
	until("the started task leaving the queued view", 30*time.Second, func(r row) bool { return !r.Present })
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("f-state"), "active"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("f-state").dispatchEvent(new Event("input"))`)); err != nil {
		t.Fatalf("choosing the running view: %v", err)
	}
	started := until("the task running in the running view", 30*time.Second, func(r row) bool {
		return r.Present && r.State != "queued" && r.State != ""
	})
	t.Logf("after the first task ended: state %q", started.State)
	if err := shot("2-started.png"); err != nil {
		t.Fatal(err)
	}

	if started.Mark != "loaded-once" {
		t.Errorf("the page was reloaded: window mark %q, want loaded-once", started.Mark)
	}
	errs, navs := con.snapshot()
	if navs != 1 {
		t.Errorf("main-frame navigations: %d, want 1 (the page reloaded)", navs)
	}
	if len(errs) > 0 {
		t.Errorf("the page reported errors:\n%s", strings.Join(errs, "\n"))
	}
}

// viewsJS reads what the cluster, teams and task views show.
const viewsJS = `(() => {
  const q = (sel) => document.querySelectorAll(sel);
  const teams = {};
  for (const tr of q("#teams tbody tr")) teams[tr.cells[0].textContent] = [...tr.cells].map((c) => c.textContent.trim());
  return {
    gpus: q("#nodes .gpu").length,
    held: q("#nodes .gpu.held").length,
    timelines: q("#plan svg.timeline-svg").length,
    running: q("#plan svg.timeline-svg rect.bar.running").length,
    reserved: q("#plan svg.timeline-svg rect.bar.reserved").length,
    planSum: (document.getElementById("plan-sum") || {}).textContent || "",
    teams: teams,
    taskH: (document.getElementById("task-h") || {}).textContent || "",
    explain: (document.getElementById("task-explain-text") || {}).textContent || "",
    estimates: (document.getElementById("task-estimates") || {}).textContent || "",
    estSVG: q("#task-estimates svg").length,
    checks: q("#checklist input[type=checkbox]").length,
    checksOff: q("#checklist input[type=checkbox]:disabled").length,
    note: (document.getElementById("checklist-note") || {}).textContent || "",
    calib: (document.getElementById("queue-calib") || {}).textContent || "",
    calibFacts: (document.getElementById("calib-facts") || {}).textContent || "",
  };
})()`

type viewsRead struct {
	GPUs      int                 `json:"gpus"`
	Held      int                 `json:"held"`
	Timelines int                 `json:"timelines"`
	Running   int                 `json:"running"`
	Reserved  int                 `json:"reserved"`
	PlanSum   string              `json:"planSum"`
	Teams     map[string][]string `json:"teams"`
	TaskH     string              `json:"taskH"`
	Explain   string              `json:"explain"`
	Estimates string              `json:"estimates"`
	EstSVG    int                 `json:"estSVG"`
	Checks    int                 `json:"checks"`
	ChecksOff int                 `json:"checksOff"`
	Note      string              `json:"note"`
	Calib     string              `json:"calib"`
	CalibF    string              `json:"calibFacts"`
}

// renderJS times the queue's rendering with 10,000 more queued tasks
// (made up in the page: what is measured is the page's work, filters,
// order and the visible page, not the API's), then drops them.
const renderJS = `(() => {
  const saved = st.tasks, savedById = st.byId;
  const fake = [];
  for (let i = 0; i < 10000; i++) {
    const id = "0190a5b2-3c4d-7e8f-9a0b-" + String(i).padStart(12, "0");
    fake.push({task_id: id, name: "load-" + i, team: i % 2 ? "vision" : "nlp", priority: "medium", gpus: 1 + (i % 8), hours: 1, state: "queued"});
  }
  st.tasks = saved.concat(fake);
  st.byId = new Map(st.tasks.map((t) => [t.task_id, t]));
  const t0 = performance.now();
  st.suffix = suffixLen(st.tasks.map((x) => x.task_id));
  fillFilters();
  renderQueue();
  const ms = performance.now() - t0;
  const rows = document.querySelectorAll("#queue tbody tr").length;
  const sum = document.getElementById("queue-sum").textContent;
  st.tasks = saved; st.byId = savedById; st.suffix = suffixLen(saved.map((x) => x.task_id));
  renderQueue();
  return {ms: ms, rows: rows, sum: sum};
})()`

func views(t *testing.T, ctx context.Context, d *devStack, a, b, out string, shot func(string) error) {
	t.Helper()
	read := func() viewsRead {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[viewsRead](viewsJS))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		return v
	}
	until := func(what string, ok func(viewsRead) bool) viewsRead {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			v := read()
			if ok(v) {
				return v
			}
			if time.Now().After(deadline) {
				_ = shot("failed-views.png")
				t.Fatalf("%s: not within 30 s; the page showed %+v; gpuq dev log %s", what, v, d.log)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	hash := func(h string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`location.hash = "`+h+`"`)); err != nil {
			t.Fatalf("going to %s: %v", h, err)
		}
	}

	hash("#cluster")
	v := until("the cluster grid and the busy node's timeline", func(v viewsRead) bool {
		return v.GPUs == 8 && v.Held == 8 && v.Timelines == 1 && v.Running == 8 && v.Reserved == 8
	})
	t.Logf("cluster: %d GPUs, %d held; timeline: %d running bars, %d reserved; %s", v.GPUs, v.Held, v.Running, v.Reserved, v.PlanSum)
	if !strings.Contains(v.PlanSum, "reservation") || !strings.Contains(v.PlanSum, "waits-for-gpus") {
		t.Errorf("plan summary %q: want the waiting task's reservation", v.PlanSum)
	}
	if err := shot("3-cluster.png"); err != nil {
		t.Fatal(err)
	}
	// The README's screenshot: the cluster's view, the whole page at a
	// laptop's width.
	if dst := os.Getenv("GPUQ_SCREENSHOT"); dst != "" {
		err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800))
		var png []byte
		if err == nil {
			png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
		}
		if err == nil {
			err = os.WriteFile(dst, png, 0o644)
		}
		if err != nil {
			t.Errorf("screenshot for %s: %v", dst, err)
		}
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1600, 900)); err != nil {
			t.Fatal(err)
		}
	}

	hash("#teams")
	v = until("the teams table", func(v viewsRead) bool { return len(v.Teams["vision"]) == 7 })
	// Team, guarantee, used, borrowed, running, queued, waiting GPU-hours:
	// fills-node holds 8 (nothing borrowed without a teams file);
	// waits-for-gpus waits with 8 GPUs × 0.5 h.
	if got := strings.Join(v.Teams["vision"][1:], " "); got != "none 8 0 1 1 4.0" {
		t.Errorf("vision's row %q, want %q", got, "none 8 0 1 1 4.0")
	}

	// The estimates' coverage beside the queue, and the calibration view:
	// the advisor's figures (nothing judged yet in a fresh stack).
	hash("#calibration")
	v = until("the calibration view", func(v viewsRead) bool {
		return strings.HasPrefix(v.Calib, "Start estimates:") && strings.Contains(v.CalibF, "Judged waits")
	})
	t.Logf("calibration: %q; %q", v.Calib, v.CalibF)

	hash("#task/" + b)
	v = until("the waiting task's page", func(v viewsRead) bool {
		return strings.Contains(v.TaskH, "waits-for-gpus") && v.Explain != "" && v.Estimates != "" && v.Checks == 3
	})
	t.Logf("task page: %q; explain %q; estimates %q (%d charts); checklist %q", v.TaskH, v.Explain, v.Estimates, v.EstSVG, v.Note)
	if strings.HasPrefix(v.Explain, "No breakdown") {
		t.Errorf("explain: %q", v.Explain)
	}
	if v.ChecksOff != 3 || !strings.Contains(v.Note, "Read-only") {
		t.Errorf("checklist without tokens: %d of 3 disabled, note %q; want read-only", v.ChecksOff, v.Note)
	}
	if err := shot("4-task.png"); err != nil {
		t.Fatal(err)
	}

	// On a phone's width no view is wider than the screen (the queue's
	// table scrolls in its own box); the timeline's bars are links to
	// the tasks' pages, so the keyboard reaches them.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"#queue", "#cluster", "#teams", "#calibration", "#task/" + b} {
		hash(h)
		time.Sleep(300 * time.Millisecond)
		w, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`[document.documentElement.scrollWidth, window.innerWidth]`))
		if err != nil {
			t.Fatal(err)
		}
		if w[0] > w[1]+1 {
			_ = shot("failed-phone.png")
			t.Errorf("%s on a 390 px phone: the page is %.0f px wide", h, w[0])
		}
	}
	hash("#cluster")
	if err := shot("5-phone-cluster.png"); err != nil {
		t.Fatal(err)
	}
	links, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#plan svg a[href^="#task/"]').length`))
	if err != nil || links < 8 {
		t.Errorf("the timeline's bars as links: %d (%v), want ≥ 8", links, err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1600, 900)); err != nil {
		t.Fatal(err)
	}

	hash("#queue")
	r, err := chromedp.Run(ctx, chromedp.Evaluate[struct {
		MS   float64 `json:"ms"`
		Rows int     `json:"rows"`
		Sum  string  `json:"sum"`
	}](renderJS))
	if err != nil {
		t.Fatalf("timing the queue: %v", err)
	}
	t.Logf("10,000 more queued tasks: rendered in %.0f ms (%d rows on the page; %s)", r.MS, r.Rows, r.Sum)
	if r.MS > 1000 || r.Rows != 50 {
		t.Errorf("10,000 queued tasks: %.0f ms, %d rows; want ≤ 1000 ms and a page of 50", r.MS, r.Rows)
	}
	_ = a
	_ = out
}
