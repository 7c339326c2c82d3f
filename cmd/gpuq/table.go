package main

import (
	"bytes"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/width"
)

// table is text/tabwriter for the columns of a terminal: cells end with a
// tab, lines with a newline, and a cell is padded to its column's width
// plus two spaces — where a column is, as tabwriter has it, a run of
// adjacent lines that have a cell at that place. Unlike tabwriter, which
// counts runes, a cell's width is what a terminal gives it: two columns
// for a wide or fullwidth character (CJK, fullwidth forms), none for a
// combining mark or a zero-width character. The text after a line's last
// tab is not a cell and is written as it is. Write collects; Flush lays
// out and writes.
type table struct {
	out   io.Writer
	right bool // align cells to the right (tabwriter.AlignRight)
	buf   bytes.Buffer
}

const tablePadding = 2

func newTable(out io.Writer) *table { return &table{out: out} }

func (t *table) Write(p []byte) (int, error) { return t.buf.Write(p) }

// Flush writes what was written since the last Flush, laid out.
func (t *table) Flush() error {
	text := t.buf.String()
	t.buf.Reset()
	if text == "" {
		return nil
	}
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	cells := make([][]string, len(lines)) // the cells of each line (tab-terminated)
	rest := make([]string, len(lines))    // what follows the last tab
	for i, l := range lines {
		parts := strings.Split(l, "\t")
		cells[i], rest[i] = parts[:len(parts)-1], parts[len(parts)-1]
	}
	// widths[i][j]: the width of column j at line i, the widest cell of
	// the run of adjacent lines with a cell j around line i.
	widths := make([][]int, len(lines))
	for i := range lines {
		widths[i] = make([]int, len(cells[i]))
	}
	for j := 0; ; j++ {
		any := false
		for i := 0; i < len(lines); {
			if len(cells[i]) <= j {
				i++
				continue
			}
			any = true
			end, w := i, 0
			for ; end < len(lines) && len(cells[end]) > j; end++ {
				w = max(w, displayWidth(cells[end][j]))
			}
			for k := i; k < end; k++ {
				widths[k][j] = w + tablePadding
			}
			i = end
		}
		if !any {
			break
		}
	}
	var b strings.Builder
	for i := range lines {
		for j, c := range cells[i] {
			pad := strings.Repeat(" ", widths[i][j]-displayWidth(c))
			if t.right {
				b.WriteString(pad + c)
			} else {
				b.WriteString(c + pad)
			}
		}
		b.WriteString(rest[i])
	}
	_, err := io.WriteString(t.out, b.String())
	return err
}

// displayWidth is how many terminal columns s takes: East Asian wide and
// fullwidth characters two (golang.org/x/text/width, Unicode's UAX #11),
// combining marks, format characters (zero-width space and joiners, bidi
// controls) and other controls none, every other character one
// (ambiguous-width ones included, as terminals outside East Asian locales
// show them).
func displayWidth(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		n += runeWidth(r)
	}
	return n
}

func runeWidth(r rune) int {
	switch {
	case r == utf8.RuneError:
		return 1
	case unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Cc):
		return 0
	case r >= 0x1160 && r <= 0x11FF:
		return 0 // Hangul jamo vowels and final consonants: part of the syllable before
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}
