package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/moatsh/moat/internal/errdefs"
)

// layerMediaTypes are the layer formats Unpack reads.
var layerMediaTypes = map[types.MediaType]bool{
	types.DockerLayer:             true, // tar+gzip
	types.OCILayer:                true, // tar+gzip
	types.OCILayerZStd:            true,
	types.OCIUncompressedLayer:    true,
	types.DockerUncompressedLayer: true,
}

// downloadJobs is how many blobs Pull fetches at once.
const downloadJobs = 4

// Pull resolves ref (e.g. "docker.io/library/python:3.12" or
// "localhost:5000/img@sha256:…") to the image of one platform and makes its
// config and layers available in the cache at cacheDir, downloading only
// blobs the cache lacks. Errors: ErrImageNotFound (also: no image for the
// platform), ErrUnauthorized, ErrDenied, ErrTooLarge, ErrUnsupported,
// errdefs.ErrInvalidArgument for a bad reference, errdefs.ErrUnavailable
// when the registry cannot be reached.
func Pull(ctx context.Context, ref, cacheDir string, opts ...PullOpt) (*Image, error) {
	o := pullOptions{platform: DefaultPlatform, maxSize: DefaultMaxSize}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	img, plat, err := remoteImage(ctx, ref, o)
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, classify(ref, err)
	}
	mf, err := img.Manifest()
	if err != nil {
		return nil, classify(ref, err)
	}
	out := &Image{Ref: ref, Digest: digest.String(), Platform: o.platform}
	if out.Layers, err = layersOf(ref, mf, o.maxSize); err != nil {
		return nil, err
	}
	cache := blobCache{dir: cacheDir}
	cfgPath, ok := cache.has(mf.Config.Digest.String(), mf.Config.Size)
	if !ok {
		raw, err := img.RawConfigFile()
		if err != nil {
			return nil, classify(ref, err)
		}
		if cfgPath, err = cache.put(mf.Config.Digest.String(), mf.Config.Size, bytes.NewReader(raw)); err != nil {
			return nil, fmt.Errorf("%s: config: %w", ref, err)
		}
	}
	if out.Config, err = readConfig(cfgPath, plat); err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	if err := fetchLayers(ref, img, cache, out.Layers, o.log); err != nil {
		return nil, err
	}
	return out, nil
}

