package trace

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const phillyHeader = "submit_time,duration_s,num_gpus,vc\n"

func utc(s string) time.Time {
	t, err := time.ParseInLocation(phillyTimeLayout, s, time.UTC)
	if err != nil {
		panic(err)
	}
	return t
}

func TestReadPhilly(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Job
		wantRep Report
	}{
		{
			name: "good rows",
			in: phillyHeader +
				"2017-10-01 00:00:45,30.0,1,6214e9\n" +
				"2017-10-01 00:01:55,61.5,8,11cb48\n",
			want: []Job{
				{ID: "philly-0000001", VC: "6214e9", Submit: 0, SubmitTime: utc("2017-10-01 00:00:45"),
					Duration: 30 * time.Second, GPUs: 1, GPUMilli: 1000},
				{ID: "philly-0000002", VC: "11cb48", Submit: 70 * time.Second, SubmitTime: utc("2017-10-01 00:01:55"),
					Duration: 61500 * time.Millisecond, GPUs: 8, GPUMilli: 1000},
			},
			wantRep: Report{Rows: 2, Kept: 2},
		},
		{
			name: "unsorted input sorts by submit then ID, offset from earliest",
			in: phillyHeader +
				"2017-10-01 00:10:00,5,2,a\n" +
				"2017-10-01 00:00:00,7,1,b\n" +
				"2017-10-01 00:10:00,9,4,c\n",
			want: []Job{
				{ID: "philly-0000002", VC: "b", Submit: 0, SubmitTime: utc("2017-10-01 00:00:00"),
					Duration: 7 * time.Second, GPUs: 1, GPUMilli: 1000},
				{ID: "philly-0000001", VC: "a", Submit: 10 * time.Minute, SubmitTime: utc("2017-10-01 00:10:00"),
					Duration: 5 * time.Second, GPUs: 2, GPUMilli: 1000},
				{ID: "philly-0000003", VC: "c", Submit: 10 * time.Minute, SubmitTime: utc("2017-10-01 00:10:00"),
					Duration: 9 * time.Second, GPUs: 4, GPUMilli: 1000},
			},
			wantRep: Report{Rows: 3, Kept: 3},
		},
		{
			name: "columns in any order, extra columns, BOM, spaces",
			in: "\ufeffvc,num_gpus,extra,submit_time,duration_s\n" +
				"x, 2 ,whatever,2017-10-02 00:00:00, 10.0 \n",
			want: []Job{
				{ID: "philly-0000001", VC: "x", Submit: 0, SubmitTime: utc("2017-10-02 00:00:00"),
					Duration: 10 * time.Second, GPUs: 2, GPUMilli: 1000},
			},
			wantRep: Report{Rows: 1, Kept: 1},
		},
		{
			name: "zero duration is kept",
			in:   phillyHeader + "2017-10-01 00:00:00,0,1,a\n",
			want: []Job{
				{ID: "philly-0000001", VC: "a", SubmitTime: utc("2017-10-01 00:00:00"), GPUs: 1, GPUMilli: 1000},
			},
			wantRep: Report{Rows: 1, Kept: 1},
		},
		{
			name: "zero GPUs dropped",
			in: phillyHeader +
				"2017-10-01 00:00:00,10,0,a\n" +
				"2017-10-01 00:00:05,10,1,a\n",
			want: []Job{
				{ID: "philly-0000002", VC: "a", Submit: 0, SubmitTime: utc("2017-10-01 00:00:05"),
					Duration: 10 * time.Second, GPUs: 1, GPUMilli: 1000},
			},
			wantRep: Report{Rows: 2, Kept: 1, Dropped: map[DropReason]int{DropZeroGPUs: 1}},
		},
		{
			name: "missing duration (never started) dropped",
			in: phillyHeader +
				"2017-10-01 00:00:00,,1,a\n" +
				"2017-10-01 00:00:05,10,1,a\n",
			want: []Job{
				{ID: "philly-0000002", VC: "a", Submit: 0, SubmitTime: utc("2017-10-01 00:00:05"),
					Duration: 10 * time.Second, GPUs: 1, GPUMilli: 1000},
			},
			wantRep: Report{Rows: 2, Kept: 1, Dropped: map[DropReason]int{DropNotStarted: 1}},
		},
		{
			name: "negative duration dropped",
			in: phillyHeader +
				"2017-10-01 00:00:00,-3.0,1,a\n" +
				"2017-10-01 00:00:05,10,1,a\n",
			want: []Job{
				{ID: "philly-0000002", VC: "a", Submit: 0, SubmitTime: utc("2017-10-01 00:00:05"),
					Duration: 10 * time.Second, GPUs: 1, GPUMilli: 1000},
			},
			wantRep: Report{Rows: 2, Kept: 1, Dropped: map[DropReason]int{DropNegativeDuration: 1}},
		},
		{
			name:    "zero GPUs wins over missing duration",
			in:      phillyHeader + "2017-10-01 00:00:00,,0,a\n",
			want:    nil,
			wantRep: Report{Rows: 1, Kept: 0, Dropped: map[DropReason]int{DropZeroGPUs: 1}},
		},
		{
			name:    "header only",
			in:      phillyHeader,
			want:    nil,
			wantRep: Report{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, rep, err := ReadPhillyReport(strings.NewReader(tt.in))
			if err != nil {
				t.Fatalf("ReadPhillyReport: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("jobs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantRep, rep); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
			if rep.Kept+rep.DroppedTotal() != rep.Rows {
				t.Errorf("kept %d + dropped %d != rows %d", rep.Kept, rep.DroppedTotal(), rep.Rows)
			}
		})
	}
}

