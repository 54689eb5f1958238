// Package mountinfo reads the mount points of this process's mount
// namespace from /proc/self/mountinfo, for the packages that must know
// what is mounted where before they remove or reuse a path (template
// trees, sandbox directories, the netns directory).
package mountinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
)

// Entry is one line of a mountinfo table (proc(5)), its paths unescaped.
type Entry struct {
	Dev          string // major:minor of the mounted filesystem
	Root         string // the directory of that filesystem the mount shows
	MountPoint   string
	Options      []string // per-mount options (rw, nosuid, ...)
	FSType       string
	Source       string
	SuperOptions []string // the superblock's options (overlay's lowerdir=..., ...)
}

// Path is this process's mount table.
const Path = "/proc/self/mountinfo"

// Read parses the mountinfo table at path (Path for this process's); a
// table that cannot be read is an error, so that no caller decides on a
// removal without it.
func Read(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads a mountinfo table; malformed lines are skipped.
func Parse(r io.Reader) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20) // overlay options can be long
	for sc.Scan() {
		if e, ok := ParseLine(sc.Text()); ok {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	return out, nil
}

// ParseLine parses one mountinfo line:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
func ParseLine(line string) (Entry, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return Entry{}, false
	}
	f, tail := strings.Fields(pre), strings.Fields(post)
	if len(f) < 6 || len(tail) < 2 {
		return Entry{}, false
	}
	e := Entry{Dev: f[2], Root: Unescape(f[3]), MountPoint: Unescape(f[4]), Options: strings.Split(f[5], ","),
		FSType: tail[0], Source: Unescape(tail[1])}
	if len(tail) > 2 {
		e.SuperOptions = strings.Split(tail[2], ",")
	}
	return e, true
}

// Points lists the mount points of this mount namespace, unescaped, in
// mount order. It reads only that field of each line: removals call it
// for every sandbox, and a busy host has thousands of mounts.
func Points() ([]string, error) {
	f, err := os.Open(Path)
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if mp, ok := field(sc.Bytes(), 4); ok {
			out = append(out, Unescape(mp))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	return out, nil
}

// field returns the n-th (from 0) space-separated field of line.
func field(line []byte, n int) (string, bool) {
	for i := 0; i < n; i++ {
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 {
			return "", false
		}
		line = line[sp+1:]
	}
	if sp := bytes.IndexByte(line, ' '); sp >= 0 {
		line = line[:sp]
	}
	return string(line), len(line) > 0
}

// Unescape undoes the octal escapes (\040 for space, ...) of a mountinfo
// field.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
