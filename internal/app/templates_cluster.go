package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/moatsh/moat/internal/cluster/artefact"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/store"
)

// Templates on many nodes. A template built over the API records the node
// that built it and its tree's digest (build.Config.NodeID); a node that
// starts a sandbox from a template another node built copies the tree
// from that node's node API once, checks it against the digest, and keeps
// it under DATA-DIR/cluster-templates/<id>-<digest> (artefactPath).

// artefactPath is the node API's route of a template's tree.
const artefactPath = "/cluster/templates/"

var artefactRE = regexp.MustCompile(`^/cluster/templates/([A-Za-z0-9_.-]+)/rootfs$`)

// serveArtefacts serves GET /cluster/templates/{id}/rootfs on the node
// API (package cluster/artefact's stream of a template this node built)
// and everything else with next.
func serveArtefacts(db *store.DB, self string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := artefactRE.FindStringSubmatch(r.URL.Path)
		if m == nil || r.Method != http.MethodGet {
			next.ServeHTTP(w, r)
			return
		}
		t, err := db.GetTemplate(r.Context(), m[1])
		if err == nil && (t.NodeID != self || t.ID != m[1]) {
			err = errdefs.Publicf(errdefs.ErrNotFound, "template %s was not built on node %s", m[1], self)
		}
		if err != nil {
			errhttp.WriteError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		if _, err := artefact.Write(w, t.RootfsDir); err != nil {
			// Headers are gone: cut the stream, which the receiver's
			// digest check refuses.
			panic(http.ErrAbortHandler)
		}
	})
}

// nodeTemplates is the orchestrator's store on a node of a cluster: a
// template another node built comes with RootfsDir of its local copy,
// made on first use.
type nodeTemplates struct {
	*store.DB
	self   string
	log    *slog.Logger
	dir    string      // where copies go
	tls    *tls.Config // the node API's client end
	copies singleflight.Group
}

func newNodeTemplates(cfg Config, db *store.DB, tc *tls.Config) orchestrator.Store {
	if tc == nil {
		return db
	}
	return &nodeTemplates{DB: db, self: cfg.NodeID, log: cfg.Logger, dir: filepath.Join(cfg.DataDir, "cluster-templates"), tls: tc}
}

func (n *nodeTemplates) GetTemplate(ctx context.Context, idOrName string) (store.Template, error) {
	t, err := n.DB.GetTemplate(ctx, idOrName)
	if err != nil {
		return t, err
	}
	return n.local(ctx, t)
}

func (n *nodeTemplates) GetTeamTemplate(ctx context.Context, team, idOrName string) (store.Template, error) {
	t, err := n.DB.GetTeamTemplate(ctx, team, idOrName)
	if err != nil {
		return t, err
	}
	return n.local(ctx, t)
}

// local is t with RootfsDir on this node: as it is when every node has it
// or this node built it, else the checked copy (made now if need be).
func (n *nodeTemplates) local(ctx context.Context, t store.Template) (store.Template, error) {
	if t.NodeID == "" || t.NodeID == n.self || len(t.Digest) < 16 {
		return t, nil
	}
	dest := filepath.Join(n.dir, t.ID+"-"+t.Digest[:16], "rootfs")
	if _, err := os.Stat(dest); err == nil {
		t.RootfsDir = dest
		return t, nil
	}
	_, err, _ := n.copies.Do(dest, func() (any, error) {
		if _, err := os.Stat(dest); err == nil {
			return nil, nil
		}
		return nil, n.copy(context.WithoutCancel(ctx), t, dest)
	})
	if err != nil {
		return t, errdefs.Publicf(errdefs.ErrUnavailable, "template %s (built on node %s) cannot be used on node %s: %v",
			t.Name, t.NodeID, n.self, err)
	}
	t.RootfsDir = dest
	return t, nil
}

// copy fetches template t's tree from the node that built it into dest.
func (n *nodeTemplates) copy(ctx context.Context, t store.Template, dest string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	src, err := n.DB.GetNode(ctx, t.NodeID)
	if err != nil {
		return err
	}
	if src.Lost || src.Addr == "" {
		return fmt.Errorf("node %s is not reachable", src.ID)
	}
	tc := n.tls.Clone()
	tc.ServerName = src.ID
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+src.Addr+artefactPath+t.ID+"/rootfs", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("node %s answered %s", src.ID, resp.Status)
	}
	start := time.Now()
	if err := artefact.Receive(resp.Body, t.Digest, dest); err != nil {
		return err
	}
	// Sandboxes' users traverse these as templates/<name> (secureTemplates).
	if err := errors.Join(os.Chmod(n.dir, 0o711), os.Chmod(filepath.Dir(dest), 0o711)); err != nil {
		return errors.Join(err, os.RemoveAll(filepath.Dir(dest)))
	}
	n.log.InfoContext(ctx, "template copied from the node that built it", "template", t.Name, "from", src.ID,
		"took", time.Since(start).Round(time.Millisecond))
	return nil
}