// errCase is a malformed input and where the error must point.
type errCase struct {
	name     string
	in       string
	line     int
	column   int
	field    string
	contains string
}

func checkParseError(t *testing.T, err error, tt errCase) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *ParseError", err, err)
	}
	if pe.Line != tt.line || pe.Column != tt.column || pe.Field != tt.field {
		t.Errorf("error at line %d column %d field %q, want line %d column %d field %q (%v)",
			pe.Line, pe.Column, pe.Field, tt.line, tt.column, tt.field, err)
	}
	if !strings.Contains(err.Error(), tt.contains) {
		t.Errorf("error %q does not contain %q", err, tt.contains)
	}
}

func TestReadPhillyMalformed(t *testing.T) {
	ok := "2017-10-01 00:00:00,10,1,a\n"
	tests := []errCase{
		{name: "empty input", in: "", line: 1, contains: "no header"},
		{name: "missing column", in: "submit_time,duration_s,vc\n" + ok, line: 1, contains: `lacks column "num_gpus"`},
		{name: "duplicate column", in: "submit_time,duration_s,num_gpus,vc,vc\n", line: 1, column: 5, field: "vc", contains: "duplicate"},
		{name: "bad submit time", in: phillyHeader + ok + "2017/10/01 00:00:00,10,1,a\n", line: 3, column: 1, field: "submit_time",
			contains: "line 3, column 1 (submit_time)"},
		{name: "empty submit time", in: phillyHeader + ",10,1,a\n", line: 2, column: 1, field: "submit_time", contains: "empty"},
		{name: "non-numeric duration", in: phillyHeader + "2017-10-01 00:00:00,ten,1,a\n", line: 2, column: 2, field: "duration_s",
			contains: `"ten"`},
		{name: "NaN duration", in: phillyHeader + "2017-10-01 00:00:00,NaN,1,a\n", line: 2, column: 2, field: "duration_s", contains: "NaN"},
		{name: "huge duration", in: phillyHeader + "2017-10-01 00:00:00,1e300,1,a\n", line: 2, column: 2, field: "duration_s", contains: "out of range"},
		{name: "fractional GPUs", in: phillyHeader + "2017-10-01 00:00:00,10,1.5,a\n", line: 2, column: 3, field: "num_gpus", contains: "not an integer"},
		{name: "negative GPUs", in: phillyHeader + "2017-10-01 00:00:00,10,-1,a\n", line: 2, column: 3, field: "num_gpus", contains: "negative"},
		{name: "empty vc", in: phillyHeader + "2017-10-01 00:00:00,10,1,\n", line: 2, column: 4, field: "vc", contains: "empty"},
		{name: "too few fields", in: phillyHeader + ok + "2017-10-01 00:00:00,10,1\n", line: 3, contains: "got 3 fields, header has 4"},
		{name: "bare quote", in: phillyHeader + "2017-10-01 00:00:00,1\"0,1,a\n", line: 2, column: 22, contains: "bare"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadPhilly(strings.NewReader(tt.in))
			checkParseError(t, err, tt)
		})
	}
}

func TestReadPhillyVCs(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string]int
	}{
		{name: "with gpus_per_node", in: "vc,nodes,gpus_per_node\na,64,8\nb,8,8\n", want: map[string]int{"a": 64, "b": 8}},
		{name: "without gpus_per_node", in: "vc,nodes\na,2\n", want: map[string]int{"a": 2}},
		{name: "empty table", in: "vc,nodes\n", want: map[string]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadPhillyVCs(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	errs := []errCase{
		{name: "duplicate VC", in: "vc,nodes\na,1\na,2\n", line: 3, column: 1, field: "vc", contains: "twice"},
		{name: "bad nodes", in: "vc,nodes\na,x\n", line: 2, column: 2, field: "nodes", contains: "not an integer"},
		{name: "zero gpus_per_node", in: "vc,nodes,gpus_per_node\na,1,0\n", line: 2, column: 3, field: "gpus_per_node", contains: "positive"},
		{name: "missing nodes column", in: "vc,node num\na,1\n", line: 1, contains: `lacks column "nodes"`},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadPhillyVCs(strings.NewReader(tt.in))
			checkParseError(t, err, tt)
		})
	}
}
