package server

import "github.com/moatsh/moat/internal/server/eventapi"

// eventRoutes registers the /events API (eventapi); without a webhook
// service its routes answer 501.
func (s *Server) eventRoutes() {
	var api *eventapi.API
	if s.webhooks != nil {
		api = eventapi.New(eventapi.Deps{Store: s.db, CheckURL: s.webhooks.CheckURL, Team: team, Fail: s.fail,
			Decode: s.decodeBody})
	}
	api.Register(s.mux, s.auth)
}
