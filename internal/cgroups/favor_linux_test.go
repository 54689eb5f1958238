package cgroups

import (
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseCgroup2(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		ok         bool
		want       remount
	}{
		{"hybrid", "35 26 0:30 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw",
			true, remount{target: "/sys/fs/cgroup/unified", flags: unix.MS_RELATIME, data: "favordynmods"}},
		{"systemd unified", "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot",
			true, remount{target: "/sys/fs/cgroup", flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_RELATIME,
				data: "nsdelegate,memory_recursiveprot,favordynmods"}},
		{"already on", "30 23 0:26 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw,favordynmods,nsdelegate",
			true, remount{target: "/sys/fs/cgroup", flags: unix.MS_RDONLY | unix.MS_NOSUID, data: "nsdelegate,favordynmods", already: true}},
		{"escaped", `30 23 0:26 / /mnt/cg\0402 rw - cgroup2 none rw`, true, remount{target: "/mnt/cg 2", data: "favordynmods"}},
		{"v1", "36 26 0:31 / /sys/fs/cgroup/pids rw,relatime shared:10 - cgroup cgroup rw,pids", false, remount{}},
		{"no separator", "36 26 0:31 / /sys/fs/cgroup rw cgroup2 cgroup2 rw", false, remount{}},
		{"short", "- cgroup2", false, remount{}},
		{"empty", "", false, remount{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseCgroup2(tc.line)
			if ok != tc.ok || got != tc.want {
				t.Errorf("parseCgroup2(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func FuzzParseCgroup2(f *testing.F) {
	f.Add("35 26 0:30 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw")
	f.Add(`30 23 0:26 / /a\040b ro - cgroup2 x rw,favordynmods`)
	f.Fuzz(func(t *testing.T, line string) {
		r, ok := parseCgroup2(line)
		if !ok {
			return
		}
		opts := strings.Split(r.data, ",")
		if opts[len(opts)-1] != "favordynmods" || slices.Index(opts, "favordynmods") != len(opts)-1 {
			t.Errorf("data %q: want the option favordynmods once, last", r.data)
		}
	})
}

// TestFavorDynMods switches favordynmods off on the host's cgroup2 mount
// (a remount without it), then checks that favorDynMods turns it on again
// and keeps every other mount and superblock option. It leaves it on.
func TestFavorDynMods(t *testing.T) {
	requireRoot(t)
	line, ok := cgroup2Line(t)
	if !ok {
		t.Skip("by design: this host has no cgroup2 mount (cgroup v1 only)")
	}
	r, _ := parseCgroup2(line)
	t.Cleanup(func() { _, _ = favorDynMods("/proc/self/mountinfo") })
	off := strings.TrimSuffix(strings.TrimSuffix(r.data, "favordynmods"), ",")
	if err := unix.Mount("", r.target, "", unix.MS_REMOUNT|r.flags, off); err != nil {
		t.Skipf("by design: remount %s without favordynmods: %v (the kernel lacks favordynmods, before 6.0)", r.target, err)
	}
	before, _ := cgroup2Line(t)
	if strings.Contains(before, "favordynmods") {
		t.Fatalf("favordynmods still on after a remount without it: %s", before)
	}
	changed, err := favorDynMods("/proc/self/mountinfo")
	if err != nil || !changed {
		t.Fatalf("favorDynMods = %v, %v; want true, nil", changed, err)
	}
	after, _ := cgroup2Line(t)
	if got := strings.Replace(options(after), ",favordynmods", "", 1); got != options(before) {
		t.Errorf("options changed beyond favordynmods:\nbefore %s\nafter  %s", before, after)
	}
	if !strings.Contains(after, "favordynmods") {
		t.Errorf("favordynmods not on: %s", after)
	}
	if changed, err := favorDynMods("/proc/self/mountinfo"); err != nil || changed {
		t.Errorf("second favorDynMods = %v, %v; want false, nil", changed, err)
	}
}

// cgroup2Line is this mount namespace's first cgroup2 line of mountinfo.
func cgroup2Line(t *testing.T) (string, bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if _, ok := parseCgroup2(l); ok {
			return l, true
		}
	}
	return "", false
}

// options drops a mountinfo line's IDs and propagation: the mount point, its
// options and the superblock's.
func options(line string) string {
	pre, post, _ := strings.Cut(line, " - ")
	f := strings.Fields(pre)
	return f[4] + " " + f[5] + " - " + post
}
