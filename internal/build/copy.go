package build

import (
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// stageDir holds, at the rootfs' top, the archives of COPY steps while the
// build sandbox runs; it is removed before the rootfs is installed.
const stageDir = ".moat-build"

// stageCopy puts the archive of c (from team's store) into rootfs under
// stageDir: a plain file copy on the host, nothing is unpacked or run.
// errdefs.ErrInvalidArgument names a hash that was never uploaded.
func stageCopy(dataDir, team, rootfs string, c *CopyStep) (gzip bool, err error) {
	in, err := os.Open(FilesPath(dataDir, team, c.Hash))
	if os.IsNotExist(err) {
		return false, fmt.Errorf("COPY %s: files %s were never uploaded: %w", c.Src, c.Hash, errInvalid)
	}
	if err != nil {
		return false, err
	}
	defer in.Close()
	var magic [2]byte
	n, _ := io.ReadFull(in, magic[:])
	gzip = n == 2 && magic[0] == 0x1f && magic[1] == 0x8b
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return false, err
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return false, err
	}
	defer root.Close()
	if err := root.MkdirAll(stageDir, 0o700); err != nil {
		return false, err
	}
	// A new file, never an existing one opened for writing: the tree
	// shares its files' inodes with cached layers.
	name := path.Join(stageDir, c.Hash+".tar")
	if err := root.Remove(name); err != nil && !os.IsNotExist(err) {
		return false, err
	}
	out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return false, err
	}
	return gzip, out.Close()
}

// unstage removes stageDir from rootfs.
func unstage(rootfs string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	return root.RemoveAll(stageDir)
}

// copyScript is the shell script (run as root in the build sandbox, in
// the step's workdir) that unpacks archive (c's files, paths relative to
// the build context) into a temporary directory and puts c.Src at dest the
// way E2B's template builder does (its copy script, Docker's COPY):
//
//   - the source is c.Src's part before its first glob character, up to
//     the last "/" ("src/*.py" → src; "*.txt" → the archive's root), as
//     doublestar.SplitPattern splits it; the archive holds only the matches
//   - a directory's contents merge into dest, with or without a trailing
//     slash: existing directories (and directory symlinks such as /lib →
//     usr/lib) are merged into and keep their owner and mode, files are
//     replaced
//   - a file or a symlink goes to dest, or into dest when dest ends in "/"
//     or is an existing directory (mv's rule); a symlink is not followed
//
// What is copied is owned by owner and, with c.Mode, its files get that
// mode (directories keep theirs, so they stay searchable).
func copyScript(c *CopyStep, dest, owner, archive string, gzip bool) string {
	x := "-xf"
	if gzip {
		x = "-xzf"
	}
	var b strings.Builder
	b.WriteString("set -eu\n")
	fmt.Fprintf(&b, "dest=%s\nowner=%s\narchive=%s\nsrc=%s\n", shq(dest), shq(owner), shq(archive), shq(copySource(c.Src)))
	b.WriteString(`case $dest in /*) ;; *) dest=$(pwd)/$dest ;; esac
tmp=$(mktemp -d /tmp/.moat-copy.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
`)
	fmt.Fprintf(&b, "tar %s \"$archive\" -o -C \"$tmp\"\n", x)
	b.WriteString(`cd "$tmp"
if [ ! -e "$src" ] && [ ! -L "$src" ]; then echo "COPY: source path does not exist: $src" >&2; exit 1; fi
group=$(id -gn "$owner")
if [ -L "$src" ]; then
	chown -h "$owner:$group" "$src"
elif [ -d "$src" ]; then
	chown -R "$owner:$group" "$src"
`)
	if c.Mode != 0 {
		fmt.Fprintf(&b, "\tfind \"$src\" -type f -exec chmod %04o {} +\n", uint32(c.Mode))
	}
	b.WriteString(`	mkdir -p "$dest"
	# tar, as Docker's COPY: it replaces file symlinks at the destination
	# rather than writing through them and follows directory symlinks;
	# busybox's tar lacks the flags, cp -a merges as well there.
	if tar --version 2>/dev/null | grep -q GNU; then
		(cd "$src" && tar -cf - .) | tar -xpf - -C "$dest" --keep-directory-symlink --no-overwrite-dir
	else
		cp -a "$src/." "$dest/"
	fi
	exit 0
else
	chown "$owner:$group" "$src"
`)
	if c.Mode != 0 {
		fmt.Fprintf(&b, "\tchmod %04o \"$src\"\n", uint32(c.Mode))
	}
	b.WriteString(`fi
case $dest in
*/) mkdir -p "$dest" ;;
*) mkdir -p "$(dirname "$dest")" ;;
esac
if [ -d "$dest" ]; then dest="${dest%/}/${src##*/}"; fi
if [ -d "$dest" ] && [ ! -L "$dest" ]; then echo "COPY: cannot overwrite the directory $dest with $src" >&2; exit 1; fi
rm -f "$dest"
cp -a "$src" "$dest"
`)
	return b.String()
}

// copySource is the part of a COPY source that the copy starts from: the
// path before its first glob character up to the last "/", like
// doublestar.SplitPattern of src with a "/" appended (what E2B's builder
// does); "." when the glob starts in the first element.
func copySource(src string) string {
	p := strings.TrimSuffix(src, "/") + "/"
	split := -1
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '\\' {
			i++
			continue
		}
		if c == '*' || c == '?' || c == '[' || c == '{' {
			break
		}
		if c == '/' {
			split = i
		}
	}
	if split > 0 {
		return path.Clean(p[:split])
	}
	return "."
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
