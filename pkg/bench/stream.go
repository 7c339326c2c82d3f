package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/events/jetstream"
)

// StreamFunc runs a submitter on log serving its HTTP API (GET
// /v1/events) on addr until ctx ends, calling ready once it serves
// (cmd/gpuq passes services/submitter; this module cannot import it).
type StreamFunc func(ctx context.Context, log *jetstream.Log, nc *nats.Conn, addr string, ready func()) error

// StreamOptions size the stream measurement.
type StreamOptions struct {
	Followers int     // concurrent followers of GET /v1/events
	Events    int     // records appended while they follow
	Rate      float64 // records appended per second
}

// StreamResult is the stream measurement: every record to every
// follower, its latency from the append to the follower's read of the
// record's id line, and the process's memory growth while the followers
// follow (the followers are in the same process: the growth counts their
// side too).
type StreamResult struct {
	Followers int `json:"followers"`
	Events    int `json:"events"`
	// Delivered (follower, record) pairs; Missing = Followers × Events −
	// Delivered; Ended: followers whose stream ended before the last record.
	Delivered int64         `json:"delivered"`
	Missing   int64         `json:"missing"`
	Ended     int           `json:"ended"`
	Connect   time.Duration `json:"connect_ns"` // all followers connected and registered
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
	Max       time.Duration `json:"max_ns"`
	Took      time.Duration `json:"took_ns"` // the appends
	// CPU is the process's CPU time from the first append to the last
	// follower's last record: the submitter's, the server's and the
	// followers' together. On a busy machine the latencies grow with the
	// other work; CPU per delivery does not.
	CPU time.Duration `json:"cpu_ns"`
	// Heap in use and resident set, before the followers connected and
	// the peak while they followed (sampled every 100 ms).
	HeapBefore uint64 `json:"heap_before"`
	HeapPeak   uint64 `json:"heap_peak"`
	RSSBefore  uint64 `json:"rss_before"`
	RSSPeak    uint64 `json:"rss_peak"`
}

// HeapGrowthMB and RSSGrowthMB are the peaks over the baselines, in MB.
func (r StreamResult) HeapGrowthMB() float64 { return mb(r.HeapPeak, r.HeapBefore) }
func (r StreamResult) RSSGrowthMB() float64  { return mb(r.RSSPeak, r.RSSBefore) }

func mb(peak, base uint64) float64 {
	if peak < base {
		return 0
	}
	return float64(peak-base) / 1e6
}

