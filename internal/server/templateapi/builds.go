package templateapi

import (
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/build"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/oci"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
)

// buildRequestV3 is TemplateBuildRequestV3 with minFreeDiskMb, which SDKs
// of other E2B API versions send (refused: not supported).
type buildRequestV3 struct {
	rest.TemplateBuildRequestV3
	MinFreeDiskMB *int32 `json:"minFreeDiskMb"`
}

// MinBuildMemoryMB is the smallest memoryMB a build may ask for.
const MinBuildMemoryMB = 128

// parseBuildRequest validates POST /v3/templates.
func parseBuildRequest(body buildRequestV3) (name string, cpu, mem int, err error) {
	switch {
	case body.Name != nil && *body.Name != "":
		name = *body.Name
	case body.Alias != nil && *body.Alias != "":
		name = *body.Alias
	default:
		return "", 0, 0, errdefs.Publicf(errdefs.ErrInvalidArgument, "name is required")
	}
	if body.Name != nil && body.Alias != nil && *body.Alias != "" && *body.Alias != name {
		return "", 0, 0, errdefs.Publicf(errdefs.ErrInvalidArgument, "name and alias differ")
	}
	if _, tag, ok := strings.Cut(name, ":"); ok {
		return "", 0, 0, errdefs.Publicf(errdefs.ErrNotImplemented, "template tags (%q in name) are not supported by this server", tag)
	}
	if len(body.Tags) > 0 {
		return "", 0, 0, errdefs.Publicf(errdefs.ErrNotImplemented, "template tags are not supported by this server")
	}
	if !template.ValidName(name) {
		return "", 0, 0, errdefs.Publicf(errdefs.ErrInvalidArgument, "name %q: want lower-case letters, digits, '.', '_', '-' (max 63)", name)
	}
	if body.MinFreeDiskMB != nil {
		return "", 0, 0, errdefs.Publicf(errdefs.ErrNotImplemented, "minFreeDiskMb is not supported by this server")
	}
	if body.CpuCount != nil {
		if *body.CpuCount < 1 {
			return "", 0, 0, errdefs.Publicf(errdefs.ErrInvalidArgument, "cpuCount must be at least 1")
		}
		cpu = int(*body.CpuCount)
	}
	if body.MemoryMB != nil {
		if *body.MemoryMB < MinBuildMemoryMB {
			return "", 0, 0, errdefs.Publicf(errdefs.ErrInvalidArgument, "memoryMB must be at least %d", MinBuildMemoryMB)
		}
		mem = int(*body.MemoryMB)
	}
	return name, cpu, mem, nil
}

// RequestBuild is POST /v3/templates: 202 with the template's ID (kept
// across rebuilds of the same name by the same team) and a new build ID.
func (a *API) RequestBuild(w http.ResponseWriter, r *http.Request) {
	var body buildRequestV3
	if !a.d.Decode(w, r, &body) {
		return
	}
	if body.TeamID != nil && *body.TeamID != "" && *body.TeamID != a.d.Team(r) {
		a.d.Fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "teamID is not the API key's team"))
		return
	}
	name, cpu, mem, err := parseBuildRequest(body)
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	b, err := a.d.Store.RequestBuild(r.Context(), a.d.Team(r), name, cpu, mem)
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusAccepted, rest.TemplateRequestResponseV3{TemplateID: b.TemplateID, BuildID: b.ID,
		Aliases: []string{name}, Names: []string{name}, Tags: []string{}})
}

// ownTemplate answers 404 unless templateID is the caller's (built, or
// with a build): other teams' templates do not exist for it.
func (a *API) ownTemplate(w http.ResponseWriter, r *http.Request, templateID string) bool {
	ok, err := a.d.Store.TeamOwnsTemplateID(r.Context(), a.d.Team(r), templateID)
	if err != nil {
		a.d.Fail(w, r, err)
		return false
	}
	if !ok {
		a.d.Fail(w, r, errdefs.Publicf(errdefs.ErrNotFound, "template '%s' not found", templateID))
		return false
	}
	return true
}

// FilesLink is GET /templates/{templateID}/files/{hash}: 201 with present
// (the caller's team uploaded it already) or an upload URL.
func (a *API) FilesLink(w http.ResponseWriter, r *http.Request) {
	tid, hash := r.PathValue("templateID"), r.PathValue("hash")
	if !filesHashRE.MatchString(hash) {
		a.d.Fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "files hash %q: want 64 lower-case hex digits", hash))
		return
	}
	if !a.ownTemplate(w, r, tid) {
		return
	}
	out := rest.TemplateBuildFileUpload{Present: a.cfg.HasUpload(a.d.Team(r), hash)}
	if out.Present { // the SDK is about to build with it: keep it (see RemoveStaleUploads)
		now := a.cfg.now()
		_ = os.Chtimes(a.cfg.uploadPath(a.d.Team(r), hash), now, now)
	}
	// Always hand out a URL: the SDK uploads again when a COPY forces it.
	out.Url = optional(a.cfg.uploadURL(r, a.d.Team(r), tid, hash))
	errhttp.WriteJSON(w, http.StatusCreated, out)
}

