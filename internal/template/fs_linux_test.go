package template

import (
	"strings"
	"testing"
)

func TestHasLowerdir(t *testing.T) {
	const table = `26 1 254:0 / / rw,relatime - ext4 /dev/vda rw
90 26 0:80 / /d/sandboxes/i1/rootfs rw,relatime - overlay overlay rw,lowerdir=/d/templates/base/rootfs,upperdir=/d/sandboxes/i1/upper,workdir=/d/sandboxes/i1/work
91 26 0:81 / /x rw - overlay overlay rw,lowerdir=/a:/d/templates/ci\040x/rootfs,upperdir=/u,workdir=/w
`
	tests := []struct {
		dir  string
		want bool
	}{
		{"/d/templates/base/rootfs", true},
		{"/d/templates/ci x/rootfs", true},
		{"/d/templates/other/rootfs", false},
		{"/d/templates/base", false},
		{"/", false},
	}
	for _, tt := range tests {
		got, err := hasLowerdir(strings.NewReader(table), tt.dir)
		if err != nil || got != tt.want {
			t.Errorf("hasLowerdir(%s) = %v, %v, want %v", tt.dir, got, err, tt.want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	tests := []struct{ in, want string }{
		{`/a\040b`, "/a b"},
		{`/plain`, "/plain"},
		{`/tab\011x`, "/tab\tx"},
	}
	for _, tt := range tests {
		if got := unescapeMount(tt.in); got != tt.want {
			t.Errorf("unescapeMount(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
