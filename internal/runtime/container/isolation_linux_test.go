package container

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/runtime"
)

func TestIsolation(t *testing.T) {
	r := newTestRuntime(t, "")
	a := create(t, r, runtime.Spec{})
	b := create(t, r, runtime.Spec{})
	na, _ := r.net.Lookup(a.ID)
	nb, _ := r.net.Lookup(b.ID)
	startProbe(t, r, a)
	startProbe(t, r, b)

	hostLo := listenHost(t, "127.0.0.1:0")
	hostAll := listenHost(t, "0.0.0.0:0")
	probes := []struct {
		name string
		addr string
	}{
		{"host loopback", fmt.Sprintf("127.0.0.1:%d", hostLo)},
		{"own gateway", fmt.Sprintf("%s:%d", na.HostAddr, hostAll)},
		{"other sandbox's gateway", fmt.Sprintf("%s:%d", nb.HostAddr, hostAll)},
		{"other sandbox's envd", net.JoinHostPort(b.Addr.String(), "49983")},
	}
	if ip := hostIP(); ip != "" {
		probes = append(probes, struct{ name, addr string }{"host LAN address", fmt.Sprintf("%s:%d", ip, hostAll)})
	}
	for _, p := range probes {
		t.Run("no "+p.name, func(t *testing.T) {
			code, body, err := probe(a, "dial", url.Values{"addr": {p.addr}}, 3*time.Second)
			if err != nil || code != 502 {
				t.Errorf("sandbox dialled %s: %d %q %v", p.addr, code, body, err)
			}
		})
	}

	t.Run("own envd from inside", func(t *testing.T) {
		code, body, err := probe(a, "dial", url.Values{"addr": {"127.0.0.1:49983"}}, 3*time.Second)
		if err != nil || code != 200 {
			t.Errorf("%d %q %v", code, body, err)
		}
	})
	t.Run("files are per sandbox", func(t *testing.T) {
		if code, _, err := probe(a, "write", url.Values{"path": {"/tmp/mine"}, "data": {"a"}}, time.Second); err != nil || code != 200 {
			t.Fatalf("write: %d %v", code, err)
		}
		if code, body, _ := probe(b, "read", url.Values{"path": {"/tmp/mine"}}, time.Second); code != 404 {
			t.Errorf("B read A's file: %d %q", code, body)
		}
		if _, err := os.Stat(filepath.Join(testRootfs, "tmp/mine")); err == nil {
			t.Error("write reached the template")
		}
	})
	t.Run("root inside is an unprivileged host ID of its own", func(t *testing.T) {
		ra, err := idmap.Read(r.dir(a.ID))
		if err != nil {
			t.Fatal(err)
		}
		rb, _ := idmap.Read(r.dir(b.ID))
		ua, ub := statusUID(t, readFile(t, fmt.Sprintf("/proc/%d/status", a.PID))), statusUID(t, readFile(t, fmt.Sprintf("/proc/%d/status", b.PID)))
		if ua != ra.Root() || ub != rb.Root() || ua == ub || ua < idmap.FirstHost || ub < idmap.FirstHost {
			t.Fatalf("envd runs as host uid %d and %d; ranges %d and %d", ua, ub, ra.Root(), rb.Root())
		}
		if code, out, err := probe(a, "read", url.Values{"path": {"/proc/1/status"}}, time.Second); err != nil || code != 200 || statusUID(t, out) != 0 {
			t.Fatalf("inside, envd is not root: %d %v %q", code, err, out)
		}
		if code, _, err := probe(a, "write", url.Values{"path": {"/tmp/owned"}, "data": {"a"}}, time.Second); err != nil || code != 200 {
			t.Fatalf("write: %d %v", code, err)
		}
		fi, err := os.Stat(filepath.Join(r.dir(a.ID), "disk", "upper", "tmp", "owned"))
		if err != nil || int(fi.Sys().(*syscall.Stat_t).Uid) != ra.Root() {
			t.Fatalf("a file root wrote inside is owned on the host by %v (%v), want %d", fi.Sys(), err, ra.Root())
		}
	})
	t.Run("every account may bind ports below 1024", func(t *testing.T) {
		// root inside lacks CAP_NET_BIND_SERVICE in the host-owned netns;
		// the netns's ip_unprivileged_port_start makes up for it.
		for _, user := range []string{"0:0", "1000:1000"} {
			port := map[string]string{"0:0": "80", "1000:1000": "81"}[user]
			out, err := ociCombinedOutput(r.oci, r.oci.Command(context.Background(), "exec", "--user", user, r.containerName(a.ID), "busybox", "httpd", "-p", port, "-h", "/"))
			if err != nil {
				t.Errorf("user %s: httpd on port %s: %v %s", user, port, err, out)
			}
		}
	})
	t.Run("sysfs shows the sandbox's network devices only", func(t *testing.T) {
		out, err := execIn(r, a.ID, "ls", "/sys/class/net")
		if got := strings.Fields(out); err != nil || !slices.Equal(got, []string{"eth0", "lo"}) {
			t.Errorf("/sys/class/net: %q %v", out, err)
		}
		if out, err := execIn(r, a.ID, "touch", "/sys/kernel/x"); err == nil {
			t.Errorf("/sys is writable: %s", out)
		}
	})
	t.Run("host files invisible", func(t *testing.T) {
		secret := filepath.Join("/root", "moat-secret-"+a.ID)
		if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(secret)
		if code, body, _ := probe(a, "read", url.Values{"path": {secret}}, time.Second); code != 404 {
			t.Errorf("sandbox read host file: %d %q", code, body)
		}
	})
	t.Run("hardening", func(t *testing.T) {
		// envd itself (pid 1 in the sandbox) is what matters.
		code, out, err := probe(a, "read", url.Values{"path": {"/proc/1/status"}}, time.Second)
		if err != nil || code != 200 {
			t.Fatal(code, err, out)
		}
		for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t00000000a80425fb"} {
			if !strings.Contains(out, want) {
				t.Errorf("status lacks %q", want)
			}
		}
		if out, err := execIn(r, a.ID, "unshare", "-U", "true"); err == nil {
			t.Errorf("unshare -U worked: %s", out)
		}
		if out, _ := execIn(r, a.ID, "cat", "/etc/hosts", "/etc/hostname"); !strings.Contains(out, a.Addr.String()+"\tsandbox") {
			t.Errorf("/etc/hosts: %q", out)
		}
	})
}

// statusUID returns the real uid on the Uid: line of a /proc/<pid>/status.
func statusUID(t *testing.T, status string) int {
	t.Helper()
	for _, line := range strings.Split(status, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("bad Uid line %q", line)
			}
			return n
		}
	}
	t.Fatalf("no Uid line in %q", status)
	return -1
}

func listenHost(t *testing.T, addr string) int {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

func hostIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !strings.HasPrefix(n.IP.String(), "10.20") {
			return n.IP.String()
		}
	}
	return ""
}
