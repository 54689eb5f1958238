package density

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTemp(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMemoryCgroup(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"v1", "12:pids:/moat/i1\n9:memory:/moat/i1\n0::/user.slice\n", "/moat/i1"},
		{"v1 joined controllers", "4:cpu,memory:/moat/i2\n", "/moat/i2"},
		{"v2", "0::/moat/i3\n", "/moat/i3"},
		{"none", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := memoryCgroup(writeTemp(t, tc.body)); got != tc.want {
				t.Fatalf("memoryCgroup = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestGuestMapping(t *testing.T) {
	smaps := `55d0-55e0 r-xp 00000000 fe:00 1 /usr/bin/qemu-system-x86_64
Size:                 64 kB
Rss:                  60 kB
Pss:                  30 kB
7f00-7f10 rw-s 00000000 fe:00 2 /var/lib/moat/vm/sandboxes/i1/mem
Size:             262144 kB
Rss:               46000 kB
Pss:               45000 kB
VmFlags: rd wr sh mr mw me ms sd
7f20-7f30 rwxp 00000000 00:00 0 
Size:             131072 kB
Rss:               45056 kB
Pss:               45056 kB
`
	size, rss, pss := guestMapping(writeTemp(t, smaps))
	if size != 262144 || rss != 46000 || pss != 45000 {
		t.Fatalf("guestMapping = %d, %d, %d", size, rss, pss)
	}
}

func TestReadKV(t *testing.T) {
	kv := readKV(writeTemp(t, "MemTotal:       24000000 kB\nMemAvailable:   20000000 kB\nName:\tenvd\n"))
	if kv["MemTotal"] != 24000000 || kv["MemAvailable"] != 20000000 || len(kv) != 2 {
		t.Fatalf("readKV = %v", kv)
	}
}

func TestPrintFailures(t *testing.T) {
	var out strings.Builder
	errs := []error{nil,
		errors.New("container-1: create: sandbox iabcdefghij0123456789: envd not reachable at 10.200.1.2:49983"),
		errors.New("container-2: create: sandbox izyxwvutsrq9876543210: envd not reachable at 10.200.1.6:49983"),
		errors.New("container-3: create: 503: the host has no room"), nil}
	err := printFailures(&out, "container", len(errs), errs)
	if err == nil || !strings.Contains(err.Error(), "3 of 5 container sandboxes failed") {
		t.Fatalf("error: %v", err)
	}
	want := []string{"2 of 5 container sandboxes came up", "2 × …: create: sandbox …: envd not reachable at …", "1 × …: create: 503: the host has no room"}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
	if printFailures(&out, "vm", 2, []error{nil, nil}) != nil {
		t.Error("no failures: want nil")
	}
}
