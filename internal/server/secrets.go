package server

import "github.com/moatsh/moat/internal/server/secretapi"

// secretRoutes registers the /secrets API (secretapi); without a secrets
// service its routes answer 501.
func (s *Server) secretRoutes() {
	if s.secrets != nil {
		s.secretAPI = secretapi.New(secretapi.Deps{Secrets: s.secrets, Team: team, Fail: s.fail, Decode: s.decodeBody})
	}
	s.secretAPI.Register(s.mux, s.auth)
}
