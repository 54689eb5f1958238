// Package mountinfo reads the mount points of this process's mount
// namespace from /proc/self/mountinfo, for the packages that must know
// what is mounted where before they remove or reuse a path (template
// trees, sandbox directories, the netns directory).
package mountinfo

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// Points lists the mount points of this mount namespace, unescaped, in
// mount order.
func Points() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			out = append(out, Unescape(fields[4]))
		}
	}
	return out, sc.Err()
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
