package notifier

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
)

func TestAllowPermits(t *testing.T) {
	nets, err := ParseAllow("10.0.0.0/8, 192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		allow Allow
		ip    string
		want  bool
	}{
		"default: a public address":         {Allow{}, "93.184.216.34", true},
		"default: a private address":        {Allow{}, "10.1.2.3", true},
		"default: loopback":                 {Allow{}, "127.0.0.1", false},
		"default: loopback v6":              {Allow{}, "::1", false},
		"default: v4-mapped loopback":       {Allow{}, "::ffff:127.0.0.1", false},
		"default: link-local (metadata)":    {Allow{}, "169.254.169.254", false},
		"default: link-local v6":            {Allow{}, "fe80::1", false},
		"default: unspecified":              {Allow{}, "0.0.0.0", false},
		"gpuq dev: loopback":                {Allow{Local: true}, "127.0.0.1", true},
		"--webhook-allow: inside":           {Allow{Nets: nets}, "10.200.0.1", true},
		"--webhook-allow: a single address": {Allow{Nets: nets}, "192.0.2.7", true},
		"--webhook-allow: outside":          {Allow{Nets: nets}, "93.184.216.34", false},
		"--webhook-allow: loopback":         {Allow{Nets: nets}, "127.0.0.1", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.allow.Permits(netip.MustParseAddr(tc.ip)); got != tc.want {
				t.Errorf("Permits(%s) = %v, want %v", tc.ip, got, tc.want)
			}
		})
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "10.0.0/8"} {
		if _, err := ParseAllow(bad); err == nil {
			t.Errorf("ParseAllow(%q): no error", bad)
		}
	}
}

func TestNewTeamDest(t *testing.T) {
	cases := map[string]struct {
		team, url string
		types     []string
		field     string
	}{
		"ok":                    {"vision", "https://hooks.example.com/x", []string{Started}, ""},
		"no team":               {"", "https://hooks.example.com/x", nil, "team"},
		"not http":              {"vision", "ftp://hooks.example.com/x", nil, "url"},
		"relative":              {"vision", "/x", nil, "url"},
		"with a password":       {"vision", "https://u:p@hooks.example.com/x", nil, "url"},
		"an unknown event type": {"vision", "https://hooks.example.com/x", []string{"started", "exploded"}, "events"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d, err := NewTeamDest(tc.team, tc.url, tc.types, "", time.Now())
			field := ""
			if fe, ok := err.(*FieldError); ok {
				field = fe.Field
			} else if err != nil {
				t.Fatalf("error %v is not a FieldError", err)
			}
			if field != tc.field {
				t.Errorf("field %q (%v), want %q", field, err, tc.field)
			}
			if err == nil && (d.ID == "" || !strings.HasPrefix(d.Secret, "whsec_")) {
				t.Errorf("destination %+v: want an id and a new secret", d)
			}
		})
	}
}

// A team's destination gets its team's notices only, as soon as it is
// added; a test request reaches it; removed, it gets nothing more; and
// one on loopback outside gpuq dev gets nothing at all.
func TestTeamDestinations(t *testing.T) {
	store, js := stores(t)["kv"]()
	vision, other := newReceiver(t, nil), newReceiver(t, nil)
	w := newWorld(t, store)
	w.js = js
	w.cfg.Allow = Allow{Local: true} // as gpuq dev: the receivers are on loopback
	w.start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dests, err := OpenDestinations(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	add := func(team string, r *receiver) TeamDest {
		t.Helper()
		d, err := NewTeamDest(team, r.srv.URL, nil, secret, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := dests.Add(ctx, d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	v := add("vision", vision)
	add("speech", other)
	time.Sleep(300 * time.Millisecond) // the watch takes them
	w.append(dt.Task().ID(taskA).Name("train").Team("vision").GPUs(1).Submitted())
	w.append(dt.Task().ID(taskB).Name("asr").Team("speech").GPUs(1).Submitted())
	w.append(dt.Dispatch(taskA, dt.On("n1", 0)))
	w.append(dt.Dispatch(taskB, dt.On("n1", 1)))
	w.append(startedOn(taskA))
	w.append(startedOn(taskB))
	hs := vision.waitFor(t, "vision's started", func(hs []hit) bool { return count(hs, Started) == 1 })
	if hs[0].n.TaskID != taskA || !hs[0].sigOK {
		t.Errorf("vision got %+v (signature ok %v), want task A's, signed", hs[0].n, hs[0].sigOK)
	}
	other.waitFor(t, "speech's started", func(hs []hit) bool { return count(hs, Started) == 1 && hs[0].n.TaskID == taskB })

	id, err := dests.Test(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	vision.waitFor(t, "the test notice", func(hs []hit) bool { return count(hs, Test) == 1 && hs[len(hs)-1].id == id })
	if count(other.all(), Test) != 0 {
		t.Error("the test of vision's destination reached speech's")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, _, err := dests.TestResult(ctx, v.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("TestResult: not delivered after 5 s")
		}
		time.Sleep(50 * time.Millisecond)
	}

	if err := dests.Remove(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	n := len(vision.all())
	w.append(completedOn(taskA))
	time.Sleep(300 * time.Millisecond)
	if got := len(vision.all()); got != n {
		t.Errorf("a removed destination got %d more notices", got-n)
	}
}

// Outside gpuq dev a team destination on loopback is refused at the
// connection, and its notices end as dead letters.
func TestTeamDestinationOnLoopbackRefused(t *testing.T) {
	store, js := stores(t)["kv"]()
	r := newReceiver(t, nil)
	w := newWorld(t, store)
	w.js = js
	w.start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dests, err := OpenDestinations(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := NewTeamDest("vision", r.srv.URL, []string{Started}, secret, time.Now())
	if err := dests.Add(ctx, d); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	w.run(taskA)
	var dead []Delivery
	deadline := time.Now().Add(10 * time.Second)
	for len(dead) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		dead, _ = store.DeadLetters(ctx)
	}
	if len(dead) != 1 || !strings.Contains(dead[0].LastError, "not allowed") {
		t.Fatalf("dead letters %+v, want started refused as not allowed", dead)
	}
	if hs := r.all(); len(hs) != 0 {
		t.Errorf("the loopback receiver got %s", types(hs))
	}
}

func startedOn(id string) events.Event   { return events.Started{TaskID: id, Node: "n1", PID: 1} }
func completedOn(id string) events.Event { return events.Completed{TaskID: id, Node: "n1"} }
