package server

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/build"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/oci"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
)

// BuildConfig enables E2B's template build API (Template.build of the
// SDKs); without it those routes answer 501.
type BuildConfig struct {
	Manager *build.Manager
	DataDir string // uploaded COPY sources go to <DataDir>/build-files
	// UploadKey signs upload URLs; New fills a random one (URLs then end
	// with the process).
	UploadKey []byte
	UploadTTL time.Duration    // lifetime of an upload URL (default 1 hour)
	Now       func() time.Time // tests
}

func (b *BuildConfig) fill() {
	if len(b.UploadKey) == 0 {
		b.UploadKey = make([]byte, 32)
		_, _ = rand.Read(b.UploadKey)
	}
	if b.UploadTTL <= 0 {
		b.UploadTTL = time.Hour
	}
}

// buildRoutes registers the template build API.
func (s *Server) buildRoutes() {
	m := s.mux
	m.HandleFunc("POST /v3/templates", s.auth(s.withBuilds(s.requestBuild)))
	m.HandleFunc("GET /templates/{templateID}/files/{hash}", s.auth(s.withBuilds(s.filesLink)))
	m.HandleFunc("POST /v2/templates/{templateID}/builds/{buildID}", s.auth(s.withBuilds(s.startBuild)))
	m.HandleFunc("GET /templates/{templateID}/builds/{buildID}/status", s.auth(s.withBuilds(s.buildStatus)))
	m.HandleFunc("GET /templates/aliases/{alias}", s.auth(s.templateByAlias))
	m.HandleFunc("GET /templates/{templateID}", s.auth(s.templateWithBuilds))
	// Older and other build routes of the E2B API answer 501 rather than
	// a 404 or 405 the SDKs would misread.
	for _, p := range []string{"POST /templates", "POST /v2/templates", "POST /templates/{templateID}",
		"POST /templates/{templateID}/builds/{buildID}", "POST /templates/tags", "DELETE /templates/tags",
		"GET /templates/{templateID}/builds/{buildID}/logs", "PATCH /templates/{templateID}",
		"PATCH /v2/templates/{templateID}"} {
		m.HandleFunc(p, s.auth(notImplemented))
	}
}

func (s *Server) withBuilds(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.builds == nil || s.builds.Manager == nil {
			errhttp.Write(w, http.StatusNotImplemented, "template builds are not enabled on this server")
			return
		}
		h(w, r)
	}
}

type buildRequestV3 struct {
	Name          *string  `json:"name"`
	Alias         *string  `json:"alias"`
	Tags          []string `json:"tags"`
	CPUCount      *int32   `json:"cpuCount"`
	MemoryMB      *int32   `json:"memoryMB"`
	MinFreeDiskMB *int32   `json:"minFreeDiskMb"`
	TeamID        *string  `json:"teamID"`
}

type buildResponseV3 struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Public     bool     `json:"public"`
	Aliases    []string `json:"aliases"`
	Names      []string `json:"names"`
	Tags       []string `json:"tags"`
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
		return "", 0, 0, fmt.Errorf("name is required: %w", errdefs.ErrInvalidArgument)
	}
	if body.Name != nil && body.Alias != nil && *body.Alias != "" && *body.Alias != name {
		return "", 0, 0, fmt.Errorf("name and alias differ: %w", errdefs.ErrInvalidArgument)
	}
	if _, tag, ok := strings.Cut(name, ":"); ok {
		return "", 0, 0, fmt.Errorf("template tags (%q in name) are not supported by this server: %w", tag, errdefs.ErrNotImplemented)
	}
	if len(body.Tags) > 0 {
		return "", 0, 0, fmt.Errorf("template tags are not supported by this server: %w", errdefs.ErrNotImplemented)
	}
	if !template.ValidName(name) {
		return "", 0, 0, fmt.Errorf("name %q: want lower-case letters, digits, '.', '_', '-' (max 63): %w", name, errdefs.ErrInvalidArgument)
	}
	if body.MinFreeDiskMB != nil {
		return "", 0, 0, fmt.Errorf("minFreeDiskMb is not supported by this server: %w", errdefs.ErrNotImplemented)
	}
	if body.CPUCount != nil {
		if *body.CPUCount < 1 {
			return "", 0, 0, fmt.Errorf("cpuCount must be at least 1: %w", errdefs.ErrInvalidArgument)
		}
		cpu = int(*body.CPUCount)
	}
	if body.MemoryMB != nil {
		if *body.MemoryMB < MinBuildMemoryMB {
			return "", 0, 0, fmt.Errorf("memoryMB must be at least %d: %w", MinBuildMemoryMB, errdefs.ErrInvalidArgument)
		}
		mem = int(*body.MemoryMB)
	}
	return name, cpu, mem, nil
}

