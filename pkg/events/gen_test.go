package events_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/gpuq/gpuq/pkg/events/internal/fastgen"
)

// TestFastDecodeGenCurrent: fastdecode_gen.go is what internal/fastgen
// writes from types.go as it is now, so a field added to an event is
// decoded by the fast path once the file is generated again.
func TestFastDecodeGenCurrent(t *testing.T) {
	src, err := os.ReadFile("types.go")
	if err != nil {
		t.Fatal(err)
	}
	want, err := fastgen.Generate("types.go", src)
	if err != nil {
		t.Fatalf("generating from types.go: %v", err)
	}
	got, err := os.ReadFile("fastdecode_gen.go")
	if err != nil {
		t.Fatalf("%v: run `go generate ./pkg/events`", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	line := 0
	for line < len(gl) && line < len(wl) && bytes.Equal(gl[line], wl[line]) {
		line++
	}
	var g, w []byte
	if line < len(gl) {
		g = gl[line]
	}
	if line < len(wl) {
		w = wl[line]
	}
	t.Fatalf("fastdecode_gen.go is stale (types.go changed): run `go generate ./pkg/events`\nline %d is\n\t%s\nthe generator writes\n\t%s", line+1, g, w)
}
