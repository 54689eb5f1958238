package server

import (
	"github.com/moatsh/moat/internal/server/volumeapi"
	"github.com/moatsh/moat/internal/store"
)

// volumeRoutes registers the volume API (volumeapi); without a volume
// manager its routes answer 501 and volumeMounts 400.
func (s *Server) volumeRoutes() {
	if s.volumes != nil {
		s.vols = volumeapi.New(volumeapi.Deps{Store: s.db, Volumes: s.volumes, Log: s.log, Team: team,
			Fail: s.fail, Decode: s.decodeBody, Node: s.nodeID})
		s.orch.OnRemove(s.vols.Release) // a sandbox's volumes, once it is gone
	}
	s.vols.Register(s.mux, s.auth)
}

// RecoverVolumes holds the volumes of sandboxes that survived a restart
// (the live ones: call it after the orchestrator's Recover).
func (s *Server) RecoverVolumes(sbs []store.Sandbox) error { return s.vols.Recover(sbs) }
