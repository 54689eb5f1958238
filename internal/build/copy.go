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
// the step's workdir) that unpacks the archive of c into a temporary
// directory and copies c.Src to dest like Docker's COPY: one file to dest
// (into it when dest ends in "/"), a directory's contents into dest,
// several matches of a pattern into dest; the copies are owned by owner
// and, with c.Mode, get that mode.
func copyScript(c *CopyStep, dest, owner string, gzip bool) string {
	x := "-xf"
	if gzip {
		x = "-xzf"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "set -eu\n")
	fmt.Fprintf(&b, "dest=%s\nowner=%s\narchive=%s\n", shq(dest), shq(owner),
		shq("/"+stageDir+"/"+c.Hash+".tar"))
	fmt.Fprintf(&b, "case $dest in /*) ;; *) dest=$(pwd)/$dest ;; esac\n")
	fmt.Fprintf(&b, "tmp=$(mktemp -d /tmp/.moat-copy.XXXXXX)\n")
	fmt.Fprintf(&b, "trap 'rm -rf \"$tmp\"' EXIT\n")
	fmt.Fprintf(&b, "tar %s \"$archive\" -o -C \"$tmp\"\n", x)
	fmt.Fprintf(&b, "cd \"$tmp\"\n")
	fmt.Fprintf(&b, "set -- %s\n", globq(c.Src))
	b.WriteString(`n=0
for f in "$@"; do if [ -e "$f" ] || [ -L "$f" ]; then n=$((n+1)); fi; done
if [ "$n" -eq 0 ]; then echo "COPY: no files match $*" >&2; exit 1; fi
made=""
if [ "$n" -gt 1 ] || [ "${dest%/}" != "$dest" ]; then
	mkdir -p "$dest"
	for f in "$@"; do
		[ -e "$f" ] || [ -L "$f" ] || continue
		cp -a "$f" "$dest/"
		made="$made
$dest/${f##*/}"
	done
elif [ -d "$1" ] && [ ! -L "$1" ]; then
	mkdir -p "$dest"
	cp -a "$1/." "$dest/"
	made="$dest"
else
	mkdir -p "$(dirname "$dest")"
	cp -a "$1" "$dest"
	made="$dest"
fi
echo "$made" | while IFS= read -r p; do
	[ -n "$p" ] || continue
	chown -hR "$owner:$(id -gn "$owner")" "$p"
`)
	if c.Mode != 0 {
		fmt.Fprintf(&b, "\tif [ -d \"$p\" ] && [ ! -L \"$p\" ]; then find \"$p\" -type f -exec chmod %04o {} +; else chmod %04o \"$p\"; fi\n",
			uint32(c.Mode), uint32(c.Mode))
	}
	b.WriteString("done\n")
	return b.String()
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// globq quotes s for sh except the glob characters * ? [ ], so the
// pattern matches in the unpacked archive.
func globq(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '*' || r == '?' || r == '[' || r == ']':
			b.WriteRune(r)
		case r == '/' || r == '.' || r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		default:
			b.WriteString(shq(string(r)))
		}
	}
	return b.String()
}