// toBuildSpec converts and checks the wire request; has reports whether
// the caller's team uploaded a COPY step's files.
func toBuildSpec(body rest.TemplateBuildStartV2, has func(hash string) bool) (build.Spec, error) {
	var sp build.Spec
	if body.FromImage != nil {
		sp.FromImage = *body.FromImage
	}
	if body.FromTemplate != nil {
		sp.FromTemplate = *body.FromTemplate
	}
	if body.Force != nil {
		sp.Force = *body.Force
	}
	if body.StartCmd != nil {
		sp.StartCmd = *body.StartCmd
	}
	if body.ReadyCmd != nil {
		sp.ReadyCmd = *body.ReadyCmd
	}
	if body.FromImageRegistry != nil {
		raw, err := body.FromImageRegistry.MarshalJSON()
		var reg rest.GeneralRegistry // its type says which registry the union holds
		if err == nil {
			err = json.Unmarshal(raw, &reg)
		}
		if err != nil {
			return sp, errdefs.Publicf(errdefs.ErrInvalidArgument, "fromImageRegistry: %v", err)
		}
		switch reg.Type {
		case "registry":
			if reg.Username == "" || reg.Password == "" {
				return sp, errdefs.Publicf(errdefs.ErrInvalidArgument, "fromImageRegistry: username and password are required")
			}
			sp.Registry = &oci.Credentials{Username: reg.Username, Password: reg.Password}
		case "aws", "gcp":
			return sp, errdefs.Publicf(errdefs.ErrNotImplemented, "fromImageRegistry of type %q is not supported by this server (use type \"registry\")", reg.Type)
		default:
			return sp, errdefs.Publicf(errdefs.ErrInvalidArgument, "fromImageRegistry: unknown type %q", reg.Type)
		}
	}
	for i, st := range body.Steps {
		s := build.Step{Type: st.Type, Args: st.Args}
		if st.Force != nil {
			s.Force = *st.Force
		}
		if st.FilesHash != nil {
			s.FilesHash = *st.FilesHash
		}
		if st.Type == "COPY" {
			switch {
			case !filesHashRE.MatchString(s.FilesHash):
				return sp, errdefs.Publicf(errdefs.ErrInvalidArgument, "step %d (COPY): filesHash must be 64 lower-case hex digits", i+1)
			case !has(s.FilesHash):
				return sp, errdefs.Publicf(errdefs.ErrInvalidArgument, "step %d (COPY): files %s were never uploaded (GET /templates/{templateID}/files/%s)", i+1, s.FilesHash, s.FilesHash)
			}
		}
		sp.Steps = append(sp.Steps, s)
	}
	return sp, nil
}

// StartBuild is POST /v2/templates/{templateID}/builds/{buildID}: 202 once
// the steps are accepted; the build runs in the background.
func (a *API) StartBuild(w http.ResponseWriter, r *http.Request) {
	b, err := a.d.Store.GetBuild(r.Context(), a.d.Team(r), r.PathValue("templateID"), r.PathValue("buildID"))
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	var body rest.TemplateBuildStartV2
	if !a.d.Decode(w, r, &body) {
		return
	}
	spec, err := toBuildSpec(body, func(h string) bool { return a.cfg.HasUpload(a.d.Team(r), h) })
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	a.cfg.touchUploads(a.d.Team(r), spec)
	if err := a.cfg.Manager.Start(r.Context(), b, spec); err != nil {
		a.d.Fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

var logLevels = map[string]int{"debug": 0, "info": 1, "warn": 2, "error": 3}

// BuildStatus is GET /templates/{templateID}/builds/{buildID}/status:
// the state and the log entries from logsOffset on (at most limit, of at
// least level).
func (a *API) BuildStatus(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, limit, minLevel := 0, 100, 0
	if v := q.Get("logsOffset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			a.d.Fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "logsOffset must be a non-negative integer"))
			return
		}
		offset = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 100 {
			a.d.Fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "limit must be an integer from 0 to 100"))
			return
		}
		limit = n
	}
	if v := q.Get("level"); v != "" {
		l, ok := logLevels[v]
		if !ok {
			a.d.Fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "level must be debug, info, warn or error"))
			return
		}
		minLevel = l
	}
	b, err := a.d.Store.GetBuild(r.Context(), a.d.Team(r), r.PathValue("templateID"), r.PathValue("buildID"))
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	entries := a.cfg.Manager.Logs(b.ID, offset)
	if len(entries) > limit {
		entries = entries[:limit]
	}
	out := rest.TemplateBuildInfo{TemplateID: b.TemplateID, BuildID: b.ID, Status: rest.TemplateBuildStatus(b.Status),
		LogEntries: []rest.BuildLogEntry{}, Logs: []string{}}
	for _, e := range entries {
		// logsOffset counts every entry; the SDK never sends level.
		if logLevels[e.Level] < minLevel {
			continue
		}
		out.LogEntries = append(out.LogEntries, rest.BuildLogEntry{Timestamp: e.Time, Level: rest.LogLevel(e.Level),
			Message: e.Message, Step: optional(e.Step)})
	}
	if b.Status == store.BuildError {
		out.Reason = &rest.BuildStatusReason{Message: b.Reason, Step: optional(b.ReasonStep)}
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}
