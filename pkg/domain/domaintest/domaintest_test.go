package domaintest_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestTaskDefaultsAreValid: the default task is a request Validate accepts
// unchanged, so a test only states what it is about.
func TestTaskDefaultsAreValid(t *testing.T) {
	r := dt.Task().GPUs(2).Priority(domain.High).Request()
	want := r
	if err := r.Validate(domain.DefaultLimits); err != nil {
		t.Fatalf("Validate(default task) = %v", err)
	}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("Validate normalised the default task (-want +got):\n%s", diff)
	}
	if r.GPUs != 2 || r.Priority != "high" {
		t.Errorf("GPUs, Priority = %d, %q; want 2, high", r.GPUs, r.Priority)
	}
}

func TestNode(t *testing.T) {
	got := dt.Node("n1").GPUs(2).Unhealthy(1).Model("A100").MemoryMiB(40960).Available()
	want := events.Available{Node: "n1", FreeGPUs: 1, BootID: "boot-1", Driver: "550.54", GPUs: []events.GPU{
		{UUID: "GPU-n1-0", Index: 0, Model: "A100", MemoryMiB: 40960, Healthy: true},
		{UUID: "GPU-n1-1", Index: 1, Model: "A100", MemoryMiB: 40960, Healthy: false},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(events.Placement{Node: "n1", GPUs: []string{"GPU-n1-1", "GPU-n1-0"}}, dt.On("n1", 1, 0)); diff != "" {
		t.Errorf("On (-want +got):\n%s", diff)
	}
}

// TestLog: sequences from 1 without gaps, subjects from the events, times
// a step apart unless set.
func TestLog(t *testing.T) {
	later := dt.Epoch.Add(time.Hour)
	log := dt.NewLog().Append(dt.Node("n1").Available(), dt.Task().Submitted()).
		At(later).Append(events.Cancelled{TaskID: "t1"}).
		AppendOn(dt.NodeSubject("n1", "rebooted"), dt.UnknownNode("n1", "rebooted"))
	type rec struct {
		Seq     uint64
		Subject string
		Type    events.Type
		Time    time.Time
	}
	var got []rec
	for _, r := range log.Records() {
		got = append(got, rec{r.Seq, r.Subject, r.Envelope.Type, r.Envelope.Time})
	}
	want := []rec{
		{1, "gpuq.node.n1.available", "available", dt.Epoch},
		{2, "gpuq.task.t1.submitted", "submitted", dt.Epoch.Add(time.Second)},
		{3, "gpuq.task.t1.cancelled", "cancelled", later},
		{4, "gpuq.node.n1.rebooted", "rebooted", later.Add(time.Second)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if log.LastSeq() != 4 {
		t.Errorf("LastSeq() = %d, want 4", log.LastSeq())
	}
	st := log.Fold()
	if st.Seq != 4 || st.Tasks["t1"].State != domain.Cancelled || st.Skipped != 1 {
		t.Errorf("Fold: Seq %d, t1 %s, Skipped %d; want 4, cancelled, 1", st.Seq, st.Tasks["t1"].State, st.Skipped)
	}
}

// TestRecordDecodes: a built record is what Decode makes of the encoded event.
func TestRecordDecodes(t *testing.T) {
	e := dt.Dispatch("t1", dt.On("n1", 0, 1))
	subj, data, _, err := events.Encode(e, events.Meta{Time: dt.Epoch})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := events.Decode(events.Stored{Seq: 7, Subject: subj, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	got := dt.Record(7, dt.Epoch, e)
	got.Envelope.ID, dec.Envelope.ID = "", ""
	if diff := cmp.Diff(dec, got); diff != "" {
		t.Errorf("(-decoded +built):\n%s", diff)
	}
}
