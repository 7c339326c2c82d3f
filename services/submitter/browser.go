package submitter

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
)

// Browser safety. A page of any web site can make the browser send a
// request to an address the browser reaches — a `gpuq dev` on
// 127.0.0.1:8080 too. Three checks keep such a page from acting through
// the HTTP API, on every route (/healthz and /metrics included), before
// authentication:
//
//  1. Host (421 Misdirected Request, field Host): the request's Host must
//     be a name this listener answers to. A DNS-rebinding page makes the
//     browser send its own name (evil.example) to our address; it is
//     refused. See hostPolicy for the names.
//  2. Origin (403, field Origin): when a browser sends Origin, it must be
//     the request's own origin (scheme://Host) or one configured
//     (Config.HTTPOrigins). A cross-site fetch or form post is refused.
//  3. Content-Type (415, field Content-Type): a state-changing request
//     (POST, PUT, PATCH, DELETE) must say application/json (parameters
//     such as charset allowed), even with an empty body. A page can post
//     text/plain, form or multipart bodies without a CORS preflight, but
//     not application/json, so a request that got past the browser with
//     that type was allowed by our own (absent) CORS policy: never.
//
// Clients other than browsers (curl, the CLI, CI) send the listen name or
// an IP as Host, no Origin, and application/json.

// hostPolicy is the set of Host names an HTTP listener answers to.
type hostPolicy struct {
	any   bool            // "*" configured: every Host (a proxy in front checks it)
	anyIP bool            // a wildcard listener: every IP literal
	names map[string]bool // normalised (hostKey)
}

// newHostPolicy derives the names from the listen address: for a loopback
// listener (or none: a handler used without one) localhost, 127.0.0.1 and
// ::1; for a specific IP that IP; for a wildcard listener (":8080",
// "0.0.0.0:8080", "[::]:8080") every IP literal, localhost and the
// machine's host name; for a listen address given by name that name. extra
// are more names (a DNS name of the service, a compose service name); "*"
// admits any Host.
func newHostPolicy(listen string, extra []string) *hostPolicy {
	p := &hostPolicy{names: map[string]bool{}}
	add := func(n string) {
		if k := hostKey(n); k != "" {
			p.names[k] = true
		}
	}
	loopback := func() {
		for _, n := range []string{"localhost", "127.0.0.1", "::1"} {
			add(n)
		}
	}
	host := listen
	if h, _, err := net.SplitHostPort(listen); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	switch ip := net.ParseIP(host); {
	case listen == "":
		loopback()
	case host == "" || (ip != nil && ip.IsUnspecified()):
		p.anyIP = true
		loopback()
		if hn, err := os.Hostname(); err == nil {
			add(hn)
		}
	case ip != nil:
		add(host)
		if ip.IsLoopback() {
			loopback()
		}
	default: // a name
		add(host)
		if hostKey(host) == "localhost" {
			loopback()
		}
	}
	for _, n := range extra {
		if strings.TrimSpace(n) == "*" {
			p.any = true
			continue
		}
		add(n)
	}
	return p
}

// hostKey normalises a Host value or a name: lower case, no port, no
// brackets, no trailing dot; an IP in its canonical form.
func hostKey(h string) string {
	h = strings.TrimSpace(h)
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
	if ip := net.ParseIP(h); ip != nil {
		return ip.String()
	}
	return h
}

// allows reports whether a request's Host is one of the names.
func (p *hostPolicy) allows(host string) bool {
	if p.any {
		return true
	}
	k := hostKey(host)
	if k == "" {
		return false
	}
	if p.anyIP && net.ParseIP(k) != nil {
		return true
	}
	return p.names[k]
}

// String lists the names, for the error.
func (p *hostPolicy) String() string {
	var ns []string
	for n := range p.names {
		if strings.Contains(n, ":") {
			n = "[" + n + "]"
		}
		ns = append(ns, n)
	}
	sort.Strings(ns)
	if p.anyIP {
		ns = append(ns, "any IP address")
	}
	return strings.Join(ns, ", ")
}

// normOrigin is an origin (scheme://host[:port]) in a comparable form: lower
// case, the scheme's default port dropped; "" when s is not an origin
// ("null", a URL with a path or credentials).
func normOrigin(s string) string {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return ""
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return ""
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host
}

// stateChanging are the methods a page must not use through a browser
// without our consent.
func stateChanging(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// browserCheck refuses a request that a web page may have made the
// browser send (see above); nil lets it through.
func (s *server) browserCheck(r *http.Request) error {
	// 1. Host.
	if !s.hosts.allows(r.Host) {
		got := fmt.Sprintf("%q", r.Host)
		if r.Host == "" {
			got = "none"
		}
		return &opError{Status: http.StatusMisdirectedRequest, Field: "Host",
			Msg: fmt.Sprintf("must name this server: one of %s (got %s); add a name with --http-host", s.hosts, got)}
	}
	// 2. Origin, when a browser sent one.
	if o := r.Header.Values("Origin"); len(o) > 0 {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		own := normOrigin(scheme + "://" + r.Host)
		got := normOrigin(o[0])
		if len(o) > 1 || got == "" || (got != own && !s.origins[got]) {
			return &opError{Status: http.StatusForbidden, Field: "Origin",
				Msg: fmt.Sprintf("must be this API's own origin %s or one allowed with --http-origin (got %q): a page of another site may not use the API", own, strings.Join(o, ", "))}
		}
	}
	// 3. Content-Type of a state-changing request.
	if stateChanging(r.Method) {
		ct := r.Header.Get("Content-Type")
		mt, _, err := mime.ParseMediaType(ct)
		if ct == "" || err != nil || mt != "application/json" {
			got := fmt.Sprintf("%q", ct)
			if ct == "" {
				got = "none"
			}
			return &opError{Status: http.StatusUnsupportedMediaType, Field: "Content-Type",
				Msg: fmt.Sprintf("must be application/json for %s (got %s)", r.Method, got)}
		}
	}
	return nil
}

// originSet normalises the configured origins; an entry that is not an
// origin is an error naming it.
func originSet(origins []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, o := range origins {
		if strings.TrimSpace(o) == "" {
			continue
		}
		n := normOrigin(o)
		if n == "" {
			return nil, fmt.Errorf("allowed origin %q: must be scheme://host[:port] with scheme http or https", o)
		}
		out[n] = true
	}
	return out, nil
}

// CheckOrigins reports the first entry of Config.HTTPOrigins that is not an
// origin, for a flag's error.
func CheckOrigins(origins []string) error {
	_, err := originSet(origins)
	return err
}
