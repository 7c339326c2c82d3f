//go:build hostile

package hostile

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// nested is size bytes of an unterminated nesting of the shape's opening.
func nested(shape string, size int) []byte {
	return bytes.Repeat([]byte(shape), size/len(shape))
}

// memStep is one body size and the growth of the process's resident
// memory it may cause. The small body comes first: on a decoder that is
// quadratic in the nesting it already shows, and the suite never sends
// the large ones (the old code took 20 GB at 200 KB).
type memStep struct {
	size    int
	limitKB int
	status  []int // accepted answers (NATS has no 413: a refusal is 400 there)
	nest    bool  // the refusal must be the nesting's ("nest")
}

var memSteps = []memStep{
	{16 << 10, 64 << 10, []int{http.StatusBadRequest}, true},
	{500 << 10, 200 << 10, []int{http.StatusBadRequest}, true}, // under the submit limit (512 KiB)
	// 1 MiB: over the submit body limit (the log's record limit), so a
	// refusal for the size (413, field body) is right too when the size
	// is checked first; a decoder that stops at depth 64 answers 400.
	{1<<20 - 4<<10, 200 << 10, []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge}, false},
}

// guardKB: past this growth the process is killed (and the case fails)
// before it takes the machine.
const guardKB = 400 << 10

// TestNestedJSONMemory: a body of deep nesting is refused (400, field
// body, the error says "nest") while reading, and the process's memory
// stays bounded — over HTTP with a team's token (gpuq dev --auth) and
// over NATS on gpuq.api.v1.submit (gpuq dev).
func TestNestedJSONMemory(t *testing.T) {
	type sender func(t *testing.T, d *dev, b []byte) (status int, e errBody, err error)
	transports := map[string]struct {
		auth bool
		send sender
	}{
		"http with a team token": {true, func(t *testing.T, d *dev, b []byte) (int, errBody, error) {
			r := d.req("POST", "/v1/tasks", d.auth(t, "vision"), b)
			return r.Status, r.errBody(), r.Err
		}},
		"nats gpuq.api.v1.submit": {false, func(t *testing.T, d *dev, b []byte) (int, errBody, error) {
			nc, err := nats.Connect(d.natsURL)
			if err != nil {
				return 0, errBody{}, err
			}
			defer nc.Close()
			rep, err := call(nc, "gpuq.api.v1.submit", b, 30*time.Second)
			if err != nil {
				return 0, errBody{}, err
			}
			if rep.Error == "" {
				return http.StatusCreated, errBody{}, nil
			}
			return http.StatusBadRequest, errBody{rep.Error, rep.Field, rep.NotFound}, nil
		}},
	}
	for tname, tr := range transports {
		t.Run(tname, func(t *testing.T) {
			d := ownDev(t, "memory-"+mode(tr.auth), devOpts{auth: tr.auth})
			time.Sleep(time.Second) // let start-up settle: the baseline below
			for _, shape := range []string{"[", `{"a":`} {
				for _, st := range memSteps {
					hwm0, rss0 := procStatusKB(d.pid(), "VmHWM"), procStatusKB(d.pid(), "VmRSS")
					g := guard(d, guardKB)
					type result struct {
						status int
						e      errBody
						err    error
					}
					res := make(chan result, 1)
					go func() {
						status, e, err := tr.send(t, d, nested(shape, st.size))
						res <- result{status, e, err}
					}()
					var r result
					select {
					case r = <-res:
					case <-g.done: // killed: the answer never comes
					}
					status, e, err := r.status, r.e, r.err
					time.Sleep(200 * time.Millisecond) // what the request left running
					g.end()
					if g.killed {
						t.Fatalf("%q × %d bytes: the process grew past %d MiB and was killed (finding: memory)", shape, st.size, guardKB>>10)
					}
					if err != nil {
						t.Fatalf("%q × %d bytes: %v", shape, st.size, err)
					}
					growth := max(procStatusKB(d.pid(), "VmHWM")-hwm0, g.peakKB-rss0, 0)
					t.Logf("%q nesting, %d bytes: %d, field %q, %q; peak memory growth %.1f MiB (RSS before %.1f MiB)",
						shape, st.size, status, e.Field, clip(e.Error), float64(growth)/1024, float64(rss0)/1024)
					if growth > st.limitKB {
						t.Fatalf("%q × %d bytes: memory grew %d MiB, want at most %d MiB", shape, st.size, growth>>10, st.limitKB>>10)
					}
					if !slices.Contains(st.status, status) || e.Field != "body" {
						t.Errorf("%q × %d bytes: answered %d field %q (%s), want %v field body", shape, st.size, status, e.Field, e.Error, st.status)
					}
					if st.nest && !strings.Contains(e.Error, "nest") {
						t.Errorf("%q × %d bytes: error %q does not say nest(ing)", shape, st.size, e.Error)
					}
				}
			}
			if code, h := d.health(); code != http.StatusOK || !d.alive() {
				t.Fatalf("after the nested bodies /healthz is %d %s", code, h)
			}
		})
	}
}
