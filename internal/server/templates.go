package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/server/templateapi"
	"github.com/moatsh/moat/internal/store"
)

// BuildConfig enables E2B's template build API (Template.build of the
// SDKs), served by templateapi; without it those routes answer 501.
type BuildConfig = templateapi.Config

// UploadMaxAge is how long an uploaded COPY source stays after its last use.
const UploadMaxAge = templateapi.UploadMaxAge

// buildRoutes registers the template API: the build routes (templateapi)
// and the template lookups the SDKs make around a build.
func (s *Server) buildRoutes() {
	if s.builds != nil {
		s.templates = templateapi.New(s.builds, templateapi.Deps{Store: s.db, Log: s.log, Team: team, Fail: s.fail,
			Decode: s.decodeBody})
	}
	m := s.mux
	m.HandleFunc("POST /v3/templates", s.auth(s.withBuilds(s.templates.RequestBuild)))
	m.HandleFunc("GET /templates/{templateID}/files/{hash}", s.auth(s.withBuilds(s.templates.FilesLink)))
	m.HandleFunc("POST /v2/templates/{templateID}/builds/{buildID}", s.auth(s.withBuilds(s.templates.StartBuild)))
	m.HandleFunc("GET /templates/{templateID}/builds/{buildID}/status", s.auth(s.withBuilds(s.templates.BuildStatus)))
	// GET /templates/aliases/{alias} and GET /templates/{templateID}/tags
	// share their shape, which ServeMux cannot register twice.
	m.HandleFunc("GET /templates/{a}/{b}", s.auth(s.templateAliasOrTags))
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

// defaultTag is the tag E2B gives every build that names none: the one
// a create without a tag uses.
const defaultTag = "default"

// templateTags is GET /templates/{templateID}/tags (the SDK's
// Template.getTags): this server keeps no tags but E2B's implicit
// "default", on the template's current build (assigning tags is refused
// with 501, see POST /templates/tags). Another team's template is 404.
func (s *Server) templateTags(w http.ResponseWriter, r *http.Request, id string) {
	t, err := s.db.GetTeamTemplate(r.Context(), team(r), id)
	if err != nil {
		if errdefs.IsNotFound(err) {
			err = errdefs.Publicf(errdefs.ErrNotFound, "template '%s' not found", id)
		}
		s.fail(w, r, err)
		return
	}
	tpl := toTemplate(t)
	errhttp.WriteJSON(w, http.StatusOK, []rest.TemplateTag{{Tag: defaultTag, BuildID: tpl.BuildID, CreatedAt: tpl.UpdatedAt}})
}

// withBuilds is h of the build API, or 501 when builds are off (h is then
// a method value of a nil *templateapi.API, never called).
func (s *Server) withBuilds(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.templates == nil || s.builds.Manager == nil {
			s.fail(w, r, errdefs.Publicf(errdefs.ErrNotImplemented, "template builds are not enabled on this server"))
			return
		}
		h(w, r)
	}
}

// serveUpload hands PUT <UploadPathPrefix>{hash} to the build API, outside
// the API's body cap and auth; it reports whether the request was an upload.
func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request) bool {
	if !strings.HasPrefix(r.URL.Path, templateapi.UploadPathPrefix) {
		return false
	}
	if s.templates == nil {
		s.fail(w, r, errdefs.Publicf(errdefs.ErrNotImplemented, "template builds are not enabled on this server"))
		return true
	}
	s.templates.ServeUpload(w, r)
	return true
}

// decodeBody decodes a required JSON body into v, answering when it cannot.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := decode(r, v, true); err != nil {
		s.writeBodyErr(w, r, err)
		return false
	}
	return true
}

