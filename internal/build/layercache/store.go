package layercache

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Store is the per-step layer cache, <DataDir>/cache/layers:
//
//	<key>          symlink to the layer's current generation; its mtime is the last use
//	<key>.<gen>/   a full root filesystem tree, never written after it was committed
//	.work/<id>/    a running build's trees (layers being made, the template's copy)
//	.lock          flock: shared while a build runs, exclusive while GC runs
//
// Layers are hard-link copies of each other (cp -al) and of the templates
// made from them, so no file inode in any of them may ever be written: the
// build's writers (upper.Apply, build.stageCopy, checkConfig, rootfs.Finalize)
// unlink and create, or rename, and change owners and modes only of
// directories, which a hard-link copy does not share.
type Store struct {
	dir string
}

// keyRE is a layer key: a hex sha256.
var keyRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// genRE is a generation directory's name.
var genRE = regexp.MustCompile(`^([0-9a-f]{64})\.([0-9a-f]{16})$`)

func New(dataDir string) Store {
	return Store{dir: filepath.Join(dataDir, "cache", "layers")}
}

// Dir is the store's directory, <DataDir>/cache/layers.
func (s Store) Dir() string { return s.dir }

// lock takes the store's flock, shared (a build) or exclusive (GC). With
// wait false an exclusive lock that is not free at once is ok=false.
func (s Store) Lock(exclusive, wait bool) (unlock func(), ok bool, err error) {
	if err := os.MkdirAll(filepath.Join(s.dir, ".work"), 0o700); err != nil {
		return nil, false, fmt.Errorf("layer cache: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(s.dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("layer cache lock: %w", err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if !wait {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("layer cache lock: %w", err)
	}
	return func() { f.Close() }, true, nil
}

// workDir makes a build's work directory (on the layers' filesystem, so
// a finished tree becomes a layer with a rename). Hold the shared lock.
func (s Store) WorkDir() (string, error) {
	d, err := os.MkdirTemp(filepath.Join(s.dir, ".work"), "b-*")
	if err != nil {
		return "", fmt.Errorf("layer cache: work dir: %w", err)
	}
	return d, nil
}

// lookup returns the tree of key's layer and marks it used; ok=false when
// there is none. Hold the shared lock while using the tree.
func (s Store) Lookup(key string) (dir string, ok bool) {
	if !keyRE.MatchString(key) {
		return "", false
	}
	link := filepath.Join(s.dir, key)
	target, err := os.Readlink(link)
	if err != nil {
		return "", false
	}
	if m := genRE.FindStringSubmatch(target); m == nil || m[1] != key {
		return "", false
	}
	dir = filepath.Join(s.dir, target)
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return "", false
	}
	touch(link)
	return dir, true
}

// commit makes tree (under the work dir) the layer of key, replacing an
// earlier one (which stays on disk until GC: another build may be copying
// it), and returns the layer's tree.
func (s Store) Commit(key, tree string) (string, error) {
	if !keyRE.MatchString(key) {
		return "", fmt.Errorf("layer cache: bad key %q", key)
	}
	gen := key + "." + randomHex(8)
	dir := filepath.Join(s.dir, gen)
	if err := os.Rename(tree, dir); err != nil {
		return "", fmt.Errorf("layer cache: commit %s: %w", key, err)
	}
	tmp := filepath.Join(s.dir, ".link-"+gen)
	if err := os.Symlink(gen, tmp); err != nil {
		return "", fmt.Errorf("layer cache: commit %s: %w", key, err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, key)); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("layer cache: commit %s: %w", key, err)
	}
	return dir, nil
}

// touch sets a symlink's own mtime to now (the layer's last use).
func touch(link string) {
	now := unix.NsecToTimespec(time.Now().UnixNano())
	_ = unix.UtimesNanoAt(unix.AT_FDCWD, link, []unix.Timespec{now, now}, unix.AT_SYMLINK_NOFOLLOW)
}

// LinkTree makes dst (which must not exist) a copy of the tree src whose
// files are hard links to src's (cp -al: directories are new, owners,
// modes and times kept; nothing is followed or run).
func LinkTree(ctx context.Context, src, dst string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "cp", "-al", "--", src, dst)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("link copy of a layer: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// The key chain. A layer's key is a hash of everything its tree depends
// on: key0 names the base (BaseImageKey, BaseTemplateKey), and each step
// extends the chain with StepKey, so a change anywhere changes the keys of
// every later step. Keys include the team: layers are never shared
// between teams (a cache hit would tell one team what another built).

// keyVersion is part of every key; bump it when what a layer holds for
// the same inputs changes (upper.Apply, the COPY script, finalize).
const keyVersion = "moat-layer/1"

// keyOf hashes parts, each length-prefixed so no two lists collide.
func keyOf(parts ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		io.WriteString(h, p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// BaseImageKey is key0 of a build from an image: the team, the image as
// template.ImageCacheKey names it (manifest digest, platform, what
// rootfs.FinalizeImage adds) and the hash of the envd installed into it.
func BaseImageKey(team, imageKey, envdSum string) string {
	return keyOf(keyVersion, "image", team, imageKey, envdSum)
}

// TemplateIdentity is what names a template's rootfs as a base: its ID,
// the build that made it (changes with every rebuild) and its stamp
// (changes when a built-in template's rootfs is rebuilt or its envd
// refreshed).
type TemplateIdentity struct {
	ID, BuildID, Stamp string
}

// BaseTemplateKey is key0 of a build from another template.
func BaseTemplateKey(team string, src TemplateIdentity, envdSum string) string {
	return keyOf(keyVersion, "template", team, src.ID, src.BuildID, src.Stamp, envdSum)
}

// StepInput is a step's canonical form for the key chain: its type and
// arguments and, for RUN and COPY, the user, workdir and environment it
// runs with and (COPY) the sha256 of the uploaded archive.
type StepInput struct {
	Type     string
	Args     []string
	User     string            `json:",omitempty"`
	Workdir  string            `json:",omitempty"`
	Env      map[string]string `json:",omitempty"` // encoding/json sorts the names
	FilesSum string            `json:",omitempty"`
}

// StepKey extends the chain at prev with one step.
func StepKey(prev string, in StepInput) string {
	b, _ := json.Marshal(in)
	return keyOf(keyVersion, "step", prev, string(b))
}
