package submitter

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"

	"github.com/gpuq/gpuq/pkg/api"
	"github.com/gpuq/gpuq/pkg/domain"
)

// The dashboard: one page at /, its script and style under /ui/, built
// into the binary. The page reads only the HTTP API (GET /v1/tasks,
// /v1/nodes, /v1/tasks/{id}[/history|/logs]) and follows GET /v1/events;
// it decides nothing itself: positions, estimates, reasons and actions are
// the advisor's advice as the stream passes it on; the cluster's next
// hours are GET /v1/plan, the policy's own pass (dashboard.go), and a
// wait's breakdown GET /v1/tasks/{id}/explain, `gpuq explain`'s.

//go:embed web
var webFS embed.FS

var (
	pageTmpl = template.Must(template.New("index.html").Funcs(template.FuncMap{
		"inc":  func(i int) int { return i + 1 },
		"tail": func(id string) string { return id[max(0, len(id)-8):] },
	}).ParseFS(webFS, "web/index.html"))
	uiFS, _ = fs.Sub(webFS, "web/ui")
)

// pageCSP allows the page its own script, style and API, nothing else:
// no inline script, no other origin, no framing.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// publicPage is whether r asks for the page or its files, which need no
// token: the page asks for one itself and sends it with every API call.
func publicPage(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	return r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/ui/")
}

// streamRoutes registers the stream and the page.
func (s *server) streamRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/events", s.httpEvents)
	mux.HandleFunc("GET /{$}", s.httpPage)
	ui := http.StripPrefix("/ui/", http.FileServerFS(uiFS))
	mux.Handle("GET /ui/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w)
		w.Header().Set("Cache-Control", "no-cache")
		ui.ServeHTTP(w, r)
	}))
}

func pageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
}

// pageRows is how many queued tasks the page carries before its script
// runs (without tokens: with them, the page has no token yet).
const pageRows = 50

// httpPage serves the dashboard: the page, with the head of the queue
// when the API is open (the script replaces it with the live view).
func (s *server) httpPage(w http.ResponseWriter, r *http.Request) {
	data := struct {
		Auth      bool
		Queue     []api.TaskView
		Checklist []string
	}{Auth: s.tokens != nil, Checklist: domain.ChecklistItems}
	if s.tokens == nil {
		if q, err := s.queue(r.Context(), false); err == nil {
			for _, t := range q {
				if t.State == string(domain.Queued) && len(data.Queue) < pageRows {
					data.Queue = append(data.Queue, t)
				}
			}
		}
	}
	var buf bytes.Buffer
	if err := pageTmpl.Execute(&buf, data); err != nil {
		s.fail(w, "page", err)
		return
	}
	pageHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(buf.Bytes())
}
