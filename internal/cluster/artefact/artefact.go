// Package artefact moves a template's root filesystem from the node that
// built it to a node that never did. A tree travels as a deterministic
// tar stream (paths in lexical order, numeric owners, times in whole
// seconds, no user names), so the SHA-256 of the stream is the tree's
// digest: the builder records it in the shared store when the build
// finishes, and a receiver keeps the stream on disk until its digest
// matches the recorded one, extracting nothing before. A tampered tree,
// on the builder's disk or on the wire, is refused.
//
// What a tree keeps: directories, regular files, symbolic and hard
// links, device nodes and FIFOs, with mode, owner and modification time.
// Extended attributes (file capabilities) do not travel.
package artefact

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrDigest is the error of a stream whose digest is not the recorded one.
var ErrDigest = errors.New("the template's artefact does not match its recorded digest: refused")

// Digest is the digest of the tree at dir (what Write would send).
func Digest(dir string) (string, error) {
	return Write(io.Discard, dir)
}

// Write sends the tree at dir to w as a deterministic tar stream and
// returns the stream's digest (hex SHA-256).
func Write(w io.Writer, dir string) (string, error) {
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(w, h))
	links := map[[2]uint64]string{} // (dev, inode) → the first path of a hard-linked file
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		return writeEntry(tw, p, filepath.ToSlash(rel), links)
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return "", fmt.Errorf("artefact of %s: %w", dir, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeEntry writes the header (and for a regular file its content) of
// path p, named name in the stream.
func writeEntry(tw *tar.Writer, p, name string, links map[[2]uint64]string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no stat", p)
	}
	hdr := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()) | modeBits(fi.Mode()), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: fi.ModTime().Truncate(time.Second), Format: tar.FormatPAX}
	var content *os.File
	switch m := fi.Mode(); {
	case m.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
	case m.IsRegular():
		key := [2]uint64{uint64(st.Dev), st.Ino}
		if first, ok := links[key]; ok && st.Nlink > 1 {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			break
		}
		if st.Nlink > 1 {
			links[key] = name
		}
		if content, err = os.Open(p); err != nil {
			return err
		}
		defer content.Close()
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
	case m&fs.ModeSymlink != 0:
		if hdr.Linkname, err = os.Readlink(p); err != nil {
			return err
		}
		hdr.Typeflag = tar.TypeSymlink
	case m&fs.ModeNamedPipe != 0:
		hdr.Typeflag = tar.TypeFifo
	case m&fs.ModeDevice != 0:
		hdr.Typeflag = tar.TypeBlock
		if m&fs.ModeCharDevice != 0 {
			hdr.Typeflag = tar.TypeChar
		}
		hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	default:
		return nil // a socket: not part of a template
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if content != nil {
		if n, err := io.Copy(tw, content); err != nil || n != hdr.Size {
			return fmt.Errorf("%s: changed while read (%d of %d bytes): %v", p, n, hdr.Size, err)
		}
	}
	return nil
}

// modeBits are the setuid, setgid and sticky bits of m as tar has them.
func modeBits(m fs.FileMode) int64 {
	var b int64
	if m&fs.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}
