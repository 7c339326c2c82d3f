//go:build hostile

package hostile

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const eventStream = "GPUQ_EVENTS"

// TestReaderDurableConsumers: the reader roles (the auditor, an agent)
// can create no durable consumer on the event log, whichever way of the
// JetStream API they try; the services keep working and /healthz says ok.
func TestReaderDurableConsumers(t *testing.T) {
	d := sharedDev(t, true)
	admin := d.connect(t, "admin")
	created := map[string]bool{}
	t.Cleanup(func() { // leave the shared dev as it was
		for name := range created {
			_, _ = admin.Request("$JS.API.CONSUMER.DELETE."+eventStream+"."+name, nil, 5*time.Second)
		}
	})
	for _, role := range []string{"auditor", "agent-node-1"} {
		t.Run(role, func(t *testing.T) {
			nc := d.connect(t, role)
			name := func(how string) string { return "hostile-" + strings.ReplaceAll(role, "-", "") + "-" + how }
			ways := map[string]func(n string) error{
				"nats.go CreateOrUpdateConsumer": func(n string) error {
					js, err := jetstream.New(nc)
					if err != nil {
						return err
					}
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					_, err = js.CreateOrUpdateConsumer(ctx, eventStream, jetstream.ConsumerConfig{Durable: n, AckPolicy: jetstream.AckNonePolicy})
					return err
				},
				"$JS.API.CONSUMER.DURABLE.CREATE": func(n string) error {
					return jsAPI(nc, "$JS.API.CONSUMER.DURABLE.CREATE."+eventStream+"."+n, n)
				},
				"$JS.API.CONSUMER.CREATE with durable_name": func(n string) error {
					return jsAPI(nc, "$JS.API.CONSUMER.CREATE."+eventStream, n)
				},
				"$JS.API.CONSUMER.CREATE.stream.name": func(n string) error {
					return jsAPI(nc, "$JS.API.CONSUMER.CREATE."+eventStream+"."+n, n)
				},
			}
			for how, create := range ways {
				n := name(strings.NewReplacer("$", "", ".", "", " ", "", "_", "").Replace(how))
				err := create(n)
				if err == nil || consumerExists(t, admin, n) {
					created[n] = true
					t.Errorf("%s created the durable consumer %s (%s); want a permission error", role, n, how)
				} else {
					t.Logf("%s, %s: refused: %v", role, how, err)
				}
			}
		})
	}
	if code, h := d.health(); code != http.StatusOK || !strings.Contains(h, "ok") {
		t.Errorf("/healthz after the readers' attempts: %d %s", code, h)
	}
	id := d.submit(t, task(uniq("after-readers")))
	d.show(t, id)
	if r := d.req("GET", "/v1/tasks/"+id+"/history", d.auth(t, "vision"), nil); r.Status != http.StatusOK {
		t.Errorf("history after the readers' attempts: %s", r)
	}
}

// jsAPI asks the JetStream API to create a durable consumer named n and
// returns its error, or nil when it says it created one.
func jsAPI(nc *nats.Conn, subj, n string) error {
	req := fmt.Sprintf(`{"stream_name":%q,"config":{"durable_name":%q,"deliver_policy":"all","ack_policy":"none"}}`, eventStream, n)
	m, err := nc.Request(subj, []byte(req), time.Second)
	if err != nil {
		return err
	}
	var r struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return fmt.Errorf("%q: %w", m.Data, err)
	}
	if r.Error != nil {
		return fmt.Errorf("%s", r.Error.Description)
	}
	return nil
}

func consumerExists(t *testing.T, admin *nats.Conn, n string) bool {
	t.Helper()
	m, err := admin.Request("$JS.API.CONSUMER.INFO."+eventStream+"."+n, nil, 5*time.Second)
	if err != nil {
		t.Fatalf("consumer info as admin: %v", err)
	}
	return !strings.Contains(string(m.Data), `"error"`)
}