// remoteImage resolves ref at its registry to the image for o's platform.
func remoteImage(ctx context.Context, ref string, o pullOptions) (v1.Image, *v1.Platform, error) {
	plat, err := v1.ParsePlatform(o.platform)
	if err != nil || plat.OS == "" || plat.Architecture == "" {
		return nil, nil, fmt.Errorf("platform %q: want os/arch[/variant]: %w", o.platform, errdefs.ErrInvalidArgument)
	}
	var nameOpts []name.Option
	if o.insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nameOpts...)
	if err != nil {
		return nil, nil, fmt.Errorf("image reference %q: %v: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithUserAgent("moat"), remote.WithPlatform(*plat)}
	if o.transport != nil {
		ropts = append(ropts, remote.WithTransport(o.transport))
	}
	if o.creds != nil {
		ropts = append(ropts, remote.WithAuth(authn.FromConfig(authn.AuthConfig{
			Username: o.creds.Username, Password: o.creds.Password, RegistryToken: o.creds.Token,
		})))
	}
	desc, err := remote.Get(r, ropts...)
	if err != nil {
		return nil, nil, classify(ref, err)
	}
	img, err := platformImage(ref, desc, plat)
	if err != nil {
		return nil, nil, err
	}
	return img, plat, nil
}

// layersOf checks the manifest's layers (media types, sizes, the total
// against maxSize) and lists them.
func layersOf(ref string, mf *v1.Manifest, maxSize int64) ([]Layer, error) {
	var total int64
	var out []Layer
	for _, l := range mf.Layers {
		if !layerMediaTypes[l.MediaType] {
			return nil, fmt.Errorf("%s: layer %s has media type %q: %w", ref, l.Digest, l.MediaType, ErrUnsupported)
		}
		if l.Size < 0 {
			return nil, fmt.Errorf("%s: layer %s: negative size: %w", ref, l.Digest, ErrUnsupported)
		}
		total += l.Size
		if total > maxSize {
			return nil, fmt.Errorf("%s: layers exceed %d bytes: %w", ref, maxSize, ErrTooLarge)
		}
		out = append(out, Layer{Digest: l.Digest.String(), MediaType: string(l.MediaType), Size: l.Size})
	}
	return out, nil
}

// fetchLayers fills in each layer's Path, downloading (downloadJobs at a
// time) those the cache lacks.
func fetchLayers(ref string, img v1.Image, cache blobCache, layers []Layer, log *slog.Logger) error {
	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, downloadJobs)
		errs = make([]error, len(layers))
	)
	for i := range layers {
		l := &layers[i]
		if p, ok := cache.has(l.Digest, l.Size); ok {
			l.Path = p
			log.Debug("layer cached", "digest", l.Digest)
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			l.Path, errs[i] = fetchLayer(ref, img, cache, *l)
			if errs[i] == nil {
				log.Info("layer downloaded", "digest", l.Digest, "bytes", l.Size)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func fetchLayer(ref string, img v1.Image, cache blobCache, l Layer) (string, error) {
	h, err := v1.NewHash(l.Digest)
	if err != nil {
		return "", fmt.Errorf("%s: layer %s: %w", ref, l.Digest, ErrUnsupported)
	}
	rl, err := img.LayerByDigest(h)
	if err != nil {
		return "", classify(ref, err)
	}
	rc, err := rl.Compressed()
	if err != nil {
		return "", classify(ref, err)
	}
	defer rc.Close()
	p, err := cache.put(l.Digest, l.Size, rc)
	if err != nil {
		return "", fmt.Errorf("%s: %w", ref, classify(ref, err))
	}
	return p, nil
}

// platformImage picks the image for plat out of an index, or checks a plain
// image's platform.
func platformImage(ref string, desc *remote.Descriptor, plat *v1.Platform) (v1.Image, error) {
	if !desc.MediaType.IsIndex() {
		img, err := desc.Image()
		if err != nil {
			return nil, classify(ref, err)
		}
		return img, nil
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, classify(ref, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, classify(ref, err)
	}
	var have []string
	for _, m := range im.Manifests {
		if m.Platform == nil || !m.MediaType.IsImage() {
			continue
		}
		have = append(have, m.Platform.String())
		if m.Platform.OS == plat.OS && m.Platform.Architecture == plat.Architecture &&
			(plat.Variant == "" || m.Platform.Variant == plat.Variant) {
			img, err := idx.Image(m.Digest)
			if err != nil {
				return nil, classify(ref, err)
			}
			return img, nil
		}
	}
	return nil, fmt.Errorf("%s: no %s image in the index (it has: %s): %w",
		ref, plat, strings.Join(have, ", "), ErrImageNotFound)
}

// readConfig reads the runtime defaults from a cached config blob and
// checks the image's platform when the config names one.
func readConfig(path string, plat *v1.Platform) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return Config{}, fmt.Errorf("config: %v: %w", err, ErrUnsupported)
	}
	if (cf.OS != "" && cf.OS != plat.OS) || (cf.Architecture != "" && cf.Architecture != plat.Architecture) {
		return Config{}, fmt.Errorf("image is %s/%s, want %s: %w", cf.OS, cf.Architecture, plat, ErrImageNotFound)
	}
	c := cf.Config
	return Config{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User,
		Entrypoint: c.Entrypoint, Cmd: c.Cmd, Labels: c.Labels}, nil
}

// classify turns a registry error into this package's kinds.
func classify(ref string, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		codes := map[transport.ErrorCode]bool{}
		for _, d := range te.Errors {
			codes[d.Code] = true
		}
		switch {
		case te.StatusCode == http.StatusUnauthorized || codes[transport.UnauthorizedErrorCode]:
			return fmt.Errorf("%s: registry rejected the credentials (or needs some): %v: %w", ref, err, ErrUnauthorized)
		case te.StatusCode == http.StatusForbidden || codes[transport.DeniedErrorCode]:
			return fmt.Errorf("%s: %v: %w", ref, err, ErrDenied)
		case te.StatusCode == http.StatusNotFound || codes[transport.ManifestUnknownErrorCode] ||
			codes[transport.NameUnknownErrorCode] || codes[transport.BlobUnknownErrorCode]:
			return fmt.Errorf("%s: %v: %w", ref, err, ErrImageNotFound)
		case te.StatusCode == http.StatusTooManyRequests || te.StatusCode >= 500:
			return fmt.Errorf("%s: %v: %w", ref, err, errdefs.ErrUnavailable)
		}
		return fmt.Errorf("%s: %w", ref, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", ref, err)
	}
	// Already one of ours (cache, digest checks).
	for _, k := range []error{ErrUnsafeLayer, ErrUnsupported, ErrTooLarge} {
		if errors.Is(err, k) {
			return err
		}
	}
	var se interface{ Temporary() bool }
	if errors.As(err, &se) || strings.Contains(err.Error(), "dial tcp") {
		return fmt.Errorf("%s: registry unreachable: %v: %w", ref, err, errdefs.ErrUnavailable)
	}
	if strings.Contains(err.Error(), "unsupported MediaType") || strings.Contains(err.Error(), "schema 1") {
		return fmt.Errorf("%s: %v: %w", ref, err, ErrUnsupported)
	}
	return fmt.Errorf("%s: %w", ref, err)
}
