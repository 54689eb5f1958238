package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
// API (package cluster/artefact's stream of a template this node built,
// or of its checked copy of one in copies) and everything else with next.
// Serving copies keeps a template usable by new nodes while its builder
// is down; the receiver checks the digest whoever serves it.
func serveArtefacts(db *store.DB, self, copies string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := artefactRE.FindStringSubmatch(r.URL.Path)
		if m == nil || r.Method != http.MethodGet {
			next.ServeHTTP(w, r)
			return
		}
		t, err := db.GetTemplate(r.Context(), m[1])
		root := ""
		switch {
		case err != nil:
		case t.ID != m[1]:
			err = errdefs.Publicf(errdefs.ErrNotFound, "template %s not found", m[1])
		case t.NodeID == self:
			root = t.RootfsDir
		case len(t.Digest) >= 16 && isDir(copyDir(copies, t)):
			root = copyDir(copies, t)
		default:
			err = errdefs.Publicf(errdefs.ErrNotFound, "template %s was not built on node %s, which holds no copy of it", m[1], self)
		}
		if err != nil {
			errhttp.WriteError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		if _, err := artefact.Write(w, root); err != nil {
			// Headers are gone: cut the stream, which the receiver's
			// digest check refuses.
			panic(http.ErrAbortHandler)
		}
	})
}

// clusterTemplatesDir is where a node keeps the templates it copied.
func clusterTemplatesDir(dataDir string) string { return filepath.Join(dataDir, "cluster-templates") }

// copyDir is where a node keeps its copy of template t's tree.
func copyDir(dir string, t store.Template) string {
	return filepath.Join(dir, t.ID+"-"+t.Digest[:16], "rootfs")
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
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
	return &nodeTemplates{DB: db, self: cfg.NodeID, log: cfg.Logger, dir: clusterTemplatesDir(cfg.DataDir), tls: tc}
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
	dest := copyDir(n.dir, t)
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

// copy fetches template t's tree into dest: from the node that built it,
// else from the nodes that recorded a copy, else from any other live node
// (each group in random order), each stream checked against t's digest;
// then records its own copy.
func (n *nodeTemplates) copy(ctx context.Context, t store.Template, dest string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	nodes, err := n.DB.ListNodes(ctx)
	if err != nil {
		return err
	}
	held, _ := n.DB.TemplateHolders(ctx, t.ID, t.Digest) // a hint: every live node is asked in the end
	var builder, holders, others []store.Node
	for _, nd := range nodes {
		switch {
		case nd.ID == n.self || nd.Lost || nd.Addr == "":
		case nd.ID == t.NodeID:
			builder = append(builder, nd)
		case slices.Contains(held, nd.ID):
			holders = append(holders, nd)
		default:
			others = append(others, nd)
		}
	}
	for _, l := range [][]store.Node{holders, others} {
		rand.Shuffle(len(l), func(i, j int) { l[i], l[j] = l[j], l[i] })
	}
	var errs []error
	for _, src := range slices.Concat(builder, holders, others) {
		start := time.Now()
		if err := n.fetch(ctx, src, t, dest); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", src.ID, err))
			continue
		}
		// Sandboxes' users traverse these as templates/<name> (secureTemplates).
		if err := errors.Join(os.Chmod(n.dir, 0o711), os.Chmod(filepath.Dir(dest), 0o711)); err != nil {
			return errors.Join(err, os.RemoveAll(filepath.Dir(dest)))
		}
		n.log.InfoContext(ctx, "template copied", "template", t.Name, "from", src.ID, "builder", t.NodeID,
			"took", time.Since(start).Round(time.Millisecond))
		// Placement now prefers this node for the template, and others may
		// copy it from here; a failed record costs only that.
		if err := n.DB.RecordTemplateCopy(ctx, t.ID, n.self, t.Digest); err != nil {
			n.log.WarnContext(ctx, "cluster: recording a template copy", "template", t.Name, "err", err)
		}
		return nil
	}
	if len(errs) == 0 {
		return fmt.Errorf("neither node %s, which built it, nor another node is reachable", t.NodeID)
	}
	return errors.Join(errs...)
}

// fetch receives template t's tree from node src's node API into dest.
func (n *nodeTemplates) fetch(ctx context.Context, src store.Node, t store.Template, dest string) error {
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
		return fmt.Errorf("answered %s", resp.Status)
	}
	return artefact.Receive(resp.Body, t.Digest, dest)
}
