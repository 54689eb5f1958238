package layercache

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/template"
)

// GCStats says what one collection of the layer cache removed and kept.
type GCStats struct {
	Layers   int // layers removed (unused too long, or beyond the cap)
	Replaced int // replaced generations and dangling entries removed
	WorkDirs int // work directories of builds that no longer run
	Kept     int // layers kept
}

// RefsName is the file, in a template's directory, listing the keys
// of the layers it was built from (kept by GC while the template exists).
const RefsName = "layers.json"

// WriteRefs records keys as the layers template name was built from.
func WriteRefs(dataDir, name string, keys []string) error {
	b, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	p := filepath.Join(template.Layout{DataDir: dataDir}.TemplateDir(name), RefsName)
	if err := os.WriteFile(p+".tmp", b, 0o644); err != nil {
		return fmt.Errorf("record layers: %w", err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return fmt.Errorf("record layers: %w", err)
	}
	return nil
}

// Refs reads the keys of the layers every template under dataDir was
// built from.
func Refs(dataDir string) (map[string]bool, error) {
	files, err := filepath.Glob(filepath.Join(dataDir, "templates", "*", RefsName))
	if err != nil {
		return nil, err
	}
	refs := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the template is being removed
		}
		var keys []string
		if err := json.Unmarshal(b, &keys); err != nil {
			return nil, fmt.Errorf("layer refs %s: %w", f, err)
		}
		for _, k := range keys {
			refs[k] = true
		}
	}
	return refs, nil
}

// cached is one layer entry of the store.
type cached struct {
	key, target string
	used        time.Time
}

// Policy says which unreferenced layers go: those unused for longer than
// maxAge, the least recently used beyond maxLayers, and more of the least
// recently used while the filesystem has less than minFree of its space
// free (free reports that share).
type Policy struct {
	Now       time.Time
	MaxAge    time.Duration
	MaxLayers int
	MinFree   float64
	Free      func() (float64, error)
}

// gc collects the store; the caller holds the exclusive lock, so no build
// runs and every work directory is stale.
func (s Store) GC(refs map[string]bool, p Policy) (GCStats, error) {
	var st GCStats
	var errs []error
	rm := func(name string) {
		if err := os.RemoveAll(filepath.Join(s.dir, name)); err != nil {
			errs = append(errs, err)
		}
	}
	work, _ := os.ReadDir(filepath.Join(s.dir, ".work"))
	for _, w := range work {
		rm(filepath.Join(".work", w.Name()))
		st.WorkDirs++
	}
	unref, err := s.scan(refs, rm, &st)
	if err != nil {
		return st, err
	}
	slices.SortFunc(unref, func(a, b cached) int { return a.used.Compare(b.used) })
	for i, c := range unref {
		if p.Now.Sub(c.used) <= p.MaxAge && len(unref)-i <= p.MaxLayers && !p.lowOnDisk() {
			st.Kept += len(unref) - i
			break
		}
		rm(c.key) // the link first: a half-removed tree is never found
		rm(c.target)
		st.Layers++
	}
	return st, errors.Join(errs...)
}

// scan removes what is not a current layer (temporary and dangling links,
// replaced generations) and returns the layers refs does not name; the
// referenced ones count as kept.
func (s Store) scan(refs map[string]bool, rm func(string), st *GCStats) ([]cached, error) {
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("layer cache: %w", err)
	}
	current := map[string]bool{}
	var unref []cached
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, ".link-"):
			rm(name)
		case keyRE.MatchString(name):
			target, err := os.Readlink(filepath.Join(s.dir, name))
			fi, lerr := os.Lstat(filepath.Join(s.dir, name))
			if m := genRE.FindStringSubmatch(target); err != nil || lerr != nil || m == nil || m[1] != name {
				rm(name) // not a layer link: dangling or foreign
				st.Replaced++
				continue
			}
			current[target] = true
			if refs[name] {
				st.Kept++
				continue
			}
			unref = append(unref, cached{key: name, target: target, used: fi.ModTime()})
		}
	}
	for _, e := range ents {
		if genRE.MatchString(e.Name()) && !current[e.Name()] {
			rm(e.Name())
			st.Replaced++
		}
	}
	return unref, nil
}

// lowOnDisk reports whether the filesystem has less than minFree of its
// space free (false when that cannot be told).
func (p Policy) lowOnDisk() bool {
	if p.Free == nil || p.MinFree <= 0 {
		return false
	}
	f, err := p.Free()
	return err == nil && f < p.MinFree
}

// FreeShare is the share of the filesystem holding dir that is free for
// unprivileged use.
func FreeShare(dir string) func() (float64, error) {
	return func() (float64, error) {
		var fs unix.Statfs_t
		if err := unix.Statfs(dir, &fs); err != nil {
			return 0, err
		}
		if fs.Blocks == 0 {
			return 1, nil
		}
		return float64(fs.Bavail) / float64(fs.Blocks), nil
	}
}