// TestPollers: 1,000 concurrent pollers, each asking show, history and
// logs of a running task over HTTP: no 5xx (each request used to open a
// JetStream consumer: 65 % 500s). Prints p50/p99 per route and the 5xx
// counts.
func TestPollers(t *testing.T) {
	const pollers = 1000
	d := sharedDev(t, false)
	id := d.submit(t, with2(task(uniq("polled")), "command", "echo polled-output; sleep 600", "hours", 1))
	t.Cleanup(func() { d.req("POST", "/v1/tasks/"+id+"/cancel", nil, []byte(`{}`)) })
	d.waitState(t, id, "running")
	routes := []string{"/v1/tasks/" + id, "/v1/tasks/" + id + "/history", "/v1/tasks/" + id + "/logs"}
	type sample struct {
		route  int
		status int
		dur    time.Duration
		err    error
	}
	samples := make(chan sample, pollers*len(routes))
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: pollers, MaxConnsPerHost: pollers}}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for k := range routes {
				j := (i + k) % len(routes) // every route is asked at once
				t0 := time.Now()
				resp, err := client.Get("http://" + d.httpAddr + routes[j])
				s := sample{route: j, dur: time.Since(t0), err: err}
				if err == nil {
					s.status = resp.StatusCode
					resp.Body.Close()
				}
				samples <- s
			}
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	wall := time.Since(t0)
	close(samples)
	byRoute := make([][]time.Duration, len(routes))
	fivexx, transport := make([]int, len(routes)), make([]int, len(routes))
	var firstErr error
	for s := range samples {
		byRoute[s.route] = append(byRoute[s.route], s.dur)
		switch {
		case s.err != nil:
			transport[s.route]++
			if firstErr == nil {
				firstErr = s.err
			}
		case s.status >= 500:
			fivexx[s.route]++
		}
	}
	names := []string{"show", "history", "logs"}
	for i := range routes {
		ds := byRoute[i]
		sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
		t.Logf("%d pollers, %-7s: p50 %v p99 %v max %v; 5xx %d, transport errors %d",
			pollers, names[i], ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)*99/100].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), fivexx[i], transport[i])
	}
	t.Logf("%d requests in %v", pollers*len(routes), wall.Round(time.Millisecond))
	for i := range routes {
		if fivexx[i] > 0 || transport[i] > 0 {
			t.Errorf("%s: %d answers 5xx and %d without an answer (first: %v) of %d", names[i], fivexx[i], transport[i], firstErr, pollers)
		}
	}
}

