package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/moatsh/moat/internal/proxy"
)

// operations names the API routes (internal/server's mux patterns) whose
// latency moat_operation_duration_seconds records.
var operations = map[string]string{
	"POST /sandboxes":                 "create",
	"POST /v2/sandboxes":              "create",
	"DELETE /sandboxes/{id}":          "kill",
	"POST /sandboxes/{id}/pause":      "pause",
	"POST /sandboxes/{id}/resume":     "resume",
	"POST /sandboxes/{id}/connect":    "connect",
	"POST /v2/sandboxes/{id}/connect": "connect",
	"POST /sandboxes/{id}/snapshots":  "snapshot",
	"POST /sandboxes/{id}/fork":       "fork",
	// Starts a build, which runs on after the answer.
	"POST /v2/templates/{templateID}/builds/{buildID}": "build",
}

// reads are other routes moat_api_requests_total names; every other
// route counts as "other", so the label stays bounded.
var reads = map[string]string{
	"GET /sandboxes":      "list",
	"GET /v2/sandboxes":   "list",
	"GET /sandboxes/{id}": "get",
}

// Operation is the operation label of an API request the mux matched to
// pattern ("" when it matched none).
func Operation(pattern string) string {
	if op, ok := operations[pattern]; ok {
		return op
	}
	if op, ok := reads[pattern]; ok {
		return op
	}
	return "other"
}

// Timed reports whether the operation's latency is recorded.
func Timed(op string) bool {
	for _, o := range operations {
		if o == op {
			return true
		}
	}
	return false
}

// class is a status's class label: "2xx", "4xx", ...
func class(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return strconv.Itoa(status/100) + "xx"
}

// result is the result label: ok below 400.
func result(status int) string {
	if status < 400 {
		return "ok"
	}
	return "error"
}

// API counts and times the requests h (internal/server's handler, which
// passes the request on to its mux) answers. The route is the pattern the
// mux matched, read from the request after h returns.
func (m *Metrics) API(h http.Handler) http.Handler {
	if m == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start, cw := time.Now(), &countingWriter{ResponseWriter: w}
		defer func() { // also when h aborts (panic(http.ErrAbortHandler): the client went away)
			op, status := Operation(r.Pattern), cw.code()
			m.apiRequests.WithLabelValues(op, class(status)).Inc()
			if Timed(op) {
				m.opDuration.WithLabelValues(op, result(status)).Observe(time.Since(start).Seconds())
			}
		}()
		h.ServeHTTP(cw, r)
	})
}

// Proxy counts the requests and response bytes of h, the sandbox proxy,
// by port kind: "envd" for envd's port, "other" for the rest.
func (m *Metrics) Proxy(h http.Handler) http.Handler {
	if m == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := PortKind(r, m.cfg.Domain, m.cfg.EnvdPort)
		cw := &countingWriter{ResponseWriter: w}
		// Deferred: the proxy aborts a stream whose client went away
		// (panic(http.ErrAbortHandler), e.g. an SDK that stops reading at a
		// command's end event), and such requests count too.
		defer func() {
			m.pxRequests.WithLabelValues(kind, class(cw.code())).Inc()
			m.pxBytes.WithLabelValues(kind).Add(float64(cw.bytes))
		}()
		h.ServeHTTP(cw, r)
	})
}

// PortKind is "envd" when r goes to envd's port, else "other": the port is
// the E2b-Sandbox-Port header's, else the Host's "{port}-{id}.{domain}".
func PortKind(r *http.Request, domain string, envdPort int) string {
	port, err := strconv.Atoi(r.Header.Get(proxy.HeaderSandboxPort))
	if err != nil {
		port, _, _ = proxy.ParseHost(r.Host, domain)
	}
	if port == envdPort {
		return "envd"
	}
	return "other"
}

// countingWriter records the status and counts body bytes. Unwrap lets
// http.ResponseController reach the connection (flushes, full duplex,
// hijacks), so a wrapped handler loses nothing.
type countingWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *countingWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // 1xx are interim answers
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// code is the status sent (200 when the handler wrote nothing).
func (w *countingWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
