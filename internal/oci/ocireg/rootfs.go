package ocireg

import (
	"archive/tar"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// RootfsImage is a linux/amd64 image of the root filesystem at dir as one
// uncompressed layer (see DirLayer) with config cfg. The layer is a
// temporary file in tmpDir ("" = the system's); cleanup removes it once
// the image was pushed.
func RootfsImage(dir, tmpDir string, cfg v1.Config) (img v1.Image, cleanup func(), err error) {
	l, cleanup, err := DirLayer(dir, tmpDir)
	if err != nil {
		return nil, nil, err
	}
	if img, err = Image("linux/amd64", cfg, l); err != nil {
		cleanup()
		return nil, nil, err
	}
	return img, cleanup, nil
}

// DirLayer makes an uncompressed OCI layer of the tree at dir, written to
// a temporary file in tmpDir: directories, regular files, symlinks and
// hard links with their owners, modes and mtimes, in lexical order
// (extended attributes are not kept; device nodes, FIFOs and sockets are
// left out). Uncompressed, because compressing a few hundred MB costs
// more than sending them over loopback. cleanup removes the file.
func DirLayer(dir, tmpDir string) (v1.Layer, func(), error) {
	f, err := os.CreateTemp(tmpDir, "ocireg-layer-*.tar")
	if err != nil {
		return nil, nil, fmt.Errorf("layer of %s: %w", dir, err)
	}
	cleanup := func() { os.Remove(f.Name()) }
	h := sha256.New()
	err = writeTree(io.MultiWriter(f, h), dir)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("layer of %s: %w", dir, err)
	}
	fi, err := os.Stat(f.Name())
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	sum := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", h.Sum(nil))}
	return &fileLayer{path: f.Name(), hash: sum, size: fi.Size()}, cleanup, nil
}

// writeTree writes the tar of the tree at dir to w.
func writeTree(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	links := map[uint64]string{} // inode -> first name
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return writeEntry(tw, path, filepath.ToSlash(rel), fi, links)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func writeEntry(tw *tar.Writer, path, name string, fi fs.FileInfo, links map[uint64]string) error {
	st, _ := fi.Sys().(*syscall.Stat_t)
	var target string
	switch m := fi.Mode(); {
	case m.IsDir(), m.IsRegular():
	case m&fs.ModeSymlink != 0:
		t, err := os.Readlink(path)
		if err != nil {
			return err
		}
		target = t
	default:
		return nil // device, FIFO, socket
	}
	h, err := tar.FileInfoHeader(fi, target)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	h.Name, h.Uname, h.Gname, h.Format = name, "", "", tar.FormatPAX
	h.AccessTime, h.ChangeTime = fi.ModTime(), fi.ModTime()
	if fi.IsDir() {
		h.Name += "/"
	}
	if st != nil && fi.Mode().IsRegular() && st.Nlink > 1 {
		if first, ok := links[st.Ino]; ok {
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
		} else {
			links[st.Ino] = name
		}
	}
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if h.Typeflag != tar.TypeReg {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.CopyN(tw, f, h.Size); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// fileLayer is an uncompressed layer in a file: its blob is the tar.
type fileLayer struct {
	path string
	hash v1.Hash
	size int64
}

func (l *fileLayer) Digest() (v1.Hash, error)             { return l.hash, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)             { return l.hash, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)   { return os.Open(l.path) }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) { return os.Open(l.path) }
func (l *fileLayer) Size() (int64, error)                 { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error)  { return types.OCIUncompressedLayer, nil }

// DebianConfig is the config a Debian image usually has.
var DebianConfig = v1.Config{
	Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, Cmd: []string{"bash"},
}

// PushRootfs pushes the tree at dir as repoTag, one layer, with cfg.
func (r *Registry) PushRootfs(repoTag, dir string, cfg v1.Config) error {
	img, cleanup, err := RootfsImage(dir, "", cfg)
	if err != nil {
		return err
	}
	defer cleanup()
	return r.Push(repoTag, img)
}
