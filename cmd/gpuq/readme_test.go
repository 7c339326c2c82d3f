package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A README command and the output it shows.
type readmeStep struct {
	line    int // in README.md
	command string
	output  []string
}

var (
	taskIDRe     = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	trailComment = regexp.MustCompile(`\s{2,}# .*$`)
)

// readmeSteps extracts the `$ ` commands of README.md's console blocks,
// with their continuation lines and the output shown under them.
func readmeSteps(t *testing.T, path string) []readmeStep {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var steps []readmeStep
	in, cont := false, false
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "```console"):
			in = true
			continue
		case strings.HasPrefix(l, "```"):
			in, cont = false, false
			continue
		case !in:
			continue
		}
		switch {
		case cont:
			s := &steps[len(steps)-1]
			s.command += " " + strings.TrimSpace(strings.TrimSuffix(l, "\\"))
			cont = strings.HasSuffix(l, "\\")
		case strings.HasPrefix(l, "$ "):
			c := trailComment.ReplaceAllString(strings.TrimPrefix(l, "$ "), "")
			cont = strings.HasSuffix(c, "\\")
			steps = append(steps, readmeStep{line: i + 1, command: strings.TrimSpace(strings.TrimSuffix(c, "\\"))})
		case len(steps) > 0 && strings.TrimSpace(l) != "":
			s := &steps[len(steps)-1]
			s.output = append(s.output, l)
		}
	}
	return steps
}

// shapeKey is what a line of output says regardless of ids, times and
// counts: its first word that is not a number, a date, a time, a task id
// or an ellipsis ("" when there is none).
func shapeKey(line string) string {
	for _, f := range strings.Fields(line) {
		switch {
		case taskIDRe.MatchString(f), f == "…", f == "UTC":
		case regexp.MustCompile(`^[0-9][0-9:.\-+T]*$`).MatchString(f):
		case regexp.MustCompile(`^\(?[A-Z]{3,4}\)?$`).MatchString(f) && f != "TASK":
		default:
			return f
		}
	}
	return ""
}

// TestREADMEWalk runs the README's tour as written — every `$ ` command of
// its console blocks, through sh, with the built gpuq first on PATH,
// against a `gpuq dev` started as the tour says — and checks each exits 0
// and prints output of the shape the README shows (the same leading word
// on each line; ids, times and counts differ). Task ids of the README are
// mapped to the ones the run's submits print, in order. `watch` follows a
// task to its end (minutes for the LOW re-run): it runs for 8 s and must
// show the README's first lines. A history shows at least its first
// lines too (the README's is of a later moment). A command the README
// shows without output must print nothing.
func TestREADMEWalk(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed (the tour's job is examples/train.py)")
	}
	bin := buildCLI(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	steps := readmeSteps(t, filepath.Join(root, "README.md"))
	if len(steps) < 8 {
		t.Fatalf("README.md has %d console commands; the tour has more", len(steps))
	}
	port := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	natsPort, httpAddr := port(), fmt.Sprintf("127.0.0.1:%d", port())
	data := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	dev := exec.CommandContext(ctx, bin, "dev", "--data", data, "--nats-port", fmt.Sprint(natsPort), "--http", httpAddr)
	dev.Dir = root
	var devLog bytes.Buffer
	dev.Stdout, dev.Stderr = &devLog, &devLog
	dev.Cancel = func() error { return dev.Process.Signal(os.Interrupt) }
	dev.WaitDelay = 20 * time.Second
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = dev.Wait()
		if t.Failed() {
			t.Logf("gpuq dev:\n%s", devLog.String())
		}
	})
	healthy := false
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if r, err := http.Get("http://" + httpAddr + "/healthz"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				healthy = true
				break
			}
		}
	}
	if !healthy {
		t.Fatal("gpuq dev not healthy in 60 s")
	}

	env := append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"), fmt.Sprintf("GPUQ_NATS_URL=nats://127.0.0.1:%d", natsPort), "TZ=UTC")
	sh := func(command string, timeout time.Duration) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
		cmd.Dir, cmd.Env = root, env
		// The timeout ends the command's whole group (sh and gpuq).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 2 * time.Second
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", command, err)
		}
		if ctx.Err() != nil {
			code = 124
		}
		return string(out), code
	}

	ids := map[string]string{} // README id → this run's
	for _, st := range steps {
		cmdline := st.command
		follows := strings.HasPrefix(cmdline, "gpuq watch ")
		for _, id := range taskIDRe.FindAllString(cmdline, -1) {
			if ids[id] == "" {
				// A task the tour does not submit ("a task you no longer
				// need"): submit one.
				out, code := sh(`gpuq submit --name filler --team vision --gpus 1 --hours 0.1 --hypothesis filler --command "sleep 60"`, 30*time.Second)
				if code != 0 {
					t.Fatalf("submit a task for README line %d: exit %d: %s", st.line, code, out)
				}
				ids[id] = taskIDRe.FindString(out) // stderr may carry notes (a secret-looking variable left out)
			}
			cmdline = strings.ReplaceAll(cmdline, id, ids[id])
		}
		timeout := 60 * time.Second
		if follows {
			timeout = 8 * time.Second
		}
		began := time.Now()
		out, code := sh(cmdline, timeout)
		t.Logf("README line %d: `%s`: exit %d in %s\n%s", st.line, st.command, code, time.Since(began).Round(time.Millisecond), out)
		if code != 0 && !(follows && code == 124) {
			t.Errorf("README line %d: `%s`: exit %d:\n%s", st.line, st.command, code, out)
			continue
		}
		// A submit's id maps the README's.
		if strings.HasPrefix(cmdline, "gpuq submit ") && len(st.output) > 0 {
			if want := taskIDRe.FindString(st.output[0]); want != "" {
				ids[want] = taskIDRe.FindString(out)
			}
		}
		// The shape: each README line's leading word is in the output.
		got := map[string]bool{}
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			got[shapeKey(sc.Text())] = true
		}
		// A command shown without output prints none: the README shows
		// what it prints (amend printed the task under an empty example).
		if len(st.output) == 0 && !follows && strings.TrimSpace(out) != "" {
			t.Errorf("README line %d: `%s`: the README shows no output, the command prints:\n%s", st.line, st.command, out)
		}
		want := st.output
		if follows || strings.HasPrefix(cmdline, "gpuq history ") {
			want = want[:min(len(want), 2)]
		}
		for _, l := range want {
			if k := shapeKey(l); k != "" && !got[k] {
				t.Errorf("README line %d: `%s`: the README shows a line starting %q, the output has none:\n%s", st.line, st.command, k, out)
				break
			}
		}
		// Let the scheduler and the advisor see what was just done, as a
		// person typing the next command would.
		time.Sleep(time.Second)
	}
}
