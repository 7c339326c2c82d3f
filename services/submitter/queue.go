package submitter

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
)

// queuePage is one page of the queue: the tasks' views, encoded, and the
// cursor of the next page ("" on the last). Over NATS the views are the
// reply's result and the cursor its next (reply); over HTTP the body and
// a Link header.
type queuePage struct {
	Tasks []json.RawMessage
	Next  string
}

// queueCache keeps the listing order of the tasks (their ids, sorted by
// listBefore) for the fold's sequence it was computed at: the pages of
// one listing, asked one after the other, sort the tasks once.
type queueCache struct {
	mu  sync.Mutex
	seq uint64
	all bool
	ids []string
	ok  bool
}

// order is the sorted listing at the state's sequence (called with the
// state locked).
func (c *queueCache) order(st *domain.State, all bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok && c.seq == st.Seq && c.all == all {
		return c.ids
	}
	ts := make([]*domain.Task, 0, len(st.Tasks))
	for _, t := range st.Tasks {
		if all || !t.State.Terminal() {
			ts = append(ts, t)
		}
	}
	sort.Slice(ts, func(i, j int) bool { return listBefore(ts[i], ts[j]) })
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	c.seq, c.all, c.ids, c.ok = st.Seq, all, ids, true
	return ids
}

// queuePaged answers one page of queue (see api.QueueRequest).
func (s *server) queuePaged(ctx context.Context, req api.QueueRequest) (queuePage, error) {
	switch {
	case req.Limit < 0 || req.Limit > api.QueuePage:
		return queuePage{}, invalid("limit", fmt.Sprintf("must be between 1 and %d (got %d)", api.QueuePage, req.Limit))
	case req.Limit == 0:
		req.Limit = api.QueuePage
	}
	if err := s.sync(ctx); err != nil {
		return queuePage{}, err
	}
	var (
		page queuePage
		err  error
	)
	s.m.read(func(st *domain.State) {
		ids := s.queueCache.order(st, req.All)
		from := 0
		if req.After != "" {
			at := st.Tasks[req.After]
			if at == nil {
				err = invalid("after", fmt.Sprintf("names no task (got %q): give the next of the page before", req.After))
				return
			}
			// The first task listed after the cursor's task, where that
			// task would be listed now.
			from = sort.Search(len(ids), func(i int) bool { return listBefore(at, st.Tasks[ids[i]]) })
		}
		size := 0
		for i := from; i < len(ids) && len(page.Tasks) < req.Limit; i++ {
			b, merr := json.Marshal(redact(ctx, view(st.Tasks[ids[i]])))
			if merr != nil {
				err = merr
				return
			}
			if len(page.Tasks) > 0 && size+len(b)+1 > api.QueuePageBytes {
				break
			}
			size += len(b) + 1
			page.Tasks = append(page.Tasks, b)
		}
		if n := len(page.Tasks); n > 0 && from+n < len(ids) {
			page.Next = ids[from+n-1]
		}
	})
	if page.Tasks == nil {
		page.Tasks = []json.RawMessage{}
	}
	return page, err
}

// httpQueuePage answers GET /v1/tasks?limit=N&after=ID[&all=true]: one
// page (the body, a JSON array) and, unless it is the last, a Link header
// to the next (RFC 8288, rel="next").
func (s *server) httpQueuePage(w http.ResponseWriter, r *http.Request, all bool) {
	q := r.URL.Query()
	req := api.QueueRequest{All: all, After: q.Get("after")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			s.fail(w, "queue", invalid("limit", fmt.Sprintf("must be between 1 and %d (got %q)", api.QueuePage, v)))
			return
		}
		req.Limit = n
	}
	page, err := s.queuePaged(r.Context(), req)
	if err != nil {
		s.fail(w, "queue", err)
		return
	}
	if page.Next != "" {
		nq := url.Values{"after": {page.Next}}
		if req.Limit > 0 {
			nq.Set("limit", strconv.Itoa(req.Limit))
		}
		if all {
			nq.Set("all", "true")
		}
		w.Header().Set("Link", "</v1/tasks?"+nq.Encode()+`>; rel="next"`)
	}
	writeJSON(w, http.StatusOK, page.Tasks)
}