// requestBuild is POST /v3/templates: 202 with the template's ID (kept
// across rebuilds of the same name by the same team) and a new build ID.
func (s *Server) requestBuild(w http.ResponseWriter, r *http.Request) {
	var body buildRequestV3
	if err := decode(r, &body, true); err != nil {
		s.writeBodyErr(w, r, err)
		return
	}
	if body.TeamID != nil && *body.TeamID != "" && *body.TeamID != team(r) {
		s.fail(w, r, fmt.Errorf("teamID is not the API key's team: %w", errdefs.ErrInvalidArgument))
		return
	}
	name, cpu, mem, err := parseBuildRequest(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	b, err := s.db.RequestBuild(r.Context(), team(r), name, cpu, mem)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusAccepted, buildResponseV3{TemplateID: b.TemplateID, BuildID: b.ID,
		Aliases: []string{name}, Names: []string{name}, Tags: []string{}})
}

// ownTemplate answers 404 unless templateID is the caller's (built, or
// with a build): other teams' templates do not exist for it.
func (s *Server) ownTemplate(w http.ResponseWriter, r *http.Request, templateID string) bool {
	ok, err := s.db.TeamOwnsTemplateID(r.Context(), team(r), templateID)
	if err != nil {
		s.fail(w, r, err)
		return false
	}
	if !ok {
		s.fail(w, r, fmt.Errorf("template '%s' not found: %w", templateID, errdefs.ErrNotFound))
		return false
	}
	return true
}

type filesLinkJSON struct {
	Present bool   `json:"present"`
	URL     string `json:"url,omitempty"`
}

// filesLink is GET /templates/{templateID}/files/{hash}: 201 with present
// (the caller's team uploaded it already) or an upload URL.
func (s *Server) filesLink(w http.ResponseWriter, r *http.Request) {
	tid, hash := r.PathValue("templateID"), r.PathValue("hash")
	if !filesHashRE.MatchString(hash) {
		s.fail(w, r, fmt.Errorf("files hash %q: want 64 lower-case hex digits: %w", hash, errdefs.ErrInvalidArgument))
		return
	}
	if !s.ownTemplate(w, r, tid) {
		return
	}
	out := filesLinkJSON{Present: s.builds.HasUpload(team(r), hash)}
	if out.Present { // the SDK is about to build with it: keep it (see RemoveStaleUploads)
		now := s.builds.now()
		_ = os.Chtimes(s.builds.uploadPath(team(r), hash), now, now)
	}
	// Always hand out a URL: the SDK uploads again when a COPY forces it.
	out.URL = s.builds.uploadURL(r, team(r), tid, hash)
	errhttp.WriteJSON(w, http.StatusCreated, out)
}

type buildStartV2 struct {
	FromImage         *string          `json:"fromImage"`
	FromTemplate      *string          `json:"fromTemplate"`
	FromImageRegistry *json.RawMessage `json:"fromImageRegistry"`
	Force             *bool            `json:"force"`
	Steps             []stepJSON       `json:"steps"`
	StartCmd          *string          `json:"startCmd"`
	ReadyCmd          *string          `json:"readyCmd"`
}

type stepJSON struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash *string  `json:"filesHash"`
	Force     *bool    `json:"force"`
}

type registryJSON struct {
	Type     string `json:"type"`
	Username string `json:"username"`
	Password string `json:"password"`
}

// toBuildSpec converts and checks the wire request; has reports whether
// the caller's team uploaded a COPY step's files.
func toBuildSpec(body buildStartV2, has func(hash string) bool) (build.Spec, error) {
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
	if body.FromImageRegistry != nil && string(*body.FromImageRegistry) != "null" {
		var reg registryJSON
		if err := json.Unmarshal(*body.FromImageRegistry, &reg); err != nil {
			return sp, fmt.Errorf("fromImageRegistry: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		switch reg.Type {
		case "registry":
			if reg.Username == "" || reg.Password == "" {
				return sp, fmt.Errorf("fromImageRegistry: username and password are required: %w", errdefs.ErrInvalidArgument)
			}
			sp.Registry = &oci.Credentials{Username: reg.Username, Password: reg.Password}
		case "aws", "gcp":
			return sp, fmt.Errorf("fromImageRegistry of type %q is not supported by this server (use type \"registry\"): %w",
				reg.Type, errdefs.ErrNotImplemented)
		default:
			return sp, fmt.Errorf("fromImageRegistry: unknown type %q: %w", reg.Type, errdefs.ErrInvalidArgument)
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
				return sp, fmt.Errorf("step %d (COPY): filesHash must be 64 lower-case hex digits: %w", i+1, errdefs.ErrInvalidArgument)
			case !has(s.FilesHash):
				return sp, fmt.Errorf("step %d (COPY): files %s were never uploaded (GET /templates/{templateID}/files/%s): %w",
					i+1, s.FilesHash, s.FilesHash, errdefs.ErrInvalidArgument)
			}
		}
		sp.Steps = append(sp.Steps, s)
	}
	return sp, nil
}