// with2 sets fields of a submission.
func with2(m map[string]any, kv ...any) map[string]any {
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// TestOversizeCommandNeverAcknowledged: a 900 KB command fits the old 1
// MiB body limit but not the log's 512 KiB record: refused (413 or 400,
// field body or command) over HTTP and NATS, never a task id, and the log
// skips no record for it.
func TestOversizeCommandNeverAcknowledged(t *testing.T) {
	for _, auth := range []bool{false, true} {
		t.Run(mode(auth), func(t *testing.T) {
			d := sharedDev(t, auth)
			skipped0 := skippedCount(t, d)
			big := strings.Repeat("x", 900<<10)
			fields := []string{"body", "command"}
			n1 := uniq("oversize-http")
			r := d.req("POST", "/v1/tasks", d.auth(t, "vision"), mustJSON(with2(task(n1), "command", big)))
			if (r.Status != http.StatusRequestEntityTooLarge && r.Status != http.StatusBadRequest) || !slices.Contains(fields, r.errBody().Field) {
				t.Errorf("HTTP: 900 KB command answered %s, want 413 or 400 naming body or command", r)
			}
			n2 := uniq("oversize-nats")
			subj := "gpuq.api.v1.submit"
			if auth {
				subj = "gpuq.api.v1.team.vision.submit"
			}
			rep, err := call(d.connect(t, "ci-vision"), subj, mustJSON(with2(task(n2), "command", big)), 20*time.Second)
			if err != nil {
				t.Errorf("NATS: %v", err)
			} else if rep.Error == "" || !slices.Contains(fields, rep.Field) {
				t.Errorf("NATS: 900 KB command answered %s error %q field %q, want a refusal naming body or command", rep.Result, rep.Error, rep.Field)
			}
			time.Sleep(500 * time.Millisecond)
			q := d.everything(t)
			for _, n := range []string{n1, n2} {
				if strings.Contains(q, n) {
					t.Errorf("%s is in the queue", n)
				}
			}
			if s := skippedCount(t, d); s != skipped0 {
				t.Errorf("the log skipped %d more records (the acknowledged submission it refused)", s-skipped0)
			}
		})
	}
}

// skippedCount is how many records `gpuq audit skipped` lists.
func skippedCount(t *testing.T, d *dev) int {
	t.Helper()
	r := cli(t, nil, append([]string{"audit", "skipped", "--json"}, d.natsFlags("auditor")...)...)
	if r.Code != 0 {
		r = cli(t, nil, append([]string{"audit", "skipped"}, d.natsFlags("auditor")...)...)
		if r.Code != 0 {
			t.Fatalf("gpuq audit skipped: %s", r)
		}
	}
	var list []json.RawMessage
	if json.Unmarshal([]byte(r.Stdout), &list) == nil {
		return len(list)
	}
	if strings.Contains(r.Stdout, "no record skipped") {
		return 0
	}
	return strings.Count(strings.TrimSpace(r.Stdout), "\n") + 1
}

// TestQueueAllOverNATS: `gpuq queue --all` of 2,900 tasks whose answer is
// several MB (the NATS max payload is 1 MB) works over NATS and lists
// every task, and HTTP lists them too.
func TestQueueAllOverNATS(t *testing.T) {
	const tasks = 2900
	d := ownDev(t, "queue-all", devOpts{extra: []string{"--nodes", "0"}})
	nc := d.connect(t, "")
	pad := strings.Repeat("n", 180)
	ids := make([]string, tasks)
	var wg sync.WaitGroup
	errs := make(chan error, tasks)
	work := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				m := task(fmt.Sprintf("q%05d-%s", i, pad))
				m["hypothesis"] = strings.Repeat("h", 300)
				m["allow_unplaceable"] = true
				rep, err := call(nc, "gpuq.api.v1.submit", mustJSON(m), 30*time.Second)
				if err == nil && rep.Error != "" {
					err = fmt.Errorf("%s (field %s)", rep.Error, rep.Field)
				}
				if err != nil {
					errs <- err
					continue
				}
				var res struct {
					TaskID string `json:"task_id"`
				}
				_ = json.Unmarshal(rep.Result, &res)
				ids[i] = res.TaskID
			}
		}()
	}
	t0 := time.Now()
	for i := range tasks {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("submit: %v", err)
	}
	t.Logf("%d tasks submitted in %v", tasks, time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	r := cli(t, nil, append([]string{"queue", "--all", "-o", "name"}, d.natsFlags("")...)...)
	if r.Code != 0 {
		t.Fatalf("gpuq queue --all over NATS: %s", r)
	}
	got := strings.Fields(r.Stdout)
	t.Logf("gpuq queue --all over NATS: %d tasks in %v", len(got), time.Since(t0).Round(time.Millisecond))
	sort.Strings(got)
	want := slices.Clone(ids)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("gpuq queue --all listed %d tasks, want the %d submitted", len(got), len(want))
	}
	all := d.everything(t)
	t.Logf("HTTP GET /v1/tasks?all=true: %d bytes", len(all))
	for _, id := range []string{ids[0], ids[tasks/2], ids[tasks-1]} {
		if !strings.Contains(all, id) {
			t.Errorf("HTTP does not list %s", id)
		}
	}
}
