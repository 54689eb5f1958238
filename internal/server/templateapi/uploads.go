package templateapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/build"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
)

// Uploads of COPY sources (E2B's GET /templates/{templateID}/files/{hash}
// hands the SDK a URL to PUT a tar to). Moat serves that URL itself, on
// the API's own origin:
//
//	PUT /template-files/{hash}?team=…&template=…&expires=<unix>&sig=<hex>
//
// sig is an HMAC-SHA256 over team, template, hash and expiry with a key
// the API keeps, so the URL needs no API key (the SDK sends none) and
// cannot be altered or reused after it expires. The tar is streamed to
// build.FilesPath; each team has its own store, so one team can never
// supply another's files.
//
// The hash is not verified against the content: the SDK hashes
// "COPY <src> <dest>", each file's relative path, its full st_mode and
// st_size as decimal strings and its bytes, directories included, and
// neither the source and destination nor the directories' st_size
// (filesystem-dependent) can be recovered from the tar it uploads. A team
// that uploads content under a wrong hash only misleads its own builds.

// UploadPathPrefix is the path of upload URLs.
const UploadPathPrefix = "/template-files/"

// MaxUploadBytes bounds one uploaded tar.
const MaxUploadBytes = 1 << 30

var filesHashRE = regexp.MustCompile(`^[a-f0-9]{64}$`)

// uploadDir is team's content store (see build.FilesDir).
func (b *Config) uploadDir(team string) string { return build.FilesDir(b.DataDir, team) }

// uploadPath is where the tar of hash is kept for team.
func (b *Config) uploadPath(team, hash string) string {
	return build.FilesPath(b.DataDir, team, hash)
}

// HasUpload reports whether team uploaded the files of hash.
func (b *Config) HasUpload(team, hash string) bool {
	fi, err := os.Stat(b.uploadPath(team, hash))
	return err == nil && fi.Mode().IsRegular()
}

func (b *Config) sign(team, templateID, hash string, expires int64) string {
	m := hmac.New(sha256.New, b.UploadKey)
	// Length-prefixed, so no two tuples sign the same bytes.
	for _, f := range []string{team, templateID, hash, strconv.FormatInt(expires, 10)} {
		fmt.Fprintf(m, "%d:%s;", len(f), f)
	}
	return hex.EncodeToString(m.Sum(nil))
}

// uploadURL is a signed URL on the origin the request came to.
func (b *Config) uploadURL(r *http.Request, team, templateID, hash string) string {
	expires := b.now().Add(b.UploadTTL).Unix()
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	q := url.Values{"team": {team}, "template": {templateID}, "expires": {strconv.FormatInt(expires, 10)},
		"sig": {b.sign(team, templateID, hash, expires)}}
	return scheme + "://" + r.Host + UploadPathPrefix + hash + "?" + q.Encode()
}

func (b *Config) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

// checkUpload verifies an upload URL: 400 when malformed, 403 when the
// signature does not match or the URL expired.
func (b *Config) checkUpload(r *http.Request) (team, hash string, status int, msg string) {
	hash = strings.TrimPrefix(r.URL.Path, UploadPathPrefix)
	q := r.URL.Query()
	team, tpl, exp, sig := q.Get("team"), q.Get("template"), q.Get("expires"), q.Get("sig")
	expires, err := strconv.ParseInt(exp, 10, 64)
	switch {
	case !filesHashRE.MatchString(hash):
		return "", "", http.StatusBadRequest, "upload URL: the files hash must be 64 lower-case hex digits"
	case team == "" || tpl == "" || sig == "" || err != nil:
		return "", "", http.StatusBadRequest, "upload URL: team, template, expires and sig are required"
	case !hmac.Equal([]byte(sig), []byte(b.sign(team, tpl, hash, expires))):
		return "", "", http.StatusForbidden, "upload URL: invalid signature"
	case b.now().Unix() > expires:
		return "", "", http.StatusForbidden, "upload URL: expired; ask GET /templates/{templateID}/files/{hash} for a new one"
	}
	return team, hash, 0, ""
}

// ServeUpload handles PUT <UploadPathPrefix>{hash}, which the server
// routes here before its body cap and API-key check (the signature is the
// authorisation).
func (a *API) ServeUpload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		w.Header().Set("Allow", http.MethodPut)
		errhttp.Write(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	b := a.cfg
	team, hash, status, msg := b.checkUpload(r)
	if status != 0 {
		errhttp.Write(w, status, msg)
		return
	}
	if r.ContentLength > MaxUploadBytes {
		errhttp.Write(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("upload too large: limit is %d bytes", MaxUploadBytes))
		return
	}
	if err := b.store(team, hash, http.MaxBytesReader(w, r.Body, MaxUploadBytes)); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			errhttp.Write(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("upload too large: limit is %d bytes", MaxUploadBytes))
			return
		}
		a.d.Fail(w, r, err)
		return
	}
	a.d.Log.Debug("template files uploaded", "team", team, "hash", hash)
	w.WriteHeader(http.StatusOK)
}

// store streams body into team's content store under hash; a partial
// upload never becomes visible (temp file, then rename).
func (b *Config) store(team, hash string, body io.Reader) (retErr error) {
	dir := b.uploadDir(team)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("store upload: %w", err)
	}
	f, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		return fmt.Errorf("store upload: %w", err)
	}
	defer func() {
		if retErr != nil {
			f.Close()
			if err := os.Remove(f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
				retErr = errors.Join(retErr, err)
			}
		}
	}()
	if _, err := io.Copy(f, body); err != nil {
		return fmt.Errorf("store upload: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("store upload: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("store upload: %w", err)
	}
	if err := os.Rename(f.Name(), b.uploadPath(team, hash)); err != nil {
		return fmt.Errorf("store upload: %w", err)
	}
	return nil
}