// Stream measures GET /v1/events: a submitter (run) on a fresh server,
// o.Followers followers over loopback HTTP, o.Events submissions appended
// at o.Rate per second straight to the log (as another submitter would).
func Stream(ctx context.Context, parent string, o StreamOptions, run StreamFunc) (StreamResult, error) {
	res := StreamResult{Followers: o.Followers, Events: o.Events}
	n, err := startNode(ctx, parent)
	if err != nil {
		return res, err
	}
	defer n.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	addr := ln.Addr().String()
	ln.Close()

	// 1. The submitter.
	sctx, stop := context.WithCancel(ctx)
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- run(sctx, n.log, n.nc, addr, func() { close(ready) }) }()
	defer func() { stop(); <-done }()
	select {
	case <-ready:
	case err := <-done:
		return res, fmt.Errorf("submitter: %w", err)
	case <-time.After(time.Minute):
		return res, fmt.Errorf("submitter not ready after a minute")
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapBefore, res.RSSBefore = ms.HeapInuse, rss()

	// 2. The followers, each on its own connection.
	tr := &http.Transport{MaxIdleConnsPerHost: o.Followers, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	fctx, stopFollowers := context.WithCancel(ctx)
	defer stopFollowers()
	type got struct {
		seq uint64
		at  int64
	}
	var (
		wg        sync.WaitGroup
		connected atomic.Int64
		ended     atomic.Int64
		lastSeen  = make([]atomic.Uint64, o.Followers)
		recv      = make([][]got, o.Followers)
		connErr   atomic.Value
	)
	start := time.Now()
	for i := range o.Followers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(fctx, http.MethodGet, "http://"+addr+"/v1/events", nil)
			req.Header.Set("Accept", "text/event-stream")
			resp, err := client.Do(req)
			if err != nil {
				connErr.Store(err)
				connected.Add(1)
				ended.Add(1)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				connErr.Store(fmt.Errorf("GET /v1/events: %s", resp.Status))
				connected.Add(1)
				ended.Add(1)
				return
			}
			mine := make([]got, 0, o.Events)
			br := bufio.NewReaderSize(resp.Body, 16<<10)
			hello := false
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					break
				}
				if !hello && bytes.HasPrefix(line, []byte("event: hello")) {
					hello = true
					connected.Add(1)
				}
				if id, ok := bytes.CutPrefix(line, []byte("id: ")); ok {
					seq, _ := strconv.ParseUint(string(bytes.TrimSpace(id)), 10, 64)
					mine = append(mine, got{seq, time.Now().UnixNano()})
					lastSeen[i].Store(seq)
				}
			}
			recv[i] = mine
		}()
	}
	for connected.Load() < int64(o.Followers) {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if time.Since(start) > 2*time.Minute {
			return res, fmt.Errorf("only %d of %d followers connected after 2 minutes", connected.Load(), o.Followers)
		}
		time.Sleep(10 * time.Millisecond)
	}
	res.Connect = time.Since(start)
	if err, _ := connErr.Load().(error); err != nil {
		return res, fmt.Errorf("a follower could not connect: %w", err)
	}

	// 3. The memory sampler.
	var peakHeap, peakRSS atomic.Uint64
	sampleDone := make(chan struct{})
	sampleStop := make(chan struct{})
	go func() {
		defer close(sampleDone)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peakHeap.Load() {
				peakHeap.Store(m.HeapInuse)
			}
			if r := rss(); r > peakRSS.Load() {
				peakRSS.Store(r)
			}
			select {
			case <-sampleStop:
				return
			case <-t.C:
			}
		}
	}()

	// 4. The appends, paced; each one's time before it is sent.
	sent := map[uint64]int64{}
	every := time.Duration(float64(time.Second) / o.Rate)
	t0, cpu0 := time.Now(), cpuTime()
	var last uint64
	for i := range o.Events {
		if d := time.Until(t0.Add(time.Duration(i) * every)); d > 0 {
			time.Sleep(d)
		}
		id, _ := uuid.NewV7()
		at := time.Now()
		e := events.Submitted{TaskID: id.String(), Name: fmt.Sprintf("stream-%d", i), Team: fmt.Sprintf("team-%d", i%8),
			Priority: "medium", GPUs: 1, Hours: 1, Hypothesis: "the stream keeps up", Command: "true", Preemptible: true, SubmittedAt: at}
		ack, err := events.Append(ctx, n.log, e, events.Meta{Time: at}, "", nil)
		if err != nil {
			return res, fmt.Errorf("append: %w", err)
		}
		sent[ack.Seq] = at.UnixNano()
		last = ack.Seq
	}
	res.Took = time.Since(t0)
	// every follower reads the last record, or 30 s pass
	behind := func() int {
		n := 0
		for i := range lastSeen {
			if lastSeen[i].Load() < last {
				n++
			}
		}
		return n
	}
	for wait := time.Now(); behind() > 0 && time.Since(wait) < 30*time.Second; {
		time.Sleep(20 * time.Millisecond)
	}
	res.CPU = cpuTime() - cpu0
	close(sampleStop)
	<-sampleDone
	stopFollowers()
	wg.Wait()
	res.HeapPeak, res.RSSPeak = max(peakHeap.Load(), res.HeapBefore), max(peakRSS.Load(), res.RSSBefore)
	res.Ended = behind()

	// 5. Latencies of every (follower, record) pair.
	lat := make([]time.Duration, 0, o.Followers*o.Events)
	for _, mine := range recv {
		for _, g := range mine {
			if at, ok := sent[g.seq]; ok {
				lat = append(lat, time.Duration(g.at-at))
			}
		}
	}
	res.Delivered = int64(len(lat))
	res.Missing = int64(o.Followers*o.Events) - res.Delivered
	if len(lat) > 0 {
		slices.Sort(lat)
		res.P50, res.P99, res.Max = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
	}
	return res, nil
}

// rss is the process's resident set in bytes (Linux; 0 elsewhere).
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}
