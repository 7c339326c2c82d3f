package trace

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const podsHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"

func TestReadAlibabaOpenB(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Job
		wantRep Report
	}{
		{
			name: "good rows",
			in: podsHeader +
				"openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0\n" +
				"openb-pod-0001,6000,12288,1,460,V100M16,BE,Failed,427061,427100,427063\n" +
				"openb-pod-0002,6000,12288,8,1000,,Guaranteed,Succeeded,500000,500600,500000\n",
			want: []Job{
				{ID: "openb-pod-0000", Submit: 0, Duration: 12537496 * time.Second, GPUs: 1,
					Status: "Running", GPUMilli: 1000, QoS: "LS"},
				{ID: "openb-pod-0001", Submit: 427061 * time.Second, Duration: 37 * time.Second, GPUs: 1,
					Status: "Failed", GPUModel: "V100M16", GPUMilli: 460, Wait: 2 * time.Second, QoS: "BE"},
				{ID: "openb-pod-0002", Submit: 500000 * time.Second, Duration: 600 * time.Second, GPUs: 8,
					Status: "Succeeded", GPUMilli: 1000, QoS: "Guaranteed"},
			},
			wantRep: Report{Rows: 3, Kept: 3},
		},
		{
			name: "same creation time sorts by name",
			in: podsHeader +
				"b,0,0,1,1000,,LS,Running,5,9,5\n" +
				"a,0,0,1,1000,,LS,Running,5,9,6\n",
			want: []Job{
				{ID: "a", Submit: 5 * time.Second, Duration: 3 * time.Second, GPUs: 1, Status: "Running",
					GPUMilli: 1000, Wait: time.Second, QoS: "LS"},
				{ID: "b", Submit: 5 * time.Second, Duration: 4 * time.Second, GPUs: 1, Status: "Running",
					GPUMilli: 1000, QoS: "LS"},
			},
			wantRep: Report{Rows: 2, Kept: 2},
		},
		{
			name:    "CPU-only pod dropped",
			in:      podsHeader + "p,4000,8192,0,0,,BE,Running,10,20,10\n",
			wantRep: Report{Rows: 1, Dropped: map[DropReason]int{DropZeroGPUs: 1}},
		},
		{
			name:    "pending pod (no scheduled_time) dropped",
			in:      podsHeader + "p,4000,8192,1,1000,,BE,Pending,10,20,\n",
			wantRep: Report{Rows: 1, Dropped: map[DropReason]int{DropNotStarted: 1}},
		},
		{
			name:    "no deletion_time dropped",
			in:      podsHeader + "p,4000,8192,1,1000,,BE,Running,10,,12\n",
			wantRep: Report{Rows: 1, Dropped: map[DropReason]int{DropNotEnded: 1}},
		},
		{
			name:    "scheduled before creation dropped",
			in:      podsHeader + "p,4000,8192,1,1000,,BE,Running,10,20,9\n",
			wantRep: Report{Rows: 1, Dropped: map[DropReason]int{DropNegativeWait: 1}},
		},
		{
			name:    "deleted before scheduled dropped",
			in:      podsHeader + "p,4000,8192,1,1000,,BE,Running,10,11,12\n",
			wantRep: Report{Rows: 1, Dropped: map[DropReason]int{DropNegativeDuration: 1}},
		},
		{
			name:    "CPU-only pending pod counts as zero GPUs",
			in:      podsHeader + "p,4000,8192,0,0,,BE,Pending,10,20,\n",
			wantRep: Report{Rows: 1, Dropped: map[DropReason]int{DropZeroGPUs: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, rep, err := ReadAlibabaOpenBReport(strings.NewReader(tt.in))
			if err != nil {
				t.Fatalf("ReadAlibabaOpenBReport: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("jobs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantRep, rep); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
			for _, j := range got {
				if !j.SubmitTime.IsZero() {
					t.Errorf("%s: SubmitTime %v, want zero (openb times are relative)", j.ID, j.SubmitTime)
				}
			}
		})
	}
}

func TestReadAlibabaOpenBMalformed(t *testing.T) {
	tests := []errCase{
		{name: "missing column", in: "name,num_gpu\n", line: 1, contains: `lacks column "gpu_milli"`},
		{name: "empty name", in: podsHeader + ",0,0,1,1000,,LS,Running,0,1,0\n", line: 2, column: 1, field: "name", contains: "empty"},
		{name: "duplicate name", in: podsHeader + "p,0,0,1,1000,,LS,Running,0,1,0\np,0,0,1,1000,,LS,Running,0,1,0\n",
			line: 3, column: 1, field: "name", contains: "already on line 2"},
		{name: "bad num_gpu", in: podsHeader + "p,0,0,one,1000,,LS,Running,0,1,0\n", line: 2, column: 4, field: "num_gpu", contains: `"one"`},
		{name: "gpu_milli over 1000", in: podsHeader + "p,0,0,1,1500,,LS,Running,0,1,0\n", line: 2, column: 5, field: "gpu_milli", contains: "over 1000"},
		{name: "empty creation_time", in: podsHeader + "p,0,0,1,1000,,LS,Running,,1,0\n", line: 2, column: 9, field: "creation_time", contains: "empty"},
		{name: "fractional scheduled_time", in: podsHeader + "p,0,0,1,1000,,LS,Running,0,1,0.5\n", line: 2, column: 11, field: "scheduled_time",
			contains: "whole number"},
		{name: "bad deletion_time", in: podsHeader + "p,0,0,1,1000,,LS,Running,0,x,0\n", line: 2, column: 10, field: "deletion_time", contains: `"x"`},
		{name: "too many fields", in: podsHeader + "p,0,0,1,1000,,LS,Running,0,1,0,extra\n", line: 2, contains: "got 12 fields, header has 11"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadAlibabaOpenB(strings.NewReader(tt.in))
			checkParseError(t, err, tt)
		})
	}
}

func TestReadAlibabaNodes(t *testing.T) {
	in := "sn,cpu_milli,memory_mib,gpu,model\n" +
		"openb-node-0001,96000,393216,8,G2\n" +
		"openb-node-0000,64000,262144,2,P100\n"
	got, err := ReadAlibabaNodes(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Node{
		{Name: "openb-node-0000", GPUs: 2, Model: "P100", CPUMilli: 64000, MemoryMiB: 262144},
		{Name: "openb-node-0001", GPUs: 8, Model: "G2", CPUMilli: 96000, MemoryMiB: 393216},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	errs := []errCase{
		{name: "duplicate node", in: "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,1,T4\nn,1,1,1,T4\n", line: 3, column: 1, field: "sn", contains: "already"},
		{name: "negative gpu", in: "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,-2,T4\n", line: 2, column: 4, field: "gpu", contains: "negative"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadAlibabaNodes(strings.NewReader(tt.in))
			checkParseError(t, err, tt)
		})
	}
}
