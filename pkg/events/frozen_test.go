package events_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/events"
)

var (
	update     = flag.Bool("update", false, "write the frozen encodings testdata/v<N>/<type>.json that are missing, from the current encoder (an existing one is never rewritten)")
	updateWire = flag.Bool("update-wire", false, "rewrite testdata/wire.golden (the wire names, subjects and keys) from the current types")
)

// v1Time and v1Causation are the envelope fields of every frozen encoding.
var (
	v1Time      = time.Date(2025, 1, 6, 9, 30, 0, 123456789, time.UTC)
	v1Causation = "0194387a-0000-7000-8000-000000000001"
)

// v1Events is what every file testdata/v1/<type>.json must decode to,
// forever. Never edit a value here: an event that gains a field keeps its v1
// value (the new field decodes as its zero value) and the new field is
// covered by a round-trip case in codec_test.go; a new event type adds an
// entry here and its file (go test -run Frozen -update).
func v1Events() map[events.Type]events.Event {
	return map[events.Type]events.Event{
		events.TypeSubmitted: events.Submitted{
			TaskID: "01JGZ5K3V1", Name: "resnet50-widestem", Team: "vision", Priority: "high",
			GPUs: 4, Hours: 6.5, Hypothesis: "a wider stem improves top-1 by 0.3", Command: "python train.py --stem 96",
			Preemptible: true, PreemptSignal: "SIGUSR1", GraceS: 120, GPUModel: "NVIDIA H100 80GB HBM3",
			MinGPUMemMiB: 40960, IdempotencyKey: "ci-build-4711", SubmittedAt: time.Date(2025, 1, 6, 9, 29, 58, 0, time.UTC),
		},
		events.TypeAmended:          events.Amended{TaskID: "01JGZ5K3V1", GPUs: 2, Priority: "critical", Hours: 3, Hypothesis: "narrower"},
		events.TypeCancelled:        events.Cancelled{TaskID: "01JGZ5K3V1", By: "alice", Reason: "superseded"},
		events.TypeChecklistUpdated: events.ChecklistUpdated{TaskID: "01JGZ5K3V1", Item: "code_review", Done: true},
		events.TypeDispatched: events.Dispatched{
			TaskID: "01JGZ5K3V1",
			Placements: []events.Placement{
				{Node: "gpu-a1", GPUs: []string{"GPU-5d1f0c3e-0", "GPU-5d1f0c3e-1"}},
				{Node: "gpu-a2", GPUs: []string{"GPU-7a2b9e01-0", "GPU-7a2b9e01-1"}},
			},
			BasedOnSeq: 1041, ResumeFrom: "ckpt/01JGZ5K3V1/step-2000", Reason: "fits on 2 nodes", Backfill: true,
		},
		events.TypeStarted:          events.Started{TaskID: "01JGZ5K3V1", Node: "gpu-a1", PID: 31337, LogDir: "/var/lib/gpuq/tasks/01JGZ5K3V1"},
		events.TypePreemptRequested: events.PreemptRequested{TaskID: "01JGZ5K3V1", For: "01JGZ6AAAA", Policy: "priority", Reason: "critical task waits", GraceS: 90, BasedOnSeq: 1050},
		events.TypeCheckpointed:     events.Checkpointed{TaskID: "01JGZ5K3V1", Ref: "ckpt/01JGZ5K3V1/step-2400"},
		events.TypePreempted: events.Preempted{TaskID: "01JGZ5K3V1", Node: "gpu-a1", Checkpoint: "ckpt/01JGZ5K3V1/step-2400",
			Forced: true, LostGPUSeconds: 734.25, ExitCode: -9},
		events.TypeRequeued:         events.Requeued{TaskID: "01JGZ5K3V1", Reason: "preempted for 01JGZ6AAAA", ResumeFrom: "ckpt/01JGZ5K3V1/step-2400"},
		events.TypeCompleted:        events.Completed{TaskID: "01JGZ5K3V1", Node: "gpu-a1"},
		events.TypeFailed:           events.Failed{TaskID: "01JGZ5K3V1", Node: "gpu-a1", ExitCode: 137, Error: "exit code 137", StderrTail: "CUDA out of memory\n"},
		events.TypeProgressReported: events.ProgressReported{TaskID: "01JGZ5K3V1", Node: "gpu-a1", Step: 300, Total: 1200, Fraction: 0.25},
		events.TypeAvailable: events.Available{Node: "gpu-a1", FreeGPUs: 1, BootID: "b7c1", Driver: "550.54.15", GPUs: []events.GPU{
			{UUID: "GPU-5d1f0c3e-0", Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true},
			{UUID: "GPU-5d1f0c3e-1", Index: 1, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: false},
		}},
		events.TypeUnhealthy: events.Unhealthy{Node: "gpu-a1", GPUs: []string{"GPU-5d1f0c3e-1"}, Reason: "Xid 79: GPU has fallen off the bus"},
		events.TypeDrained:   events.Drained{Node: "gpu-a1", Reason: "kernel upgrade"},
		events.TypeUndrained: events.Undrained{Node: "gpu-a1", Reason: "upgraded", By: "ops"},
		events.TypeLost:      events.Lost{Node: "gpu-a1", Reason: "no heartbeat for 60s"},
	}
}

