package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/api"
)

// TestDisplayWidth: a character takes the columns a terminal gives it.
func TestDisplayWidth(t *testing.T) {
	for name, tc := range map[string]struct {
		s    string
		want int
	}{
		"ascii":                  {"rerun-seed2", 11},
		"CJK ideographs":         {"学習率", 6},
		"kana":                   {"ビジョン", 8},
		"hangul syllables":       {"한국어", 6},
		"hangul jamo":            {"\u1100\u1161\u11a8", 2}, // 각 decomposed: wide leading consonant, vowel and final take none
		"fullwidth latin":        {"ＡＢＣ", 6},
		"halfwidth katakana":     {"ｶﾀｶﾅ", 4},
		"a combining accent":     {"e\u0301te\u0301", 3},
		"zero-width characters":  {"a\u200bb\u200dc\ufeff", 3},
		"a bidi control":         {"a\u202eb", 2},
		"an emoji":               {"run 🚀", 6},
		"ambiguous width is one": {"±×°", 3},
		"invalid UTF-8":          {"a\xffb", 3},
		"empty":                  {"", 0},
	} {
		t.Run(name, func(t *testing.T) {
			if got := displayWidth(tc.s); got != tc.want {
				t.Errorf("displayWidth(%q) = %d, want %d", tc.s, got, tc.want)
			}
		})
	}
}

// TestTableAsTabwriter: on text of one-column characters the table lays
// out exactly as text/tabwriter does (what every table used before),
// ragged lines and text after the last tab included.
func TestTableAsTabwriter(t *testing.T) {
	for name, tc := range map[string]struct {
		text  string
		right bool
	}{
		"a queue":           {text: "TASK\tNAME\tSTATE\n01a2\trerun-seed2\trunning\n01b3\tlr\tqueued\n"},
		"text after a tab":  {text: "task:\t01a2\nhypothesis:\tlr 3e-4 beats 1e-4\n  node-1\tGPU-1,GPU-2\n"},
		"ragged lines":      {text: "NODE\tSTATE\tGPUS\n  0 GPU-a\tA100\t80 GiB\thealthy\t-\t\nnode-2\tready\n  1 GPU-bb\tH100\t\n"},
		"empty cells":       {text: "a\t\tc\n\t\t\n\tb\t\n"},
		"aligned right":     {text: "policy\tavg\tp95\t\ngpuq\t12\t1234\t\nfifo\t3\t5\t\n", right: true},
		"no final newline":  {text: "a\tb\nccc\td"},
		"a block in blocks": {text: "x\ty\tz\nxx\n\tyyyy\tz\nx\ty\tzz\n"},
	} {
		t.Run(name, func(t *testing.T) {
			var want, got bytes.Buffer
			flags := uint(0)
			if tc.right {
				flags = tabwriter.AlignRight
			}
			tw := tabwriter.NewWriter(&want, 0, 4, 2, ' ', flags)
			fmt.Fprint(tw, tc.text)
			tw.Flush()
			tb := newTable(&got)
			tb.right = tc.right
			fmt.Fprint(tb, tc.text)
			if err := tb.Flush(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want.String(), got.String()); diff != "" {
				t.Errorf("(-tabwriter +table):\n%s", diff)
			}
		})
	}
}

// columnsAt is the display column at which each of words begins on line
// (-1 when it is not there).
func columnsAt(line string, words ...string) []int {
	var out []int
	for _, w := range words {
		i := strings.Index(line, w)
		if i < 0 {
			out = append(out, -1)
			continue
		}
		out = append(out, displayWidth(line[:i]))
	}
	return out
}

// TestWideCharactersAlign: the columns of queue, show and node list line
// up on a terminal when names hold wide (CJK) characters, where
// tabwriter, counting runes, shifted every column after such a name.
func TestWideCharactersAlign(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 22, 0, 0, 0, time.UTC)
	task := func(id, name, team, prio, state string) api.TaskView {
		return api.TaskView{TaskID: id, Name: name, Team: team, Priority: prio, GPUs: 1, State: state, SubmittedAt: t0}
	}
	for name, tc := range map[string]struct {
		print func(*bytes.Buffer)
		lines []string // a word of each line to compare
		words []string // the cells after the wide ones, on each of lines
	}{
		"queue: CJK names and teams": {
			print: func(b *bytes.Buffer) {
				_ = printQueue(b, []api.TaskView{
					task("t-ascii", "rerun-seed2", "vision", "low", "running"),
					task("t-cjk", "学習率スイープ", "ビジョン", "high", "queued"),
					task("t-fullwidth", "ＢＥＲＴ", "한국어팀", "medium", "queued"),
				}, "", timeFmt{utc: true}, t0)
			},
			lines: []string{"TASK", "t-ascii", "t-cjk", "t-fullwidth"},
			words: []string{"PRIORITY|low|high|medium", "STATE|running|queued|queued"},
		},
		"queue: a combining accent and a zero-width joiner": {
			print: func(b *bytes.Buffer) {
				_ = printQueue(b, []api.TaskView{
					task("t-1", "café\u0301-run", "re\u200dsearch", "low", "queued"),
					task("t-2", "plain-runs", "vision", "high", "queued"),
				}, "", timeFmt{utc: true}, t0)
			},
			lines: []string{"t-1", "t-2"},
			words: []string{"low|high", "queued|queued"},
		},
		"show: placements on a node with a CJK name": {
			print: func(b *bytes.Buffer) {
				v := task("t-1", "学習", "vision", "low", "running")
				v.Node = "ノード1"
				v.Placements = []api.PlacementView{{Node: "ノード1", GPUs: []string{"GPU-a"}}, {Node: "n2", GPUs: []string{"GPU-b"}}}
				printTask(b, v, timeFmt{utc: true}, t0)
			},
			lines: []string{"  ノード1:", "  n2:", "task:"},
			words: []string{"GPU-a|GPU-b|t-1"},
		},
		"node list: a CJK node name": {
			print: func(b *bytes.Buffer) {
				printNodes(b, []api.NodeView{{Node: "計算ノード", State: "ready"}, {Node: "node-2", State: "drained"}}, t0)
			},
			lines: []string{"NODE", "計算ノード", "node-2"},
			words: []string{"STATE|ready|drained"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			tc.print(&b)
			all := strings.Split(b.String(), "\n")
			for _, col := range tc.words {
				ws := strings.Split(col, "|")
				var at []int
				for i, key := range tc.lines {
					line := ""
					for _, l := range all {
						if strings.HasPrefix(l, key) {
							line = l
							break
						}
					}
					w := ws[min(i, len(ws)-1)]
					at = append(at, columnsAt(line, w)[0])
				}
				for i := range at {
					if at[i] < 0 || at[i] != at[0] {
						t.Errorf("%s starts at display columns %v on lines %v, want one column:\n%s", col, at, tc.lines, b.String())
						break
					}
				}
			}
		})
	}
}
