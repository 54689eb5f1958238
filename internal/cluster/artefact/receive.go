package artefact

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Receive reads a stream that Write made, keeps it in a file beside dest
// until its digest is want (else ErrDigest, and nothing is extracted),
// then extracts it into dest, which must not exist: the tree appears
// there whole or not at all.
func Receive(r io.Reader, want, dest string) error {
	parent := filepath.Dir(dest)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return fmt.Errorf("receive artefact: %w", err)
	}
	f, err := os.CreateTemp(parent, ".stream-*")
	if err != nil {
		return fmt.Errorf("receive artefact: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), r); err != nil {
		return fmt.Errorf("receive artefact: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%w (sha256 %s, recorded %s)", ErrDigest, got, want)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("receive artefact: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".tree-*")
	if err != nil {
		return fmt.Errorf("receive artefact: %w", err)
	}
	if err := extract(f, tmp); err != nil {
		return errors.Join(fmt.Errorf("receive artefact: %w", err), os.RemoveAll(tmp))
	}
	if err := os.Rename(tmp, dest); err != nil {
		return errors.Join(fmt.Errorf("receive artefact: %w", err), os.RemoveAll(tmp))
	}
	return nil
}

// extract writes the entries of the tar stream r under root. An entry
// may only go into a directory this stream made (never through a link),
// and a hard link only to a file it made.
func extract(r io.Reader, root string) error {
	dirs := map[string]bool{".": true}
	files := map[string]bool{}
	type dirTime struct {
		path string
		t    time.Time
	}
	var dirTimes []dirTime
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(filepath.FromSlash(hdr.Name))
		if !filepath.IsLocal(name) || !dirs[filepath.Dir(name)] {
			return fmt.Errorf("entry %q: outside the tree or not in a directory of it", hdr.Name)
		}
		p := filepath.Join(root, name)
		if err := extractEntry(tr, hdr, root, p, name, files); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			dirs[name] = true
			dirTimes = append(dirTimes, dirTime{p, hdr.ModTime})
		case tar.TypeReg:
			files[name] = true
		}
		if hdr.Typeflag != tar.TypeLink {
			if err := own(p, hdr); err != nil {
				return fmt.Errorf("entry %q: %w", hdr.Name, err)
			}
		}
	}
	for _, d := range slices.Backward(dirTimes) { // after their contents changed them
		if err := os.Chtimes(d.path, d.t, d.t); err != nil {
			return err
		}
	}
	return nil
}

// extractEntry makes one entry at p.
func extractEntry(tr *tar.Reader, hdr *tar.Header, root, p, name string, files map[string]bool) error {
	mode := uint32(hdr.Mode & 0o7777)
	switch hdr.Typeflag {
	case tar.TypeDir:
		return os.Mkdir(p, 0o700)
	case tar.TypeReg:
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		return errors.Join(err, f.Close())
	case tar.TypeSymlink:
		return os.Symlink(hdr.Linkname, p)
	case tar.TypeLink:
		target := filepath.Clean(filepath.FromSlash(hdr.Linkname))
		if !files[target] {
			return fmt.Errorf("hard link to %q, not a file of the tree", hdr.Linkname)
		}
		return os.Link(filepath.Join(root, target), p)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[hdr.Typeflag]
		return unix.Mknod(p, kind|mode, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))))
	}
	return fmt.Errorf("type %q: not part of a template", hdr.Typeflag)
}

// own gives p the owner, mode and time of hdr (a link keeps its target's
// mode: only its owner and time are set).
func own(p string, hdr *tar.Header) error {
	if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeSymlink {
		ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	// After the chown, which clears the setuid and setgid bits.
	if err := unix.Chmod(p, uint32(hdr.Mode&0o7777)); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeDir {
		return nil // its time is set once its contents are in
	}
	return os.Chtimes(p, hdr.ModTime, hdr.ModTime)
}
