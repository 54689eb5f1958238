package server

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/store"
)

const maxSnapshotNameLen = 128

type snapshotBody struct {
	Name *string `json:"name"`
}

// snapshotJSON is E2B's SnapshotInfo.
type snapshotJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
	// Moat extras (the SDKs ignore unknown fields).
	SandboxID string    `json:"sandboxID"`
	CreatedAt time.Time `json:"createdAt"`
}

func toSnapshot(s store.Snapshot) snapshotJSON {
	names := []string{}
	if s.Name != "" {
		names = append(names, s.Name)
	}
	return snapshotJSON{SnapshotID: s.ID, Names: names, SandboxID: s.SandboxID, CreatedAt: s.CreatedAt.UTC()}
}

// createSnapshot is POST /sandboxes/{id}/snapshots: 201 SnapshotInfo.
func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request, id string) {
	var body snapshotBody
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
		return fmt.Errorf("snapshot name must be 1..%d characters: %w", maxSnapshotNameLen, errdefs.ErrInvalidArgument)
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' ||
			c == '.' || c == '/' || c == ':'
		if !ok {
			return fmt.Errorf("snapshot name %q: only letters, digits and -_./: allowed: %w", name, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// listSnapshots is GET /snapshots?sandboxID&name&limit&nextToken, newest
// first; X-Next-Token is the last ID of a full page.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.SnapshotFilter{SandboxID: q.Get("sandboxID"), Name: q.Get("name"), After: q.Get("nextToken"), Limit: 100}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			s.fail(w, r, fmt.Errorf("invalid limit %q: want 1..100: %w", v, errdefs.ErrInvalidArgument))
			return
		}
		f.Limit = n
	}
	limit := f.Limit
	f.Limit++
	snaps, err := s.orch.ListSnapshots(r.Context(), team(r), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(snaps) > limit {
		snaps = snaps[:limit]
		w.Header().Set("X-Next-Token", snaps[len(snaps)-1].ID)
	}
	out := make([]snapshotJSON, 0, len(snaps))
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
			s.fail(w, r, fmt.Errorf("deleting templates over the API is not implemented (use `moat template`): %w", errdefs.ErrNotImplemented))
			return
		}
		s.fail(w, r, fmt.Errorf("template or snapshot '%s' not found: %w", id, errdefs.ErrNotFound))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type forkBody struct {
	Timeout *int32 `json:"timeout"`
	Count   *int32 `json:"count"`
}

type forkResultJSON struct {
	Sandbox *sandboxJSON   `json:"sandbox,omitempty"`
	Error   *errhttp.Error `json:"error,omitempty"`
}

// fork is POST /sandboxes/{id}/fork: 201 with one result per fork.
func (s *Server) fork(w http.ResponseWriter, r *http.Request, id string) {
	var body forkBody
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
	out := make([]forkResultJSON, len(res))
	for i, fr := range res {
		if fr.Err != nil {
			out[i].Error = &errhttp.Error{Code: errhttp.ToHTTP(fr.Err), Message: errhttp.Message(fr.Err)}
			continue
		}
		sb := toSandbox(fr.Sandbox)
		out[i].Sandbox = &sb
	}
	errhttp.WriteJSON(w, http.StatusCreated, out)
}
