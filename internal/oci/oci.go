package oci

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/moatsh/moat/internal/errdefs"
)

// Image is one platform's image, pulled: its blobs are in the cache.
type Image struct {
	Ref      string // the reference as given
	Digest   string // manifest digest of the platform image, "sha256:…"
	Platform string // "linux/amd64"
	Config   Config
	Layers   []Layer // bottom first
}

// Layer is one cached layer blob.
type Layer struct {
	Digest    string // of the blob as served (compressed)
	MediaType string
	Size      int64  // bytes of the blob
	Path      string // the verified blob in the cache
}

// Config is the part of an image's config that becomes template defaults
// for processes started in a sandbox.
type Config struct {
	Env        []string          `json:"env,omitempty"`
	WorkingDir string            `json:"workingDir,omitempty"`
	User       string            `json:"user,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Cmd        []string          `json:"cmd,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
}

// Credentials authenticate to a registry: a username and password (for
// Google registries with a service account key, username "_json_key" and
// the key as password), or a bearer token the registry accepts as is.
type Credentials struct {
	Username string
	Password string
	Token    string
}

// The error kinds of this package. Each wraps an errdefs kind.
var (
	// ErrImageNotFound: the repository, tag or digest does not exist, or
	// the image has no manifest for the wanted platform.
	ErrImageNotFound = fmt.Errorf("image %w", errdefs.ErrNotFound)
	// ErrUnauthorized: the registry refused the credentials (or their
	// absence).
	ErrUnauthorized = fmt.Errorf("registry authentication: %w", errdefs.ErrUnauthenticated)
	// ErrDenied: the credentials are valid but may not pull the image.
	ErrDenied = fmt.Errorf("registry access: %w", errdefs.ErrPermissionDenied)
	// ErrUnsafeLayer: a layer entry would write outside the target or
	// through a symlink, or is malformed.
	ErrUnsafeLayer = fmt.Errorf("unsafe layer: %w", errdefs.ErrInvalidArgument)
	// ErrTooLarge: the image is bigger than the configured limit.
	ErrTooLarge = fmt.Errorf("image too large: %w", errdefs.ErrResourceExhausted)
	// ErrUnsupported: a media type or layer format this package does not
	// handle.
	ErrUnsupported = fmt.Errorf("unsupported image: %w", errdefs.ErrInvalidArgument)
)

// DefaultMaxSize caps the uncompressed size of all layers of an image
// together (and, separately, of all blobs downloaded for it).
const DefaultMaxSize int64 = 16 << 30

// DefaultPlatform is the platform Pull picks from an index.
const DefaultPlatform = "linux/amd64"

// PullOpt changes one Pull.
type PullOpt func(*pullOptions)

type pullOptions struct {
	creds     *Credentials
	platform  string
	insecure  bool
	transport http.RoundTripper
	maxSize   int64
	log       *slog.Logger
}

// WithCredentials authenticates to the registry.
func WithCredentials(c Credentials) PullOpt { return func(o *pullOptions) { o.creds = &c } }

// WithPlatform picks another platform ("os/arch[/variant]") from an index.
func WithPlatform(p string) PullOpt { return func(o *pullOptions) { o.platform = p } }

// WithInsecure allows plain HTTP to the registry. Loopback, *.local and
// private (RFC 1918) registries use HTTP without it.
func WithInsecure() PullOpt { return func(o *pullOptions) { o.insecure = true } }

// WithTransport sets the HTTP transport (tests count requests with it).
func WithTransport(t http.RoundTripper) PullOpt { return func(o *pullOptions) { o.transport = t } }

// WithMaxDownload caps the total size of the blobs of one image.
func WithMaxDownload(n int64) PullOpt { return func(o *pullOptions) { o.maxSize = n } }

// WithPullLogger logs downloads and cache hits.
func WithPullLogger(l *slog.Logger) PullOpt { return func(o *pullOptions) { o.log = l } }

// UnpackOpt changes one Unpack.
type UnpackOpt func(*unpackOptions)

type unpackOptions struct {
	maxSize int64
	log     *slog.Logger
}

// WithMaxSize caps the uncompressed size of all layers together.
func WithMaxSize(n int64) UnpackOpt { return func(o *unpackOptions) { o.maxSize = n } }

// WithUnpackLogger logs skipped entries (device nodes).
func WithUnpackLogger(l *slog.Logger) UnpackOpt { return func(o *unpackOptions) { o.log = l } }

// UnpackStats counts what Unpack did.
type UnpackStats struct {
	Layers       int
	Entries      int
	Bytes        int64 // uncompressed tar bytes read
	Whiteouts    int
	SkippedNodes int // device nodes not created
}
