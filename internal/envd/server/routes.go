package server

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/envd/files"
	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/envd/truststore"
)

// maxInitBody bounds the body of POST /init.
const maxInitBody = 1 << 20

// unauthorizedMsg is E2B envd's answer to a missing or wrong access token.
const unauthorizedMsg = "unauthorized access, please provide a valid access token or method signing if supported"

// exposedHeaders are the response headers browsers may read: Connect's and
// the ones E2B envd lists.
var exposedHeaders = strings.Join([]string{
	"Connect-Protocol-Version", "Connect-Timeout-Ms", "Grpc-Status", "Grpc-Message",
	"Grpc-Status-Details-Bin", "Location", "Cache-Control", "X-Content-Type-Options",
	"X-Envd-Version", "Content-Disposition", "Content-Encoding",
}, ", ")

func (s *Server) buildHandler() http.Handler {
	mux := http.NewServeMux()
	for _, svc := range s.services {
		path, h := svc.Handler()
		mux.Handle(path, h)
	}
	fh := files.New(files.Config{State: s.st, Users: s.users, Logger: s.log, Chown: chownFunc})
	mux.Handle("GET /files", fh)
	mux.Handle("POST /files", fh)
	// Not exempt from the access token (see exempt), as in E2B's envd.
	mux.HandleFunc("POST /files/compose", fh.Compose)
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("POST /init", s.init)
	mux.HandleFunc("GET /envs", s.envs)
	mux.HandleFunc("GET /metrics", s.serveMetrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not found: "+r.URL.Path)
	})
	return s.cors(s.recoverPanics(s.auth(mux)))
}

// cors allows every origin, method and header, as E2B envd does, and
// answers preflights itself.
func (s *Server) cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Access-Control-Expose-Headers", exposedHeaders)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "HEAD, GET, POST, PUT, PATCH, DELETE")
			if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
				h.Set("Access-Control-Allow-Headers", req)
			} else {
				h.Set("Access-Control-Allow-Headers", "*")
			}
			h.Set("Access-Control-Max-Age", "7200")
			h.Add("Vary", "Origin")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// recoverPanics turns a handler panic into a 500 JSON answer (when nothing
// was written yet) instead of a dropped connection or a crash.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &trackingWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { //nolint:errorlint // sentinel compared as http does
				panic(v)
			}
			s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", v)
			if !rw.wrote {
				writeError(rw, http.StatusInternalServerError, "internal server error")
			}
		}()
		next.ServeHTTP(rw, r)
	})
}

// auth enforces the access token on every route but the exempt ones.
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := s.st.AccessToken()
		if token == "" || exempt(r) {
			next.ServeHTTP(w, r)
			return
		}
		got := r.Header.Get("X-Access-Token")
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			writeError(w, http.StatusUnauthorized, unauthorizedMsg)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// exempt reports whether r needs no access token: health checks, /files
// (which check the token or a signature themselves) and /init (which checks
// it itself). /files/compose is not: it has no signed form.
func exempt(r *http.Request) bool {
	switch r.URL.Path {
	case "/health":
		return r.Method == http.MethodGet || r.Method == http.MethodHead
	case "/files":
		return true
	case "/init":
		return r.Method == http.MethodPost
	}
	return false
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) init(w http.ResponseWriter, r *http.Request) {
	if token := s.st.AccessToken(); token != "" {
		got := r.Header.Get("X-Access-Token")
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			writeError(w, http.StatusUnauthorized, unauthorizedMsg)
			return
		}
	}
	var in state.Init
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxInitBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "read init body: "+err.Error())
		return
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			writeError(w, http.StatusBadRequest, "invalid init body: "+err.Error())
			return
		}
	}
	if in.EgressCA != "" {
		if !s.trustEgressCA(w, &in) {
			return
		}
		w.Header().Set(state.EgressCAHeader, state.EgressCAInstalled)
	}
	if s.st.Apply(in) && in.Timestamp != nil {
		s.syncClock(*in.Timestamp)
	}
	s.log.Debug("init applied", "envVars", len(in.EnvVars), "defaultUser", in.DefaultUser,
		"defaultWorkdir", in.DefaultWorkdir, "token", in.AccessToken != nil, "egressCA", in.EgressCA != "")
	w.Header().Set("X-Envd-Version", state.Version)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// trustEgressCA installs the egress CA of an /init (see package
// truststore) and adds the variables that point TLS libraries at it to
// in.Internal, so that every process started afterwards sees them. In host
// mode the trust store is a tree under the home directory, never the
// host's own. On failure it has answered.
func (s *Server) trustEgressCA(w http.ResponseWriter, in *state.Init) bool {
	root := "/"
	if s.cfg.HostMode {
		root = filepath.Join(s.cfg.Home, ".moat-truststore")
	}
	env, err := truststore.Install(root, []byte(in.EgressCA))
	if errors.Is(err, truststore.ErrInvalid) {
		writeError(w, http.StatusBadRequest, "invalid moatEgressCA: "+err.Error())
		return false
	}
	if err != nil {
		s.log.Error("install the egress CA", "err", err)
		writeError(w, http.StatusInternalServerError, "install the egress CA: "+err.Error())
		return false
	}
	if in.Internal == nil {
		in.Internal = map[string]string{}
	}
	maps.Copy(in.Internal, env)
	return true
}

// syncClock sets the system clock to ts, best effort, only inside a sandbox
// and only as root.
func (s *Server) syncClock(ts time.Time) {
	if s.cfg.HostMode || unix.Geteuid() != 0 {
		return
	}
	if d := time.Since(ts); d > -50*time.Millisecond && d < 50*time.Millisecond {
		return
	}
	spec := unix.NsecToTimespec(ts.UnixNano())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &spec); err != nil {
		tv := unix.NsecToTimeval(ts.UnixNano())
		if err2 := unix.Settimeofday(&tv); err2 != nil {
			s.log.Warn("cannot set the system clock", "err", errors.Join(err, err2))
		}
	}
}

func (s *Server) envs(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.st.Env())
}

// trackingWriter records whether a response was started.
type trackingWriter struct {
	http.ResponseWriter
	wrote bool
}

func (t *trackingWriter) WriteHeader(code int) {
	t.wrote = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(p []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// Flush keeps streaming responses (Connect server streams) flushing.
func (t *trackingWriter) Flush() {
	t.wrote = true
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"code": code, "message": msg})
}