// templateAliasOrTags routes GET /templates/aliases/{alias} and GET
// /templates/{templateID}/tags; any other path of that shape is 404.
func (s *Server) templateAliasOrTags(w http.ResponseWriter, r *http.Request) {
	a, b := r.PathValue("a"), r.PathValue("b")
	switch {
	case a == "aliases":
		s.templateByAlias(w, r, b)
	case b == "tags":
		s.templateTags(w, r, a)
	default:
		s.fail(w, r, errdefs.Publicf(errdefs.ErrNotFound, "not found"))
	}
}

// templateByAlias is GET /templates/aliases/{alias}: 200 for a template
// the caller may use (shared ones are public), 404 otherwise (another
// team's template too, like an unknown one).
func (s *Server) templateByAlias(w http.ResponseWriter, r *http.Request, alias string) {
	t, err := s.db.GetTeamTemplate(r.Context(), team(r), alias)
	if err == nil && t.Name != alias {
		err = errdefs.Publicf(errdefs.ErrNotFound, "template alias '%s' not found", alias)
	}
	if err != nil {
		if errdefs.IsNotFound(err) {
			err = errdefs.Publicf(errdefs.ErrNotFound, "template alias '%s' not found", alias)
		}
		s.fail(w, r, err)
		return
	}
	owner, err := s.db.TemplateOwner(r.Context(), t.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusOK, rest.TemplateAliasResponse{TemplateID: t.ID, Public: owner == ""})
}

// listTeamTemplates is GET /templates and /v2/templates: shared templates
// and the caller's own.
func (s *Server) listTeamTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := s.db.ListTeamTemplates(r.Context(), team(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]rest.Template, 0, len(ts))
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
			err = errdefs.Publicf(errdefs.ErrNotFound, "template or snapshot '%s' not found", id)
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
		s.fail(w, r, errdefs.Publicf(errdefs.ErrNotFound, "template '%s' not found", id))
		return
	}
	out := rest.TemplateWithBuilds{TemplateID: id, Aliases: []string{}, Names: []string{}, Builds: []rest.TemplateBuild{}}
	if err == nil {
		owner, oerr := s.db.TemplateOwner(r.Context(), t.ID)
		if oerr != nil {
			s.fail(w, r, oerr)
			return
		}
		out = rest.TemplateWithBuilds{TemplateID: t.ID, Public: owner == "", Aliases: []string{t.Name}, Names: []string{t.Name},
			CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, LastSpawnedAt: t.LastSpawnedAt, SpawnCount: int64(t.SpawnCount),
			Builds: []rest.TemplateBuild{}}
		if len(builds) == 0 && t.BuildID != "" { // a CLI build
			out.Builds = append(out.Builds, rest.TemplateBuild{BuildID: t.BuildID, Status: store.BuildReady,
				CpuCount: int32(orDefault(t.CPUCount, orchestrator.DefaultVCPUs)),
				MemoryMB: int32(orDefault(t.MemoryMB, orchestrator.DefaultMemoryMiB)), CreatedAt: t.UpdatedAt, UpdatedAt: t.UpdatedAt,
				FinishedAt: &t.UpdatedAt, EnvdVersion: optional(t.EnvdVersion)})
		}
	} else {
		out.Aliases, out.Names = []string{builds[0].Name}, []string{builds[0].Name}
		out.CreatedAt, out.UpdatedAt = builds[len(builds)-1].CreatedAt, builds[0].UpdatedAt
	}
	for _, b := range builds {
		// A build requested without cpuCount or memoryMB makes sandboxes
		// of the defaults, which it reports as GET /templates does.
		bj := rest.TemplateBuild{BuildID: b.ID, Status: rest.TemplateBuildStatus(b.Status),
			CpuCount: int32(orDefault(b.CPUCount, orchestrator.DefaultVCPUs)),
			MemoryMB: int32(orDefault(b.MemoryMB, orchestrator.DefaultMemoryMiB)), CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt}
		if b.Status == store.BuildReady || b.Status == store.BuildError {
			fin := b.UpdatedAt
			bj.FinishedAt = &fin
		}
		out.Builds = append(out.Builds, bj)
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}
