package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/orchestrator"
)

// Default timeouts in seconds when a body omits one.
const (
	defaultTimeoutV1      = 15
	defaultTimeoutV2      = 300
	defaultResumeTimeout  = 15
	defaultConnectTimeout = 300
	defaultForkTimeout    = 15
	maxRefreshSeconds     = 3600
)

func (s *Server) createV1(w http.ResponseWriter, r *http.Request) {
	s.create(w, r, defaultTimeoutV1, false)
}

// createV2 always issues an envd access token: NewSandboxV2 has no
// `secure` field because "all system communication is always secured".
func (s *Server) createV2(w http.ResponseWriter, r *http.Request) {
	s.create(w, r, defaultTimeoutV2, true)
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, defTimeout int32, alwaysSecure bool) {
	var body rest.NewSandbox
	fields, err := decodeFields(r, &body, true)
	if err != nil {
		s.writeBodyErr(w, r, err)
		return
	}
	if body.TemplateID == "" {
		s.fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "templateID is required"))
		return
	}
	timeout := defTimeout
	if body.Timeout != nil {
		timeout = *body.Timeout
	}
	autoPause := body.AutoPause != nil && *body.AutoPause
	autoResume := false
	if ar := body.AutoResume; ar != nil {
		if !hasField(fields["autoResume"], "enabled") {
			s.fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "autoResume.enabled is required"))
			return
		}
		autoResume = ar.Enabled
		if autoResume && !autoPause {
			s.fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "autoResume needs autoPause: true"))
			return
		}
	}
	// autoPauseMemory: false makes the auto-pause keep only the files;
	// such a pause is never resumed by traffic.
	autoPauseFS := autoPause && body.AutoPauseMemory != nil && !*body.AutoPauseMemory
	if autoPauseFS && autoResume {
		s.fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "autoResume cannot be combined with autoPauseMemory: false (a filesystem-only pause is resumed only with connect)"))
		return
	}
	for _, f := range []struct {
		name string
		raw  []byte
	}{{"mcp", fields["mcp"]}, {"iam", fields["iam"]}} {
		if !unset(f.raw) {
			s.fail(w, r, errUnsupported(f.name))
			return
		}
	}
	req := orchestrator.CreateRequest{
		Team:          team(r),
		Template:      body.TemplateID,
		Timeout:       time.Duration(timeout) * time.Second,
		Metadata:      deref(body.Metadata),
		EnvVars:       deref(body.EnvVars),
		Secure:        alwaysSecure || (body.Secure != nil && *body.Secure),
		AllowInternet: body.AllowInternetAccess == nil || *body.AllowInternetAccess,
		AutoPause:     autoPause,
		AutoResume:    autoResume,
		AutoPauseFS:   autoPauseFS,
	}
	if err := s.parseNetwork(r.Context(), fields["network"], &req); err != nil {
		s.fail(w, r, err)
		return
	}
	vols, release, err := s.vols.Mounts(r.Context(), team(r), body.VolumeMounts)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req.Volumes = vols
	sb, err := s.orch.Create(r.Context(), req)
	if err != nil {
		release()
		s.fail(w, r, err)
		return
	}
	if s.vols.Hold(sb.ID, release) {
		if _, err := s.orch.Get(r.Context(), sb.Team, sb.ID); err != nil {
			s.vols.Release(sb.ID) // it died before the hold: OnRemove has run
		}
	}
	errhttp.WriteJSON(w, http.StatusCreated, toSandbox(sb, s.envdOf(r.Context(), sb)))
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, id string) {
	sb, err := s.orch.Get(r.Context(), team(r), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusOK, toDetail(sb, s.envdOf(r.Context(), sb)))
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request, id string) {
	if err := s.orch.Kill(r.Context(), team(r), id); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, id string) {
	var body rest.SandboxTimeoutRequest
	fields, err := decodeFields(r, &body, true)
	if err != nil {
		s.writeBodyErr(w, r, err)
		return
	}
	if !present(fields["timeout"]) {
		s.fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "timeout is required"))
		return
	}
	if err := s.orch.SetTimeout(r.Context(), team(r), id, seconds(body.Timeout)); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) refresh(w http.ResponseWriter, r *http.Request, id string) {
	var body rest.SandboxRefreshRequest
	if err := decode(r, &body, false); err != nil {
		s.writeBodyErr(w, r, err)
		return
	}
	var d int
	if body.Duration != nil {
		d = *body.Duration
	}
	if d < 0 || d > maxRefreshSeconds {
		s.fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "duration must be between 0 and %d", maxRefreshSeconds))
		return
	}
	if err := s.orch.Refresh(r.Context(), team(r), id, seconds(int32(d))); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request, id string) {
	var body rest.SandboxPauseRequest
	if err := decode(r, &body, false); err != nil {
		s.writeBodyErr(w, r, err)
		return
	}
	pause := s.orch.Pause
	if body.Memory != nil && !*body.Memory {
		pause = s.orch.PauseFilesystem // memory: false keeps only the files
	}
	if err := pause(r.Context(), team(r), id); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request, id string) {
	var body resumeRequest
	if err := decode(r, &body, false); err != nil {
		s.writeBodyErr(w, r, err)
		return
	}
	if body.Memory != nil && !*body.Memory {
		s.fail(w, r, errUnsupported("memory: false (resume from disk state only)"))
		return
	}
	timeout := int32(defaultResumeTimeout)
	if body.Timeout != nil {
		timeout = *body.Timeout
	}
	sb, err := s.orch.Resume(r.Context(), team(r), id, seconds(timeout))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusCreated, toSandbox(sb, s.envdOf(r.Context(), sb)))
}

func (s *Server) connectV1(w http.ResponseWriter, r *http.Request, id string) {
	s.connect(w, r, id, true)
}

func (s *Server) connectV2(w http.ResponseWriter, r *http.Request, id string) {
	s.connect(w, r, id, false)
}

// connect answers 200 when the sandbox was running, 201 when it was resumed.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, id string, required bool) {
	var body rest.ConnectSandbox
	fields, err := decodeFields(r, &body, required)
	if err != nil {
		s.writeBodyErr(w, r, err)
		return
	}
	timeout := int32(defaultConnectTimeout)
	if present(fields["timeout"]) {
		timeout = body.Timeout
	} else if required {
		s.fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "timeout is required"))
		return
	}
	sb, resumed, err := s.orch.Connect(r.Context(), team(r), id, seconds(timeout))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if resumed {
		status = http.StatusCreated
	}
	errhttp.WriteJSON(w, status, toSandbox(sb, s.envdOf(r.Context(), sb)))
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	var bounds [2]time.Time // start, end; zero: open
	for i, p := range []string{"start", "end"} {
		if v := q.Get(p); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || n > maxUnixSeconds {
				s.fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "%s must be unix seconds", p))
				return
			}
			bounds[i] = time.Unix(n, 0)
		}
	}
	if !bounds[0].IsZero() && !bounds[1].IsZero() && bounds[1].Before(bounds[0]) {
		s.fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "end is before start"))
		return
	}
	if !bounds[1].IsZero() {
		bounds[1] = bounds[1].Add(time.Second - time.Nanosecond) // the whole second
	}
	ms, err := s.orch.Metrics(r.Context(), team(r), id, bounds[0], bounds[1])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]rest.SandboxMetric, 0, len(ms))
	for _, m := range ms {
		out = append(out, toMetric(m))
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}

func seconds(n int32) time.Duration { return time.Duration(n) * time.Second }

// maxUnixSeconds bounds a time in unix seconds from a query (year 9999),
// well inside time.Time's range.
const maxUnixSeconds = 253402300799
