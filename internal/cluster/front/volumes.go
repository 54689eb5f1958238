package front

import (
	"context"
	"fmt"
	"net/http"
	"regexp"

	"github.com/moatsh/moat/internal/cluster"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
)

// Volumes on many machines. A volume's image lives in the data dir of the
// node that created it (store.Volume.Node), which a sandbox mounting it
// must run on: the volume API about one volume and its content API go on
// to that node, a new volume made through a server that runs no
// sandboxes goes to a node placement picks, and a create that mounts
// volumes is placed on their node (cluster.Need.Node).

// apiVolume matches the paths about one volume: the volume API's and the
// content API's.
var apiVolume = regexp.MustCompile(`^/(?:volumes|volumecontent)/([^/]+)(?:/|$)`)

// serveVolume sends a request about volume id on to the node holding it.
// An unknown volume, one of a server alone and a store that does not
// answer are left to this server's API, whose answers they are.
func (f *Front) serveVolume(w http.ResponseWriter, r *http.Request, id string) {
	v, err := f.c.Store.GetVolume(r.Context(), "", id)
	if err != nil || v.Node == "" || v.Node == f.c.Self {
		f.c.Local.ServeHTTP(w, r)
		return
	}
	n, err := f.node(r.Context(), v.Node)
	if err != nil || n.Lost || n.Addr == "" {
		errhttp.WriteError(w, errdefs.Publicf(errdefs.ErrUnavailable,
			"volume %s is on node %s, which is not available; try again later", id, v.Node))
		return
	}
	f.forward(w, r, n)
}

// createVolume makes a new volume here when this server runs sandboxes,
// else on the node placement picks.
func (f *Front) createVolume(w http.ResponseWriter, r *http.Request) {
	if f.c.Node {
		f.c.Local.ServeHTTP(w, r)
		return
	}
	body, ok := f.readBody(w, r)
	if !ok {
		return
	}
	order, err := f.candidates(r.Context(), cluster.Need{})
	f.tryNodes(w, r, body, order, err)
}

// volumesNode is the node of the named volumes of the team whose API key
// is key ("" when none of them records one). Volumes on two nodes cannot
// be mounted together: ErrInvalidArgument. A key or name the store does
// not know leaves the answer to the node, which checks them.
func (f *Front) volumesNode(ctx context.Context, key string, names []string) (string, error) {
	team, ok, err := f.c.Store.CheckAPIKey(ctx, key)
	if err != nil || !ok {
		return "", err
	}
	node, first := "", ""
	for _, name := range names {
		v, err := f.c.Store.GetVolume(ctx, team, name)
		if errdefs.IsNotFound(err) || (err == nil && v.Node == "") {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("volume %s: %w", name, err)
		}
		if node != "" && v.Node != node {
			return "", errdefs.Publicf(errdefs.ErrInvalidArgument,
				"volumes %s (on node %s) and %s (on node %s) are on different nodes: a sandbox can mount volumes of one node only",
				first, node, name, v.Node)
		}
		node, first = v.Node, name
	}
	return node, nil
}
