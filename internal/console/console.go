// Package console serves Moat's web console under /console: a small
// single-page app (built from web/ with esbuild into dist/ and embedded in
// the binary) that calls the server's own REST API with the API key the
// user typed, and the sandbox proxy for terminals. It exists so that an
// operator can see and act on sandboxes without the CLI, with nothing
// fetched from outside the Moat server.
//
// Regenerate dist/ after editing web/: `cd internal/console && npm ci && npm run build`.
package console

import (
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// Prefix is where the console is served.
const Prefix = "/console"

//go:embed dist
var dist embed.FS

// Handler serves the console's static files from fsys (the embedded
// dist/ when fsys is nil). The files need no API key: the app asks for one
// and sends it with each API call.
func Handler(fsys fs.FS) http.Handler {
	if fsys == nil {
		sub, err := fs.Sub(dist, "dist")
		if err != nil {
			panic("console: embedded dist: " + err.Error())
		}
		fsys = sub
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, fsys)
	})
}

func serve(w http.ResponseWriter, r *http.Request, fsys fs.FS) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == Prefix {
		http.Redirect(w, r, Prefix+"/", http.StatusMovedPermanently)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, Prefix+"/")
	if name == "" {
		name = "index.html"
	}
	// fs.ValidPath refuses "..", absolute and unclean names: nothing
	// outside fsys can be named.
	if !fs.ValidPath(name) || strings.Contains(name, "\\") {
		http.NotFound(w, r)
		return
	}
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(data)
	}
}

// Mount serves the console under Prefix and hands every other request to
// next.
func Mount(next http.Handler) http.Handler {
	c := Handler(nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == Prefix || strings.HasPrefix(r.URL.Path, Prefix+"/") {
			c.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
