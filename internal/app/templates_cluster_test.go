package app

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/cluster/artefact"
	"github.com/moatsh/moat/internal/cluster/join"
	"github.com/moatsh/moat/internal/egress/tlsca"
	"github.com/moatsh/moat/internal/store"
)

// TestTemplateCopiesServed: while the node that built a template is lost,
// a node that needs it copies it from a node holding a checked copy; a
// copy changed on that node's disk is refused by its digest; a node that
// neither built nor copied a template answers 404 for it.
func TestTemplateCopiesServed(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ca, err := tlsca.Open(filepath.Join(t.TempDir(), "ca"), "cluster")
	if err != nil {
		t.Fatal(err)
	}
	is := &join.Issuer{CA: ca}
	tlsOf := func(id string) *tls.Config {
		key, cert, caPEM, err := is.Self(id)
		if err != nil {
			t.Fatal(err)
		}
		c, err := join.TLSConfig(cert, key, caPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tree := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tree, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "etc", "motd"), []byte("built on node-a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	digest, err := artefact.Digest(tree)
	if err != nil {
		t.Fatal(err)
	}
	tpl := store.Template{ID: "tcopy", Name: "copied", RootfsDir: "/gone/on/node-a", NodeID: "node-a", Digest: digest}
	if err := db.UpsertTemplate(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	if tpl, err = db.GetTemplate(ctx, "copied"); err != nil {
		t.Fatal(err)
	}
	// node-b holds a copy and serves it on its node API.
	copiesB := t.TempDir()
	heldB := copyDir(copiesB, tpl)
	if err := artefact.Receive(strings.NewReader(mustStream(t, tree)), digest, heldB); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(serveArtefacts(db, "node-b", copiesB, http.NotFoundHandler()))
	srv.TLS = tlsOf("node-b")
	srv.StartTLS()
	defer srv.Close()
	until := time.Now().Add(time.Hour)
	for _, nd := range []store.Node{
		{ID: "node-a", Addr: "127.0.0.1:1", LeaseUntil: until}, // down: nothing listens there
		{ID: "node-b", Addr: strings.TrimPrefix(srv.URL, "https://"), LeaseUntil: until},
	} {
		if err := db.RegisterNode(ctx, nd); err != nil {
			t.Fatal(err)
		}
	}
	c := &nodeTemplates{DB: db, self: "node-c", log: slog.New(slog.DiscardHandler), dir: t.TempDir(), tls: tlsOf("node-c")}
	got, err := c.GetTemplate(ctx, "copied")
	if err != nil {
		t.Fatalf("node-c with node-a down: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(got.RootfsDir, "etc", "motd")); err != nil || string(b) != "built on node-a\n" {
		t.Fatalf("node-c's copy: %q, %v", b, err)
	}
	if held, err := db.TemplateHolders(ctx, tpl.ID, digest); err != nil || len(held) != 1 || held[0] != "node-c" {
		t.Errorf("recorded holders: %v, %v; want node-c", held, err)
	}
	// A copy changed on node-b's disk: node-d refuses it.
	if err := os.WriteFile(filepath.Join(heldB, "etc", "motd"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := &nodeTemplates{DB: db, self: "node-d", log: slog.New(slog.DiscardHandler), dir: t.TempDir(), tls: tlsOf("node-d")}
	if _, err := d.GetTemplate(ctx, "copied"); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("a changed copy: %v, want the digest refused", err)
	}
	// A node without the template: 404.
	other := store.Template{ID: "tother", Name: "other", RootfsDir: "/x", NodeID: "node-a", Digest: digest}
	if err := db.UpsertTemplate(ctx, other); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: func() *tls.Config { c := tlsOf("node-d"); c.ServerName = "node-b"; return c }()}}
	resp, err := hc.Get(srv.URL + artefactPath + "tother/rootfs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a template node-b neither built nor copied: %d", resp.StatusCode)
	}
}

// mustStream is artefact.Write's stream of dir.
func mustStream(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	if _, err := artefact.Write(&b, dir); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
