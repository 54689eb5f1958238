package mountinfo

import (
	"reflect"
	"slices"
	"testing"
)

func TestUnescape(t *testing.T) {
	tests := []struct{ in, want string }{
		{`/a\040b`, "/a b"},
		{`/plain`, "/plain"},
		{`/tab\011x`, "/tab\tx"},
		{`/back\134slash`, `/back\slash`},
	}
	for _, tt := range tests {
		if got := Unescape(tt.in); got != tt.want {
			t.Errorf("Unescape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPointsHasRoot(t *testing.T) {
	ps, err := Points()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ps, "/") {
		t.Fatalf("mount points %v lack /", ps)
	}
}

func TestParseLine(t *testing.T) {
	tests := []struct {
		line string
		want Entry
		ok   bool
	}{
		{`36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`,
			Entry{Dev: "98:0", Root: "/mnt1", MountPoint: "/mnt2", Options: []string{"rw", "noatime"}, FSType: "ext3",
				Source: "/dev/root", SuperOptions: []string{"rw", "errors=continue"}}, true},
		{`185 27 0:63 / /var/lib/a\040b/rootfs rw,relatime - overlay overlay rw,lowerdir=/l1:/l2,upperdir=/u`,
			Entry{Dev: "0:63", Root: "/", MountPoint: "/var/lib/a b/rootfs", Options: []string{"rw", "relatime"}, FSType: "overlay",
				Source: "overlay", SuperOptions: []string{"rw", "lowerdir=/l1:/l2", "upperdir=/u"}}, true},
		{`25 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2`,
			Entry{Dev: "0:22", Root: "/", MountPoint: "/sys/fs/cgroup", Options: []string{"rw", "nosuid"}, FSType: "cgroup2", Source: "cgroup2"}, true},
		{`no separator here`, Entry{}, false},
		{`1 2 3 - ext4`, Entry{}, false},
		{``, Entry{}, false},
	}
	for _, tt := range tests {
		got, ok := ParseLine(tt.line)
		if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseLine(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}

func TestReadFailsClosed(t *testing.T) {
	if _, err := Read("/nonexistent/mountinfo"); err == nil {
		t.Fatal("reading a missing table succeeded")
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add(`36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`)
	f.Add(`1 2 3 4 5 6 - a b c`)
	f.Add(`\\\ - `)
	f.Fuzz(func(t *testing.T, line string) {
		e, ok := ParseLine(line)
		if ok && (e.FSType == "" || len(e.Options) == 0) {
			t.Fatalf("ParseLine(%q) = %+v without a type or options", line, e)
		}
	})
}

// TestPointsMatchesRead: the fast field reader finds what the full parser does.
func TestPointsMatchesRead(t *testing.T) {
	ps, err := Points()
	if err != nil {
		t.Fatal(err)
	}
	es, err := Read(Path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != len(es) {
		t.Fatalf("%d points, %d entries", len(ps), len(es))
	}
	for i := range es {
		if ps[i] != es[i].MountPoint {
			t.Fatalf("point %d: %q, entry %q", i, ps[i], es[i].MountPoint)
		}
	}
}
