package server

import (
	"net/http"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/server/listquery"
	"github.com/moatsh/moat/internal/store"
)

const maxSnapshotNameLen = 128

// toSnapshot is E2B's SnapshotInfo with Moat's sandboxID and createdAt
// (the SDKs ignore unknown fields).
func toSnapshot(s store.Snapshot) rest.SnapshotInfo {
	names := []string{}
	if s.Name != "" {
		names = append(names, s.Name)
	}
	created := s.CreatedAt.UTC()
	return rest.SnapshotInfo{SnapshotID: s.ID, Names: names, SandboxID: &s.SandboxID, CreatedAt: &created}
}

// createSnapshot is POST /sandboxes/{id}/snapshots: 201 SnapshotInfo.
func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request, id string) {
	var body rest.SandboxSnapshotRequest
	if err := decode(r, &body, false); err != nil {
		s.writeBodyErr(w, r, err)
		return
	}
	var name string
	if body.Name != nil {
		name = *body.Name
		if err := validSnapshotName(name); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	snap, err := s.orch.Snapshot(r.Context(), team(r), id, name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusCreated, toSnapshot(snap))
}

func validSnapshotName(name string) error {
	if name == "" || len(name) > maxSnapshotNameLen {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "snapshot name must be 1..%d characters", maxSnapshotNameLen)
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' ||
			c == '.' || c == '/' || c == ':'
		if !ok {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "snapshot name %q: only letters, digits and -_./: allowed", name)
		}
	}
	return nil
}

// listSnapshots is GET /snapshots?sandboxID&name&limit&nextToken, newest
// first; X-Next-Token is the last ID of a full page.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := listquery.PageLimit(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f := store.SnapshotFilter{SandboxID: q.Get("sandboxID"), Name: q.Get("name"), After: q.Get("nextToken"), Limit: limit + 1}
	snaps, err := s.orch.ListSnapshots(r.Context(), team(r), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	snaps = listquery.TrimPage(w, snaps, limit, func(sn store.Snapshot) string { return sn.ID })
	out := make([]rest.SnapshotInfo, 0, len(snaps))
	for _, sn := range snaps {
		out = append(out, toSnapshot(sn))
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}

// deleteTemplate is DELETE /templates/{id}: the SDK deletes snapshots this
// way. Deleting real templates is done with `moat template` for now.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := s.orch.DeleteSnapshot(r.Context(), team(r), id)
	if errdefs.IsNotFound(err) {
		if _, terr := s.db.GetTemplate(r.Context(), id); terr == nil {
			s.fail(w, r, errdefs.Publicf(errdefs.ErrNotImplemented, "deleting templates over the API is not implemented (use `moat template`)"))
			return
		}
		s.fail(w, r, errdefs.Publicf(errdefs.ErrNotFound, "template or snapshot '%s' not found", id))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fork is POST /sandboxes/{id}/fork: 201 with one result per fork.
func (s *Server) fork(w http.ResponseWriter, r *http.Request, id string) {
	var body rest.SandboxForkRequest
	if err := decode(r, &body, false); err != nil {
		s.writeBodyErr(w, r, err)
		return
	}
	timeout, count := int32(defaultForkTimeout), int32(1)
	if body.Timeout != nil {
		timeout = *body.Timeout
	}
	if body.Count != nil {
		count = *body.Count
	}
	res, err := s.orch.Fork(r.Context(), team(r), id, int(count), seconds(timeout))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	envd := s.envdVersions(r.Context())
	out := make([]rest.SandboxForkResult, len(res))
	for i, fr := range res {
		if fr.Err != nil {
			// The client sees the public text; the log keeps the rest.
			s.log.Warn("fork failed", "sandboxID", id, "fork", i, "err", fr.Err)
			out[i].Error = &rest.Error{Code: int32(errhttp.ToHTTP(fr.Err)), Message: errhttp.Message(fr.Err)}
			continue
		}
		sb := toSandbox(fr.Sandbox, envd(fr.Sandbox.TemplateID))
		out[i].Sandbox = &sb
	}
	errhttp.WriteJSON(w, http.StatusCreated, out)
}
