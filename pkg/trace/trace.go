package trace

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Job is one job (Philly) or pod (Alibaba openb) of a trace.
type Job struct {
	// ID is unique within a trace: the pod name (openb) or
	// "philly-NNNNNNN", the 1-based data-row number (Philly has no job id).
	ID string
	// VC is the team / virtual cluster (Philly); empty for openb.
	VC string
	// Submit is the offset from the trace start: from the earliest kept
	// job's submit time (Philly) or the trace's own origin (openb).
	Submit time.Duration
	// SubmitTime is the wall-clock submit time (UTC) where the trace has
	// one (Philly); the zero time.Time for openb, whose times are relative.
	SubmitTime time.Time
	// Duration is the real run time (start to end).
	Duration time.Duration
	// GPUs is the number of GPUs requested, always > 0 after reading.
	GPUs int
	// Status is the trace's final state (openb pod_phase); empty for
	// Philly, whose published file has none.
	Status string
	// GPUModel is the requested GPU model (openb gpu_spec), if any.
	GPUModel string

	// GPUMilli is the share of each GPU in thousandths (openb gpu_milli:
	// 1000 = whole GPUs, 460 = 0.46 of one GPU); 1000 for Philly.
	GPUMilli int
	// Wait is the real scheduling delay recorded in the trace
	// (openb scheduled − creation); 0 for Philly, which does not record it.
	Wait time.Duration
	// QoS is the openb qos class (LS, BE, Burstable, Guaranteed); empty
	// for Philly.
	QoS string

	// Class, Estimate and NotPreemptible are what a gpuq log records and
	// the published traces lack (an export of the live log, read by
	// sim.ReadExport): the task's class ("critical" … "low"; "" when the
	// trace has none), the user's run-time estimate (0: none) and whether
	// the task was submitted not preemptible.
	Class          string
	Estimate       time.Duration
	NotPreemptible bool
}

// DropReason says why a well-formed row was left out of a trace.
type DropReason string

// Reasons a row is dropped; see the package comment for the order in
// which they are tested.
const (
	DropZeroGPUs         DropReason = "zero GPUs"
	DropNotStarted       DropReason = "never started"
	DropNotEnded         DropReason = "never ended"
	DropNegativeWait     DropReason = "started before submitted"
	DropNegativeDuration DropReason = "negative duration"
)

// Report counts what a reader did with the rows of a trace.
type Report struct {
	Rows    int // data rows read, header excluded
	Kept    int // rows returned as jobs
	Dropped map[DropReason]int
}

func (r *Report) drop(why DropReason) {
	if r.Dropped == nil {
		r.Dropped = map[DropReason]int{}
	}
	r.Dropped[why]++
}

// ParseError is malformed input: which line of the CSV file (1-based,
// header = line 1) and which column.
type ParseError struct {
	Format string // "philly", "alibaba-openb", "philly-vcs", "alibaba-nodes"
	Line   int
	// Column is the 1-based field number when Field is set; for a CSV
	// syntax error it is the 1-based position encoding/csv reports.
	Column int
	Field  string // column name from the header, if the error is in a field
	Err    error
}

func (e *ParseError) Error() string {
	switch {
	case e.Field != "":
		return fmt.Sprintf("trace: %s line %d, column %d (%s): %v", e.Format, e.Line, e.Column, e.Field, e.Err)
	case e.Column > 0:
		return fmt.Sprintf("trace: %s line %d, column %d: %v", e.Format, e.Line, e.Column, e.Err)
	default:
		return fmt.Sprintf("trace: %s line %d: %v", e.Format, e.Line, e.Err)
	}
}

func (e *ParseError) Unwrap() error { return e.Err }

// Formats accepted by Load.
const (
	FormatPhilly       = "philly"
	FormatAlibabaOpenB = "alibaba-openb"
)

// Formats lists the format names Load accepts.
func Formats() []string { return []string{FormatPhilly, FormatAlibabaOpenB} }

// Load reads the trace file at path in the given format ("philly" or
// "alibaba-openb").
func Load(path, format string) ([]Job, error) {
	jobs, _, err := LoadReport(path, format)
	return jobs, err
}

