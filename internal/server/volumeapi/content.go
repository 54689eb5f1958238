package volumeapi

import (
	"crypto/subtle"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/volume"
)

// The volume content API (E2B's openapi-volumecontent.yml): files of a
// volume, authorized by the volume's token (Authorization: Bearer, as the
// SDKs send it; E2B serves it at api.<domain> too, and the SDKs take
// E2B_VOLUME_API_URL for it). Served from the volume's host mount, held for
// the request (see internal/volume). File bodies stream: they are bounded
// by the volume's size, not MaxBodyBytes.

// ContentPrefix starts every path of the volume content API.
const ContentPrefix = "/volumecontent/"

// maxJSONBytes bounds the JSON body of PATCH .../path.
const maxJSONBytes = 1 << 16

// MaxListDepth bounds GET /volumecontent/{id}/dir?depth=.
const MaxListDepth = 32

func (a *API) contentRoutes() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET /volumecontent/{volumeID}/path", a.volumeContent(a.statPath))
	m.HandleFunc("DELETE /volumecontent/{volumeID}/path", a.volumeContent(a.removePath))
	m.HandleFunc("PATCH /volumecontent/{volumeID}/path", a.volumeContent(a.patchPath))
	m.HandleFunc("GET /volumecontent/{volumeID}/dir", a.volumeContent(a.listDir))
	m.HandleFunc("POST /volumecontent/{volumeID}/dir", a.volumeContent(a.makeDir))
	m.HandleFunc("GET /volumecontent/{volumeID}/file", a.volumeContent(a.readFile))
	m.HandleFunc("PUT /volumecontent/{volumeID}/file", a.volumeContent(a.writeFile))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		a.d.Fail(w, r, errdefs.Publicf(errdefs.ErrNotFound, "route not found"))
	})
	return m
}

// ServeContent answers a request of the volume content API (any path
// under /volumecontent/), outside the server's body cap and API-key auth.
// On a nil API (volumes off) it answers 501.
func (a *API) ServeContent(w http.ResponseWriter, r *http.Request) {
	if a == nil {
		off(w, r)
		return
	}
	a.vmux.ServeHTTP(w, r)
}

type contentHandler func(w http.ResponseWriter, r *http.Request, fs *volume.FS, path string)

// volumeContent checks the volume's token, holds its mount for the
// request and opens its root. An unknown volume and a wrong token are the
// same 401, so that tokens do not probe for volume IDs.
func (a *API) volumeContent(h contentHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("volumeID")
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || tok == "" {
			errhttp.WriteError(w, errdefs.Public(errdefs.ErrUnauthenticated, "Missing volume token: set Authorization: Bearer <token>"))
			return
		}
		v, err := a.d.Store.GetVolume(r.Context(), "", id)
		if err != nil && !errdefs.IsNotFound(err) {
			a.d.Fail(w, r, err)
			return
		}
		if err != nil || v.ID != id || subtle.ConstantTimeCompare([]byte(tok), []byte(v.Token)) != 1 {
			errhttp.WriteError(w, errdefs.Publicf(errdefs.ErrUnauthenticated, "Invalid token for volume %q", id))
			return
		}
		if _, err := volume.Clean(r.URL.Query().Get("path")); err != nil {
			a.d.Fail(w, r, err)
			return
		}
		root, release, err := a.d.Volumes.Acquire(id)
		if err != nil {
			a.d.Fail(w, r, err)
			return
		}
		defer release()
		fs, err := volume.OpenFS(root)
		if err != nil {
			a.d.Fail(w, r, err)
			return
		}
		defer fs.Close()
		h(w, r, fs, r.URL.Query().Get("path"))
	}
}

// owner parses the uid, gid and mode query parameters.
func owner(r *http.Request) (volume.Owner, error) {
	var o volume.Owner
	for _, f := range []struct {
		name string
		dst  **uint32
		base int
	}{{"uid", &o.UID, 10}, {"gid", &o.GID, 10}, {"mode", &o.Mode, 10}} {
		raw := r.URL.Query().Get(f.name)
		if raw == "" {
			continue
		}
		n, err := strconv.ParseUint(raw, f.base, 32)
		if err != nil {
			return o, errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid %s %q: want a non-negative integer", f.name, raw)
		}
		v := uint32(n)
		*f.dst = &v
	}
	return o, nil
}

func (a *API) answer(w http.ResponseWriter, r *http.Request, status int, v any, err error) {
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, status, v)
}

func (a *API) statPath(w http.ResponseWriter, r *http.Request, fs *volume.FS, p string) {
	e, err := fs.Stat(p)
	a.answer(w, r, http.StatusOK, entryJSON(e), err)
}

func (a *API) removePath(w http.ResponseWriter, r *http.Request, fs *volume.FS, p string) {
	if err := fs.Remove(p); err != nil {
		a.d.Fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) patchPath(w http.ResponseWriter, r *http.Request, fs *volume.FS, p string) {
	var body rest.VolumeEntryMetadata
	r.Body = http.MaxBytesReader(w, r.Body, maxJSONBytes)
	if !a.d.Decode(w, r, &body) {
		return
	}
	e, err := fs.SetMeta(p, volume.Owner{UID: body.Uid, GID: body.Gid, Mode: body.Mode})
	a.answer(w, r, http.StatusOK, entryJSON(e), err)
}

func (a *API) listDir(w http.ResponseWriter, r *http.Request, fs *volume.FS, p string) {
	depth := 1
	if raw := r.URL.Query().Get("depth"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > MaxListDepth {
			a.d.Fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid depth %q: want 1 to %d", raw, MaxListDepth))
			return
		}
		depth = n
	}
	es, err := fs.List(p, depth)
	out := make([]rest.VolumeEntryStat, len(es))
	for i, e := range es {
		out[i] = entryJSON(e)
	}
	a.answer(w, r, http.StatusOK, out, err)
}

func (a *API) makeDir(w http.ResponseWriter, r *http.Request, fs *volume.FS, p string) {
	o, err := owner(r)
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	e, err := fs.MakeDir(p, r.URL.Query().Get("force") == "true", o)
	a.answer(w, r, http.StatusCreated, entryJSON(e), err)
}

func (a *API) readFile(w http.ResponseWriter, r *http.Request, fs *volume.FS, p string) {
	f, size, err := fs.ReadFile(p)
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.CopyN(w, f, size)
}

func (a *API) writeFile(w http.ResponseWriter, r *http.Request, fs *volume.FS, p string) {
	o, err := owner(r)
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	e, err := fs.WriteFile(p, r.Body, o)
	a.answer(w, r, http.StatusCreated, entryJSON(e), err)
}

// entryJSON is e as the REST API's VolumeEntryStat.
func entryJSON(e volume.Entry) rest.VolumeEntryStat {
	out := rest.VolumeEntryStat{Name: e.Name, Path: e.Path, Type: rest.VolumeEntryStatType(e.Type), Size: e.Size,
		Mode: e.Mode, Uid: e.UID, Gid: e.GID, Atime: e.Atime, Mtime: e.Mtime, Ctime: e.Ctime}
	if e.Target != "" {
		t := e.Target
		out.Target = &t
	}
	return out
}
