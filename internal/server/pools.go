package server

import (
	"net/http"

	"github.com/moatsh/moat/internal/errdefs/errhttp"
)

// poolJSON is one warm pool as GET /moat/pools shows it (a Moat extension;
// E2B has no pools). Member IDs are not shown: members belong to nobody
// until a create takes one.
type poolJSON struct {
	Template string `json:"template"`
	Size     int    `json:"size"`
	Ready    int    `json:"ready"`
}

// listPools answers GET /moat/pools: the server's warm pools (moat serve
// --pool) and how many members each has ready.
func (s *Server) listPools(w http.ResponseWriter, r *http.Request) {
	out := []poolJSON{}
	for _, p := range s.orch.Pools() {
		out = append(out, poolJSON{Template: p.Template, Size: p.Size, Ready: p.Ready})
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}