// LoadReport is Load that also returns what was kept and dropped.
func LoadReport(path, format string) ([]Job, Report, error) {
	var read func(io.Reader) ([]Job, Report, error)
	switch format {
	case FormatPhilly:
		read = ReadPhillyReport
	case FormatAlibabaOpenB:
		read = ReadAlibabaOpenBReport
	default:
		return nil, Report{}, fmt.Errorf("trace: unknown format %q (want %q or %q)", format, FormatPhilly, FormatAlibabaOpenB)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, Report{}, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	jobs, rep, err := read(f)
	if err != nil {
		return nil, rep, fmt.Errorf("%s: %w", path, err)
	}
	return jobs, rep, nil
}

// sortJobs orders jobs by Submit, then ID.
func sortJobs(jobs []Job) {
	slices.SortFunc(jobs, func(a, b Job) int {
		if c := cmp.Compare(a.Submit, b.Submit); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// table reads a CSV file with a header row, by column name.
type table struct {
	format string
	r      *csv.Reader
	cols   map[string]int
	header []string
	rec    []string
}

func newTable(format string, rd io.Reader, required ...string) (*table, error) {
	r := csv.NewReader(rd)
	r.ReuseRecord = true
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, &ParseError{Format: format, Line: 1, Err: errors.New("empty input: no header row")}
	}
	if err != nil {
		return nil, csvError(format, err)
	}
	header = slices.Clone(header)
	t := &table{format: format, r: r, cols: map[string]int{}, header: header}
	for i, h := range header {
		h = strings.TrimSpace(h)
		if i == 0 {
			h = strings.TrimPrefix(h, "\ufeff")
		}
		header[i] = h
		if _, dup := t.cols[h]; dup {
			return nil, &ParseError{Format: format, Line: 1, Column: i + 1, Field: h, Err: errors.New("duplicate column in header")}
		}
		t.cols[h] = i
	}
	for _, name := range required {
		if _, ok := t.cols[name]; !ok {
			return nil, &ParseError{Format: format, Line: 1, Err: fmt.Errorf("header lacks column %q (want %s; have %s)",
				name, strings.Join(required, ","), strings.Join(header, ","))}
		}
	}
	return t, nil
}

// next reads the next record; false at the end of input.
func (t *table) next() (bool, error) {
	rec, err := t.r.Read()
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
			return false, &ParseError{Format: t.format, Line: pe.Line,
				Err: fmt.Errorf("got %d fields, header has %d", len(rec), len(t.header))}
		}
		return false, csvError(t.format, err)
	}
	t.rec = rec
	return true, nil
}

func csvError(format string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &ParseError{Format: format, Line: pe.Line, Column: pe.Column, Err: pe.Err}
	}
	return fmt.Errorf("trace: %s: %w", format, err)
}

// line is the line the current record starts on.
func (t *table) line() int {
	l, _ := t.r.FieldPos(0)
	return l
}

// str is the trimmed value of a column of the current record.
func (t *table) str(name string) string { return strings.TrimSpace(t.rec[t.cols[name]]) }

// errf is a ParseError in the named column of the current record.
func (t *table) errf(name, format string, args ...any) error {
	i := t.cols[name]
	l, _ := t.r.FieldPos(i)
	return &ParseError{Format: t.format, Line: l, Column: i + 1, Field: name, Err: fmt.Errorf(format, args...)}
}

// required is the non-empty value of a column, or an error.
func (t *table) required(name string) (string, error) {
	s := t.str(name)
	if s == "" {
		return "", t.errf(name, "empty value")
	}
	return s, nil
}

// count parses a non-negative integer column that must be present.
func (t *table) count(name string) (int, error) {
	s, err := t.required(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, t.errf(name, "not an integer: %q", s)
	}
	if n < 0 {
		return 0, t.errf(name, "negative: %d", n)
	}
	return n, nil
}

// maxSeconds bounds times and durations so they fit a time.Duration.
const maxSeconds = 100 * 366 * 24 * 3600

// seconds parses a (possibly fractional) number of seconds.
func (t *table) seconds(name, s string) (time.Duration, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, t.errf(name, "not a number of seconds: %q", s)
	}
	if math.Abs(f) > maxSeconds {
		return 0, t.errf(name, "out of range: %q seconds", s)
	}
	return time.Duration(math.Round(f * float64(time.Second))), nil
}

// intSeconds parses a whole number of seconds.
func (t *table) intSeconds(name, s string) (time.Duration, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, t.errf(name, "not a whole number of seconds: %q", s)
	}
	if n > maxSeconds || n < -maxSeconds {
		return 0, t.errf(name, "out of range: %q seconds", s)
	}
	return time.Duration(n) * time.Second, nil
}

// readJobs reads a job table of format with the required columns: row
// makes data row n (from 1) a Job, or says why it is dropped; its error
// stops the read. The jobs are in file order; the report counts them.
func readJobs(format string, r io.Reader, required []string, row func(t *table, n int) (Job, DropReason, error)) ([]Job, Report, error) {
	var rep Report
	t, err := newTable(format, r, required...)
	if err != nil {
		return nil, rep, err
	}
	var jobs []Job
	err = t.each(func() error {
		rep.Rows++
		j, why, err := row(t, rep.Rows)
		switch {
		case err != nil:
			return err
		case why != "":
			rep.drop(why)
		default:
			jobs = append(jobs, j)
		}
		return nil
	})
	if err != nil {
		return nil, rep, err
	}
	rep.Kept = len(jobs)
	return jobs, rep, nil
}

// each calls row for every data row, in order; an error stops the read.
func (t *table) each(row func() error) error {
	for {
		ok, err := t.next()
		if err != nil || !ok {
			return err
		}
		if err := row(); err != nil {
			return err
		}
	}
}
