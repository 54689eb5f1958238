package oci

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// blobCache stores verified blobs by digest under dir/blobs/sha256.
type blobCache struct {
	dir string
}

func (c blobCache) blobsDir() string { return filepath.Join(c.dir, "blobs") }

// path is where the blob with digest lives; digest must be a valid sha256.
func (c blobCache) path(digest string) (string, error) {
	hexSum, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexSum) != 64 {
		return "", fmt.Errorf("digest %q: only sha256 is supported: %w", digest, ErrUnsupported)
	}
	if _, err := hex.DecodeString(hexSum); err != nil || strings.ToLower(hexSum) != hexSum {
		return "", fmt.Errorf("digest %q: %w", digest, ErrUnsupported)
	}
	return filepath.Join(c.blobsDir(), "sha256", hexSum), nil
}

// has reports whether the blob is cached with the expected size.
func (c blobCache) has(digest string, size int64) (string, bool) {
	p, err := c.path(digest)
	if err != nil {
		return "", false
	}
	fi, err := os.Stat(p)
	return p, err == nil && fi.Mode().IsRegular() && (size < 0 || fi.Size() == size)
}

// put copies at most size bytes of r into the cache, verifies the digest
// and the size, and publishes the blob atomically. It returns the path.
func (c blobCache) put(digest string, size int64, r io.Reader) (_ string, retErr error) {
	dst, err := c.path(digest)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("blob cache: %w", err)
	}
	tmp, err := os.CreateTemp(c.blobsDir(), ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("blob cache: %w", err)
	}
	defer func() {
		if retErr != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, size+1))
	if err != nil {
		return "", fmt.Errorf("download %s: %w", digest, err)
	}
	if n != size {
		return "", fmt.Errorf("download %s: got %d bytes, manifest says %d: %w", digest, n, size, ErrUnsafeLayer)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
		return "", fmt.Errorf("download %s: content has digest %s: %w", digest, got, ErrUnsafeLayer)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return "", fmt.Errorf("blob cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("blob cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("blob cache: %w", err)
	}
	return dst, nil
}
