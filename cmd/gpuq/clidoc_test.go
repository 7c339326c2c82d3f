package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// docs/cli.md is generated: every command of the tree, in its order, with
// exactly what `gpuq <command> --help` prints, and after it the
// hand-written notes of docs/cli/<command>.md (a command's path without
// "gpuq", words joined by "-"). docs/cli/_preface.md goes first and
// docs/cli/_appendix.md last. `make docs` (or `go generate ./cmd/gpuq`)
// writes it; TestCLIDoc fails while it is not current.

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/cli.md from the commands")

const (
	cliDocPath   = "../../docs/cli.md"
	cliNotesDir  = "../../docs/cli"
	cliRegenHint = "make docs (or: cd cmd/gpuq && go test -run '^TestCLIDoc$' -update-docs .)"
)

// docEnv are the variables flag defaults read: unset while the doc is made,
// so it shows the defaults of a bare environment.
var docEnv = []string{"GPUQ_NATS_URL", "GPUQ_NATS_CREDS", "GPUQ_NATS_CA", "GPUQ_NATS_CERT", "GPUQ_NATS_KEY", "GPUQ_TASK_ID", "USER"}

func TestCLIDoc(t *testing.T) {
	for _, v := range docEnv {
		t.Setenv(v, "") // restored after the test
		os.Unsetenv(v)
	}
	notes := os.DirFS(cliNotesDir)
	got, err := cliDoc(newRoot(), notes)
	if err != nil {
		t.Fatal(err)
	}
	if *updateDocs {
		if err := os.WriteFile(cliDocPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(cliDocPath)
	if err != nil {
		t.Fatalf("%v; run %s", err, cliRegenHint)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/cli.md is not what the commands generate (first difference at line %d: %q); run %s",
			firstDiffLine(got, want), lineAt(got, firstDiffLine(got, want)), cliRegenHint)
	}
}

// TestCLIDocNotes: every notes file belongs to a command that exists, so
// a renamed or removed command's prose does not linger unseen.
func TestCLIDocNotes(t *testing.T) {
	names := map[string]bool{}
	for _, c := range docCommands(newRoot()) {
		names[docName(c)] = true
	}
	ents, err := os.ReadDir(cliNotesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		n := strings.TrimSuffix(e.Name(), ".md")
		if n == "_preface" || n == "_appendix" {
			continue
		}
		if !names[n] {
			t.Errorf("docs/cli/%s: no command %q (the notes of command A B are docs/cli/A-B.md)", e.Name(), strings.ReplaceAll(n, "-", " "))
		}
	}
}

func TestCLIDocCoversFlags(t *testing.T) {
	// The generator prints cobra's help; this guards that the help (and so
	// the doc) names every flag of every command, hidden ones aside.
	for _, c := range docCommands(newRoot()) {
		b, err := commandHelp(c)
		if err != nil {
			t.Fatal(err)
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden {
				return
			}
			if !strings.Contains(b, "--"+f.Name+" ") && !strings.Contains(b, "--"+f.Name+"\n") {
				t.Errorf("%s: flag --%s missing from its help", c.CommandPath(), f.Name)
			}
		})
	}
}

// docCommands is the command tree in order (depth first, as --help lists
// subcommands), without help, hidden or deprecated commands.
func docCommands(root *cobra.Command) []*cobra.Command {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var out []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c != root && !c.IsAvailableCommand() {
			return
		}
		out = append(out, c)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return out
}

// docName is the command's section name: its path without "gpuq".
func docName(c *cobra.Command) string {
	p := strings.Fields(c.CommandPath())[1:]
	if len(p) == 0 {
		return "gpuq"
	}
	return strings.Join(p, "-")
}

func commandHelp(c *cobra.Command) (string, error) {
	var b bytes.Buffer
	c.InitDefaultHelpFlag()
	c.InitDefaultVersionFlag()
	c.SetOut(&b)
	c.SetErr(&b)
	defer c.SetOut(nil)
	defer c.SetErr(nil)
	if err := c.Help(); err != nil {
		return "", err
	}
	return strings.TrimRight(b.String(), "\n"), nil
}

func cliDoc(root *cobra.Command, notes fs.FS) ([]byte, error) {
	var b bytes.Buffer
	read := func(name string) (string, error) {
		s, err := fs.ReadFile(notes, name)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return strings.TrimSpace(string(s)), err
	}
	b.WriteString("# `gpuq` command reference\n\n")
	b.WriteString("<!-- Generated from the cobra commands of cmd/gpuq and the notes in docs/cli/ by `make docs`; do not edit by hand. -->\n\n")
	cmds := docCommands(root)
	b.WriteString("Commands:")
	for i, c := range cmds[1:] {
		sep := " ·"
		if i == len(cmds)-2 {
			sep = ""
		}
		h := docHeading(c)
		fmt.Fprintf(&b, " [%s](#%s)%s", h, anchor(h), sep)
	}
	b.WriteString("\n\n")
	pre, err := read("_preface.md")
	if err != nil {
		return nil, err
	}
	if pre != "" {
		b.WriteString(pre + "\n\n")
	}
	for _, c := range cmds {
		help, err := commandHelp(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.CommandPath(), err)
		}
		fmt.Fprintf(&b, "## %s\n\n```\n%s\n```\n\n", docHeading(c), help)
		n, err := read(docName(c) + ".md")
		if err != nil {
			return nil, err
		}
		if n != "" {
			b.WriteString(n + "\n\n")
		}
	}
	app, err := read("_appendix.md")
	if err != nil {
		return nil, err
	}
	if app != "" {
		b.WriteString(app + "\n")
	}
	return append(bytes.TrimRight(b.Bytes(), "\n"), '\n'), nil
}

// docHeading: "gpuq" for the root, else the path after it ("auth init").
func docHeading(c *cobra.Command) string {
	p := strings.Fields(c.CommandPath())
	if len(p) == 1 {
		return p[0]
	}
	return strings.Join(p[1:], " ")
}

// anchor is GitHub's heading anchor for a plain heading.
func anchor(h string) string {
	return strings.ReplaceAll(strings.ToLower(h), " ", "-")
}

func firstDiffLine(a, b []byte) int {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < len(la) && i < len(lb); i++ {
		if la[i] != lb[i] {
			return i + 1
		}
	}
	n := len(la)
	if len(lb) < n {
		n = len(lb)
	}
	return n + 1
}

func lineAt(b []byte, n int) string {
	l := strings.Split(string(b), "\n")
	if n-1 < len(l) {
		return l[n-1]
	}
	return ""
}