// startBuild is POST /v2/templates/{templateID}/builds/{buildID}: 202 once
// the steps are accepted; the build runs in the background.
func (s *Server) startBuild(w http.ResponseWriter, r *http.Request) {
	b, err := s.db.GetBuild(r.Context(), team(r), r.PathValue("templateID"), r.PathValue("buildID"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var body buildStartV2
	if err := decode(r, &body, true); err != nil {
		s.writeBodyErr(w, r, err)
		return
	}
	spec, err := toBuildSpec(body, func(h string) bool { return s.builds.HasUpload(team(r), h) })
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.builds.touchUploads(team(r), spec)
	if err := s.builds.Manager.Start(r.Context(), b, spec); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

type logEntryJSON struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

type reasonJSON struct {
	Message    string         `json:"message"`
	Step       string         `json:"step,omitempty"`
	LogEntries []logEntryJSON `json:"logEntries"`
}

type buildInfoJSON struct {
	TemplateID string         `json:"templateID"`
	BuildID    string         `json:"buildID"`
	Status     string         `json:"status"`
	LogEntries []logEntryJSON `json:"logEntries"`
	Logs       []string       `json:"logs"`
	Reason     *reasonJSON    `json:"reason,omitempty"`
}

var logLevels = map[string]int{"debug": 0, "info": 1, "warn": 2, "error": 3}

// buildStatus is GET /templates/{templateID}/builds/{buildID}/status:
// the state and the log entries from logsOffset on (at most limit, of at
// least level).
func (s *Server) buildStatus(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, limit, minLevel := 0, 100, 0
	if v := q.Get("logsOffset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			s.fail(w, r, fmt.Errorf("logsOffset must be a non-negative integer: %w", errdefs.ErrInvalidArgument))
			return
		}
		offset = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 100 {
			s.fail(w, r, fmt.Errorf("limit must be an integer from 0 to 100: %w", errdefs.ErrInvalidArgument))
			return
		}
		limit = n
	}
	if v := q.Get("level"); v != "" {
		l, ok := logLevels[v]
		if !ok {
			s.fail(w, r, fmt.Errorf("level must be debug, info, warn or error: %w", errdefs.ErrInvalidArgument))
			return
		}
		minLevel = l
	}
	b, err := s.db.GetBuild(r.Context(), team(r), r.PathValue("templateID"), r.PathValue("buildID"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	entries := s.builds.Manager.Logs(b.ID, offset)
	if len(entries) > limit {
		entries = entries[:limit]
	}
	out := buildInfoJSON{TemplateID: b.TemplateID, BuildID: b.ID, Status: b.Status,
		LogEntries: []logEntryJSON{}, Logs: []string{}}
	for _, e := range entries {
		// logsOffset counts every entry; the SDK never sends level.
		if logLevels[e.Level] < minLevel {
			continue
		}
		out.LogEntries = append(out.LogEntries, logEntryJSON{Timestamp: e.Time, Level: e.Level, Message: e.Message, Step: e.Step})
	}
	if b.Status == store.BuildError {
		out.Reason = &reasonJSON{Message: b.Reason, Step: b.ReasonStep, LogEntries: []logEntryJSON{}}
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}

type aliasJSON struct {
	TemplateID string `json:"templateID"`
	Public     bool   `json:"public"`
}

// templateByAlias is GET /templates/aliases/{alias}: 200 for a template
// the caller may use (shared ones are public), 404 otherwise (another
// team's template too, like an unknown one).
func (s *Server) templateByAlias(w http.ResponseWriter, r *http.Request) {
	alias := r.PathValue("alias")
	t, err := s.db.GetTeamTemplate(r.Context(), team(r), alias)
	if err == nil && t.Name != alias {
		err = fmt.Errorf("template alias '%s' not found: %w", alias, errdefs.ErrNotFound)
	}
	if err != nil {
		if errdefs.IsNotFound(err) {
			err = fmt.Errorf("template alias '%s' not found: %w", alias, errdefs.ErrNotFound)
		}
		s.fail(w, r, err)
		return
	}
	owner, err := s.db.TemplateOwner(r.Context(), t.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusOK, aliasJSON{TemplateID: t.ID, Public: owner == ""})
}

// listTeamTemplates is GET /templates and /v2/templates: shared templates
// and the caller's own.
func (s *Server) listTeamTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := s.db.ListTeamTemplates(r.Context(), team(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]templateJSON, 0, len(ts))
	for _, t := range ts {
		out = append(out, toTemplate(t))
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}

// othersTemplate reports whether idOrName is a template of another team
// than the caller's.
func (s *Server) othersTemplate(r *http.Request, idOrName string) bool {
	t, err := s.db.GetTemplate(r.Context(), idOrName)
	if err != nil {
		return false
	}
	owner, err := s.db.TemplateOwner(r.Context(), t.ID)
	return err == nil && owner != "" && owner != team(r)
}

// deleteTeamTemplate is DELETE /templates/{id}: the caller's own built
// template (and its files when no sandbox uses them), else a snapshot as
// before (the SDK deletes snapshots this way).
func (s *Server) deleteTeamTemplate(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	t, err := s.db.DeleteTeamTemplate(r.Context(), team(r), id)
	switch {
	case errdefs.IsNotFound(err) && s.othersTemplate(r, id):
		// Exactly what an unknown ID gets (deleteTemplate would say it
		// exists): a snapshot of the caller's, else 404.
		err := s.orch.DeleteSnapshot(r.Context(), team(r), id)
		if errdefs.IsNotFound(err) {
			err = fmt.Errorf("template or snapshot '%s' not found: %w", id, errdefs.ErrNotFound)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	case errdefs.IsNotFound(err), errors.Is(err, store.ErrSharedTemplate):
		s.deleteTemplate(w, r) // snapshots, and the answers for shared templates and unknown IDs
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	s.freeTemplateFiles(r.Context(), t)
	w.WriteHeader(http.StatusNoContent)
}

type templateBuildJSON struct {
	BuildID     string     `json:"buildID"`
	Status      string     `json:"status"`
	CPUCount    int        `json:"cpuCount"`
	MemoryMB    int        `json:"memoryMB"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	FinishedAt  *time.Time `json:"finishedAt,omitempty"`
	EnvdVersion string     `json:"envdVersion,omitempty"`
}

type templateWithBuildsJSON struct {
	TemplateID    string              `json:"templateID"`
	Public        bool                `json:"public"`
	Aliases       []string            `json:"aliases"`
	Names         []string            `json:"names"`
	CreatedAt     time.Time           `json:"createdAt"`
	UpdatedAt     time.Time           `json:"updatedAt"`
	LastSpawnedAt *time.Time          `json:"lastSpawnedAt"`
	SpawnCount    int                 `json:"spawnCount"`
	Builds        []templateBuildJSON `json:"builds"`
}

// templateWithBuilds is GET /templates/{templateID}: a template the caller
// may use, with its builds over the API (the caller's own); 404 for
// another team's, like an unknown one.
func (s *Server) templateWithBuilds(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("templateID")
	t, err := s.db.GetTeamTemplate(r.Context(), team(r), id)
	if err != nil && !errdefs.IsNotFound(err) {
		s.fail(w, r, err)
		return
	}
	builds, berr := s.db.ListBuilds(r.Context(), team(r), id)
	if berr != nil {
		s.fail(w, r, berr)
		return
	}
	if err != nil && len(builds) == 0 {
		s.fail(w, r, fmt.Errorf("template '%s' not found: %w", id, errdefs.ErrNotFound))
		return
	}
	out := templateWithBuildsJSON{TemplateID: id, Aliases: []string{}, Names: []string{}, Builds: []templateBuildJSON{}}
	if err == nil {
		owner, oerr := s.db.TemplateOwner(r.Context(), t.ID)
		if oerr != nil {
			s.fail(w, r, oerr)
			return
		}
		out = templateWithBuildsJSON{TemplateID: t.ID, Public: owner == "", Aliases: []string{t.Name}, Names: []string{t.Name},
			CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, LastSpawnedAt: t.LastSpawnedAt, SpawnCount: t.SpawnCount,
			Builds: []templateBuildJSON{}}
		if len(builds) == 0 && t.BuildID != "" { // a CLI build
			out.Builds = append(out.Builds, templateBuildJSON{BuildID: t.BuildID, Status: store.BuildReady,
				CPUCount: t.CPUCount, MemoryMB: t.MemoryMB, CreatedAt: t.UpdatedAt, UpdatedAt: t.UpdatedAt,
				FinishedAt: &t.UpdatedAt, EnvdVersion: t.EnvdVersion})
		}
	} else {
		out.Aliases, out.Names = []string{builds[0].Name}, []string{builds[0].Name}
		out.CreatedAt, out.UpdatedAt = builds[len(builds)-1].CreatedAt, builds[0].UpdatedAt
	}
	for _, b := range builds {
		bj := templateBuildJSON{BuildID: b.ID, Status: b.Status, CPUCount: b.CPUCount, MemoryMB: b.MemoryMB,
			CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt}
		if b.Status == store.BuildReady || b.Status == store.BuildError {
			fin := b.UpdatedAt
			bj.FinishedAt = &fin
		}
		out.Builds = append(out.Builds, bj)
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}
