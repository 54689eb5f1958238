// Package volumeapi serves E2B's volume API for the server: /volumes
// (create, list, get, delete; API-key auth, per team) and the volume
// content API, /volumecontent/{volumeID}/file|dir|path (the volume's
// token), over the store's records and internal/volume's images.
package volumeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"log/slog"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/volume"
)

// Volume sizes: the default when POST /volumes names none (Moat's
// sizeMB), and the bounds of the field. Images are sparse: a volume costs
// what is written to it.
const (
	DefaultVolumeMB = 1024
	MaxVolumeMB     = 1 << 20
	minVolumeMB     = 8 // below this mkfs.ext4 leaves no usable space
)

// volumeRoot owns a new volume's root directory: "user" (1000:1000), the
// sandbox user of Moat's templates.
const volumeRoot = "1000:1000"

// volumeNameRE is E2B's NewVolume.name pattern, with a length bound.
var volumeNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)

// Store keeps teams' volumes (the records; the images are the volume
// manager's).
type Store interface {
	// InsertVolume stores v (ErrAlreadyExists for a name team already
	// uses, ErrInvalidArgument for a bad team).
	InsertVolume(ctx context.Context, v store.Volume) error
	// GetVolume finds team's volume by ID or name; another team's is
	// ErrNotFound. Team "" finds any team's by ID (the volume content
	// API, authorized by the volume's token).
	GetVolume(ctx context.Context, team, ref string) (store.Volume, error)
	// ListVolumes returns team's volumes by name.
	ListVolumes(ctx context.Context, team string) ([]store.Volume, error)
	// DeleteVolume removes team's volume record (ErrNotFound).
	DeleteVolume(ctx context.Context, team, id string) error
}

// Deps is what the API uses of the server.
type Deps struct {
	Store   Store
	Volumes *volume.Manager
	Log     *slog.Logger
	// Team is the caller's team, which the server's API-key check put in
	// the request.
	Team func(*http.Request) string
	// Fail answers with err as E2B's JSON error and logs it once.
	Fail func(http.ResponseWriter, *http.Request, error)
	// Decode reads a required JSON body into v; when it fails it has
	// answered already (400, or 413 for an oversize body).
	Decode func(w http.ResponseWriter, r *http.Request, v any) bool
	// Node is recorded as the node of the volumes created here ("" for a
	// server alone).
	Node string
}

// API holds the volume API's handlers.
type API struct {
	d     Deps
	vmux  *http.ServeMux // the volume content API
	holds holds          // live sandboxes' volumes (mounts.go)
}

// New returns the API.
func New(d Deps) *API {
	a := &API{d: d}
	a.vmux = a.contentRoutes()
	return a
}

// Register adds the /volumes routes to m behind auth; on a nil API
// (volumes off) they answer 501.
func (a *API) Register(m *http.ServeMux, auth func(http.HandlerFunc) http.HandlerFunc) {
	m.HandleFunc("GET /volumes", auth(a.on(a.List)))
	m.HandleFunc("POST /volumes", auth(a.on(a.Create)))
	m.HandleFunc("GET /volumes/{volumeID}", auth(a.on(a.Get)))
	m.HandleFunc("DELETE /volumes/{volumeID}", auth(a.on(a.Delete)))
}

// on is h, or 501 on a nil API (h is then a method value of a nil *API,
// never called).
func (a *API) on(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a == nil {
			off(w, r)
			return
		}
		h(w, r)
	}
}

func off(w http.ResponseWriter, r *http.Request) {
	errhttp.WriteError(w, errdefs.Public(errdefs.ErrNotImplemented, r.Method+" "+r.URL.Path+" is not implemented by this server"))
}

func volumeJSON(v store.Volume) rest.VolumeAndToken {
	size := v.SizeMB
	return rest.VolumeAndToken{VolumeID: v.ID, Name: v.Name, Token: v.Token, SizeMB: &size}
}

// Create is POST /volumes: 201 with the volume and its token; a
// name the team already uses is 409, a bad name or size 400.
func (a *API) Create(w http.ResponseWriter, r *http.Request) {
	var body rest.NewVolume
	if !a.d.Decode(w, r, &body) {
		return
	}
	if !volumeNameRE.MatchString(body.Name) {
		a.d.Fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument,
			"invalid volume name %q: want 1 to 128 characters of a-z, A-Z, 0-9, '_' and '-'", body.Name))
		return
	}
	size := DefaultVolumeMB
	if body.SizeMB != nil {
		size = *body.SizeMB
	}
	if size < minVolumeMB || size > MaxVolumeMB {
		a.d.Fail(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid sizeMB %d: want %d to %d", size, minVolumeMB, MaxVolumeMB))
		return
	}
	v := store.Volume{ID: volume.NewID(), Team: a.d.Team(r), Name: body.Name, SizeMB: size,
		Token: volume.NewToken(), CreatedAt: time.Now(), Node: a.d.Node}
	if err := a.d.Store.InsertVolume(r.Context(), v); err != nil {
		if errors.Is(err, errdefs.ErrAlreadyExists) {
			err = errdefs.Publicf(errdefs.ErrAlreadyExists, "volume %q already exists", v.Name)
		}
		a.d.Fail(w, r, err)
		return
	}
	if err := a.d.Volumes.Create(r.Context(), v.ID, v.SizeMB, volumeRoot); err != nil {
		// Not the request's context: the record must go even if the
		// client left.
		if derr := a.d.Store.DeleteVolume(context.WithoutCancel(r.Context()), v.Team, v.ID); derr != nil {
			err = fmt.Errorf("%w (and removing its record: %v)", err, derr)
		}
		a.d.Fail(w, r, err)
		return
	}
	a.d.Log.Info("volume created", "volume", v.ID, "team", v.Team, "size_mb", v.SizeMB)
	errhttp.WriteJSON(w, http.StatusCreated, volumeJSON(v))
}

// List is GET /volumes: the team's volumes, by name.
func (a *API) List(w http.ResponseWriter, r *http.Request) {
	vs, err := a.d.Store.ListVolumes(r.Context(), a.d.Team(r))
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	out := make([]rest.Volume, 0, len(vs))
	for _, v := range vs {
		size := v.SizeMB
		out = append(out, rest.Volume{VolumeID: v.ID, Name: v.Name, SizeMB: &size})
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}

// teamVolume finds the caller's volume of the path's volumeID (by ID;
// another team's is 404 like an unknown one).
func (a *API) teamVolume(r *http.Request) (store.Volume, error) {
	id := r.PathValue("volumeID")
	v, err := a.d.Store.GetVolume(r.Context(), a.d.Team(r), id)
	if err != nil || v.ID != id {
		return store.Volume{}, errdefs.Publicf(errdefs.ErrNotFound, "volume %q not found", id)
	}
	return v, nil
}

// Get is GET /volumes/{volumeID}.
func (a *API) Get(w http.ResponseWriter, r *http.Request) {
	v, err := a.teamVolume(r)
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusOK, volumeJSON(v))
}

// Delete is DELETE /volumes/{volumeID}: 204, freeing the volume's
// space; 409 while a sandbox mounts it.
func (a *API) Delete(w http.ResponseWriter, r *http.Request) {
	v, err := a.teamVolume(r)
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	err = a.d.Volumes.Remove(r.Context(), v.ID, func(ctx context.Context) error {
		return a.d.Store.DeleteVolume(ctx, v.Team, v.ID)
	})
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	a.d.Log.Info("volume deleted", "volume", v.ID, "team", v.Team)
	w.WriteHeader(http.StatusNoContent)
}
