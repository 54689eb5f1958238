// Package ocireg serves a real OCI registry (go-containerregistry's
// pkg/registry, blobs in memory) on 127.0.0.1, optionally behind HTTP
// basic authentication as Docker's distribution does, and builds and
// pushes images to it: from tar entries, from a static busybox, or from
// a root filesystem directory. Tests (through ocitest), the e2e suites'
// registry (test/e2e/registry) and `moat bench --template-build` use it:
// this machine reaches no public registry. Its functions return errors;
// ocitest wraps them for tests.
package ocireg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Registry is a registry served on 127.0.0.1 until Close.
type Registry struct {
	Host string // "127.0.0.1:port"
	user string
	pass string
	srv  *http.Server

	Requests     atomic.Int64 // all HTTP requests
	BlobRequests atomic.Int64 // GET of a blob (config or layer)
}

// Start serves a registry on a free port of 127.0.0.1. With user set it
// requires HTTP basic authentication with user and pass (401 with a
// WWW-Authenticate challenge otherwise). Close stops it.
func Start(user, pass string) (*Registry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("registry: listen: %w", err)
	}
	r := &Registry{Host: ln.Addr().String(), user: user, pass: pass}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.Requests.Add(1)
			if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/sha256:") {
				r.BlobRequests.Add(1)
			}
			if r.user != "" {
				u, p, ok := req.BasicAuth()
				if !ok || u != r.user || p != r.pass {
					w.Header().Set("WWW-Authenticate", `Basic realm="moat"`)
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusUnauthorized)
					_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
					return
				}
			}
			h.ServeHTTP(w, req)
		})}
	go func() {
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Printf("registry: %v", err)
		}
	}()
	return r, nil
}

// Close stops the registry.
func (r *Registry) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.srv.Shutdown(ctx)
}

// Ref is "host/repo:tag" on this registry.
func (r *Registry) Ref(repoTag string) string { return r.Host + "/" + repoTag }

func (r *Registry) opts() []remote.Option {
	if r.user == "" {
		return nil
	}
	return []remote.Option{remote.WithAuth(&authn.Basic{Username: r.user, Password: r.pass})}
}

// Push pushes img as repoTag.
func (r *Registry) Push(repoTag string, img v1.Image) error {
	ref, err := name.ParseReference(r.Ref(repoTag))
	if err != nil {
		return fmt.Errorf("push %s: %w", repoTag, err)
	}
	if err := remote.Write(ref, img, r.opts()...); err != nil {
		return fmt.Errorf("push %s: %w", repoTag, err)
	}
	return nil
}

// PushIndex pushes an index of the images keyed by "os/arch" as repoTag.
func (r *Registry) PushIndex(repoTag string, imgs map[string]v1.Image) error {
	var idx v1.ImageIndex = empty.Index
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	for plat, img := range imgs {
		p, err := v1.ParsePlatform(plat)
		if err != nil {
			return fmt.Errorf("push %s: %w", repoTag, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
	}
	ref, err := name.ParseReference(r.Ref(repoTag))
	if err != nil {
		return fmt.Errorf("push %s: %w", repoTag, err)
	}
	if err := remote.WriteIndex(ref, idx, r.opts()...); err != nil {
		return fmt.Errorf("push %s: %w", repoTag, err)
	}
	return nil
}

// Image stacks layers (bottom first) with config cfg for platform
// "os/arch[/variant]" (an OCI manifest and config).
func Image(platform string, cfg v1.Config, layers ...v1.Layer) (v1.Image, error) {
	p, err := v1.ParsePlatform(platform)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layers...); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Config = cfg
	return mutate.ConfigFile(img, cf)
}