func allTypes() []events.Type {
	return append(append([]events.Type(nil), events.TaskTypes...), events.NodeTypes...)
}

// frozen is what every file testdata/v<N>/<type>.json must decode to,
// forever, by version. A type at version N (events.VersionOf) has a file
// in each of testdata/v1 … testdata/vN: the old ones decode through the
// upcasts, to today's struct. When a type gets a new version, its entry
// for the new version is added here (and its file written with -update);
// the older entries change only by what the new step fills in.
func frozen() map[int]map[events.Type]events.Event {
	return map[int]map[events.Type]events.Event{1: v1Events()}
}

func frozenPath(v int, typ events.Type) string {
	return filepath.Join("testdata", fmt.Sprintf("v%d", v), string(typ)+".json")
}

// writeFrozen writes testdata/v<N>/<type>.json with the current encoder
// (N is the type's current version) unless it exists; the envelope id is
// fixed.
func writeFrozen(t *testing.T, typ events.Type, e events.Event) {
	t.Helper()
	p := frozenPath(events.VersionOf(typ), typ)
	if _, err := os.Stat(p); err == nil {
		return // frozen: never rewritten
	}
	_, data, _, err := events.Encode(e, events.Meta{Time: v1Time, CausationID: v1Causation})
	if err != nil {
		t.Fatalf("Encode(%T): %v", e, err)
	}
	var env events.Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatal(err)
	}
	env.ID = "0194387a-" + string(typ)
	out, err := json.MarshalIndent(env, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", p)
}

// TestFrozenV1 decodes the frozen encodings kept under testdata/v<N>, of
// every version of every type: an old log must stay readable by every
// later build. (Its name is the one docs and habits use; it covers every
// version.)
func TestFrozenV1(t *testing.T) {
	want := frozen()
	if *update {
		for _, typ := range allTypes() {
			if e, ok := want[events.VersionOf(typ)][typ]; ok {
				writeFrozen(t, typ, e)
			}
		}
	}

	// Every wire name has a frozen encoding of each of its versions, and
	// nothing else is there.
	files, err := filepath.Glob(filepath.Join("testdata", "v*", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var gotNames, wantNames []string
	for _, f := range files {
		gotNames = append(gotNames, filepath.Base(filepath.Dir(f))+"/"+strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	for _, typ := range allTypes() {
		for v := 1; v <= events.VersionOf(typ); v++ {
			wantNames = append(wantNames, fmt.Sprintf("v%d/%s", v, typ))
		}
	}
	sort.Strings(gotNames)
	sort.Strings(wantNames)
	if diff := cmp.Diff(wantNames, gotNames); diff != "" {
		t.Errorf("files in testdata/v* (-want +got):\n%s", diff)
	}

	for _, typ := range allTypes() {
		for v := 1; v <= events.VersionOf(typ); v++ {
			t.Run(fmt.Sprintf("v%d/%s", v, typ), func(t *testing.T) {
				e, ok := want[v][typ]
				if !ok {
					t.Fatalf("frozen()[%d] has no %q", v, typ)
				}
				data, err := os.ReadFile(frozenPath(v, typ))
				if err != nil {
					t.Fatalf("%v (run go test -run TestFrozenV1 -update once to write it)", err)
				}
				subj := events.Subject(e)
				rec, err := events.Decode(events.Stored{Seq: 42, Subject: subj, Data: data, Time: v1Time})
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if diff := cmp.Diff(e, rec.Event); diff != "" {
					t.Errorf("decoded event (-want +got):\n%s", diff)
				}
				gotEnv := rec.Envelope
				gotEnv.Data = nil
				wantEnv := events.Envelope{ID: "0194387a-" + string(typ), Type: typ, Version: v, Time: v1Time, CausationID: v1Causation}
				if diff := cmp.Diff(wantEnv, gotEnv); diff != "" {
					t.Errorf("envelope (-want +got):\n%s", diff)
				}
				if rec.Seq != 42 || rec.Subject != subj {
					t.Errorf("record seq, subject = %d, %q; want 42, %q", rec.Seq, rec.Subject, subj)
				}
			})
		}
	}
}
