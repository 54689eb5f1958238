package server

import (
	"net/http"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
)

// listPools answers GET /moat/pools (a Moat extension; E2B has no pools):
// the server's warm pools (moat serve --pool) and how many members each
// has ready. Member IDs are not shown: members belong to nobody until a
// create takes one.
func (s *Server) listPools(w http.ResponseWriter, r *http.Request) {
	out := []rest.MoatPool{}
	for _, p := range s.orch.Pools() {
		out = append(out, rest.MoatPool{Template: p.Template, Size: p.Size, Ready: p.Ready})
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}
