package server

import (
	"net/http"
	"strings"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/store"
)

// The team API keys API (E2B's /api-keys). E2B authorizes it with a
// user's dashboard token; Moat has no users, so a team's API key manages
// the team's keys. Values are shown once, when a key is made; a key cannot
// delete itself (the caller would lock itself out mid-session).

func (s *Server) apiKeyRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /api-keys", s.auth(s.listAPIKeys))
	m.HandleFunc("POST /api-keys", s.auth(s.createAPIKey))
	m.HandleFunc("PATCH /api-keys/{apiKeyID}", s.auth(s.renameAPIKey))
	m.HandleFunc("DELETE /api-keys/{apiKeyID}", s.auth(s.deleteAPIKey))
}

// apiKeyMask is E2B's IdentifierMaskingDetails of k: "e2b_" and the
// value's first six and last four characters (no last ones for a key made
// before this API).
func apiKeyMask(k store.APIKey) rest.IdentifierMaskingDetails {
	return rest.IdentifierMaskingDetails{Prefix: store.APIKeyPrefix, ValueLength: len(store.APIKeyPrefix) + 40,
		MaskedValuePrefix: strings.TrimPrefix(k.Prefix, store.APIKeyPrefix), MaskedValueSuffix: k.Suffix}
}

// listAPIKeys is GET /api-keys: 200 and the team's keys, oldest first.
func (s *Server) listAPIKeys(w http.ResponseWriter, r *http.Request) {
	ks, err := s.db.ListAPIKeys(r.Context(), team(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]rest.TeamAPIKey, len(ks))
	for i, k := range ks {
		out[i] = rest.TeamAPIKey{Id: k.ID, Name: k.Name, Mask: apiKeyMask(k), CreatedAt: k.CreatedAt.UTC()}
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}

// createAPIKey is POST /api-keys {"name"}: 201 and the new key with its
// value.
func (s *Server) createAPIKey(w http.ResponseWriter, r *http.Request) {
	var body rest.NewTeamAPIKey
	if !s.decodeBody(w, r, &body) {
		return
	}
	if err := checkKeyName(body.Name); err != nil {
		s.fail(w, r, err)
		return
	}
	k, key, err := s.db.CreateNamedAPIKey(r.Context(), team(r), body.Name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("api key created", "team", team(r), "api_key", k.ID)
	errhttp.WriteJSON(w, http.StatusCreated, rest.CreatedTeamAPIKey{Id: k.ID, Key: key, Name: k.Name, Mask: apiKeyMask(k),
		CreatedAt: k.CreatedAt.UTC()})
}

// renameAPIKey is PATCH /api-keys/{apiKeyID} {"name"}: 200.
func (s *Server) renameAPIKey(w http.ResponseWriter, r *http.Request) {
	var body rest.UpdateTeamAPIKey
	if !s.decodeBody(w, r, &body) {
		return
	}
	err := checkKeyName(body.Name)
	if err == nil {
		err = s.db.RenameAPIKey(r.Context(), team(r), r.PathValue("apiKeyID"), body.Name)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// deleteAPIKey is DELETE /api-keys/{apiKeyID}: 204; 409 for the key the
// request is made with.
func (s *Server) deleteAPIKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("apiKeyID")
	own, err := s.db.APIKeyID(r.Context(), r.Header.Get("X-API-KEY"))
	if err == nil && own == id {
		err = errdefs.Publicf(errdefs.ErrConflict, "API key %s is the one this request is made with: delete it with another key", id)
	}
	if err == nil {
		err = s.db.DeleteAPIKey(r.Context(), team(r), id)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("api key deleted", "team", team(r), "api_key", id)
	w.WriteHeader(http.StatusNoContent)
}

// checkKeyName refuses an empty name or one past store.MaxAPIKeyName.
func checkKeyName(name string) error {
	if strings.TrimSpace(name) == "" || len(name) > store.MaxAPIKeyName {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "name: want 1 to %d bytes, not blank", store.MaxAPIKeyName)
	}
	return nil
}
