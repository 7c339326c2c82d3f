//go:build browser

package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// call is one HTTP API call with a bearer token.
func (d *devStack) call(t *testing.T, token, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, d.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// TestDashboardWithToken: with `gpuq dev --auth`, the page asks for a
// token once; with a team's it shows that team's view (the teams table:
// its row only) and ticks the checklist through the API; the submitter's
// own credential may ask the advisor's calibration.
func TestDashboardWithToken(t *testing.T) {
	chrome := chromiumPath()
	if chrome == "" {
		t.Skip("browser test skipped: no chromium found (apt-get install chromium, or set GPUQ_CHROMIUM to a chromium or chrome binary)")
	}
	out := artefacts(t)
	t.Logf("artefacts: %s", out)
	authDir := filepath.Join(out, "auth")
	bin, _ := filepath.Abs(os.Getenv("GPUQ_BROWSER_BIN"))
	if os.Getenv("GPUQ_BROWSER_BIN") == "" {
		bin, _ = filepath.Abs("../../bin/gpuq")
	}
	if b, err := exec.Command(bin, "auth", "init", authDir, "--teams", "vision,nlp", "--nodes", "node-1").CombinedOutput(); err != nil {
		t.Fatalf("gpuq auth init: %v: %s", err, b)
	}
	tok := func(name string) string {
		b, err := os.ReadFile(filepath.Join(authDir, "tokens", name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	vision, nlp := tok("vision"), tok("nlp")
	d := startDev(t, out, "--auth", authDir)

	var sub struct {
		TaskID string `json:"task_id"`
	}
	task := map[string]any{"name": "tick-me", "team": "vision", "priority": "medium", "gpus": 1, "hours": 1,
		"hypothesis": "browser test: a checklist to tick", "command": "sleep 300"}
	if code := d.call(t, vision, "POST", "/v1/tasks", task, &sub); code/100 != 2 {
		t.Fatalf("submit as vision: %d", code)
	}
	task["name"], task["team"] = "other-team", "nlp"
	if code := d.call(t, nlp, "POST", "/v1/tasks", task, nil); code/100 != 2 {
		t.Fatalf("submit as nlp: %d", code)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancelC := chromedp.NewContext(actx)
	defer cancelC()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()
	con := &console{}
	if err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			con.add("exception: " + e.ExceptionDetails.Text)
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				con.add("console.error")
			}
		}
	}); err != nil {
		t.Fatalf("starting %s: %v", chrome, err)
	}
	shot := func(name string) {
		if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
			_ = os.WriteFile(filepath.Join(out, name), png, 0o644)
		}
	}
	eval := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return s
	}
	until := func(what, js string, ok func(string) bool) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			s := eval(js)
			if ok(s) {
				return s
			}
			if time.Now().After(deadline) {
				shot("failed-token.png")
				errs, _ := con.snapshot()
				t.Fatalf("%s: not within 30 s; last %q; page errors %q; gpuq dev log %s", what, s, errs, d.log)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// The page asks for a token, once.
	if err := chromedp.Do(ctx, chromedp.Navigate(d.base+"/#task/"+sub.TaskID), chromedp.WaitVisible(chromedp.ID("token"))); err != nil {
		t.Fatalf("the login form: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("token"), vision), chromedp.Click(`#login-form button[type="submit"]`)); err != nil {
		t.Fatalf("logging in: %v", err)
	}
	box := `document.querySelector('#checklist input[name="code_review"]')`
	until("the checklist, tickable", `String(!`+box+`.disabled) + " " + document.getElementById("checklist-note").textContent`,
		func(s string) bool { return strings.HasPrefix(s, "true ") })
	if err := chromedp.Do(ctx, chromedp.Click(`#checklist input[name="code_review"]`)); err != nil {
		t.Fatalf("ticking: %v", err)
	}
	// The tick's record comes back on the stream: the task page shows it
	// in its timeline, without a reload, and the box stays ticked.
	until("the tick recorded", `String(`+box+`.checked) + " " + document.getElementById("task-timeline").textContent`,
		func(s string) bool { return strings.HasPrefix(s, "true ") && strings.Contains(s, "checklist_updated") })
	var v struct {
		Checklist map[string]bool `json:"checklist"`
	}
	if code := d.call(t, vision, "GET", "/v1/tasks/"+sub.TaskID, nil, &v); code != 200 || !v.Checklist["code_review"] {
		t.Fatalf("after the tick: %d, checklist %v; want code_review done", code, v.Checklist)
	}
	shot("1-ticked.png")

	// The teams table shows the token's team only.
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`location.hash = "#teams"`)); err != nil {
		t.Fatal(err)
	}
	until("vision's row only", `[...document.querySelectorAll("#teams tbody th")].map((th) => th.textContent).join(",")`,
		func(s string) bool { return s == "vision" })

	// The submitter asks the advisor's calibration with its own credential.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st struct {
			Latest *struct{} `json:"latest"`
			Error  string    `json:"error"`
		}
		d.call(t, vision, "GET", "/v1/stats", nil, &st)
		if st.Latest != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no calibration sample within 30 s: %q", st.Error)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if errs, _ := con.snapshot(); len(errs) > 0 {
		t.Errorf("the page reported errors: %q", errs)
	}
}
