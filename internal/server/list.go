package server

import (
	"net/http"
	"strconv"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/server/listquery"
	"github.com/moatsh/moat/internal/store"
)

// listV1 is the deprecated list: running sandboxes only, no paging.
func (s *Server) listV1(w http.ResponseWriter, r *http.Request) {
	md, err := listquery.ParseMetadataFilter(r.URL.Query().Get("metadata"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rows, err := s.orch.List(r.Context(), team(r), store.SandboxFilter{States: []store.State{store.StateRunning}, Metadata: md})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeListed(w, r, rows)
}

func (s *Server) listV2(w http.ResponseWriter, r *http.Request) {
	f, err := listquery.Parse(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit := f.Limit
	f.Limit = limit + 1
	rows, err := s.orch.List(r.Context(), team(r), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[len(rows)-1]
		w.Header().Set("X-Next-Token", listquery.EncodeToken(store.Cursor{StartedAt: last.StartedAt, ID: last.ID}, f.Order))
	}
	if wantsRunning(f.States) {
		rf := f
		rf.States, rf.Cursor, rf.Limit = []store.State{store.StateRunning, store.StateResuming}, nil, 0
		running, err := s.orch.List(r.Context(), team(r), rf)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		w.Header().Set("X-Total-Running", strconv.Itoa(len(running)))
	}
	s.writeListed(w, r, rows)
}

func (s *Server) writeListed(w http.ResponseWriter, r *http.Request, rows []store.Sandbox) {
	envd := s.envdVersions(r.Context())
	out := make([]rest.ListedSandbox, 0, len(rows))
	for _, sb := range rows {
		out = append(out, toListed(sb, envd(sb.TemplateID)))
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}

func wantsRunning(states []store.State) bool {
	for _, s := range states {
		if s == store.StateRunning {
			return true
		}
	}
	return false
}
