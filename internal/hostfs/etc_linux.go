package hostfs

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/netpolicy/hostnet"
)

// WriteEtc puts /etc/hosts, /etc/hostname and /etc/resolv.conf in the
// sandbox's overlay upper dir (before the overlay is mounted, so never
// through the template's symlinks), owned by the sandbox's root; addr is
// the sandbox's own address, hostname "" means "sandbox".
func WriteEtc(upper, hostname string, addr netip.Addr, ids idmap.Range) error {
	if hostname == "" {
		hostname = "sandbox"
	}
	etc := filepath.Join(upper, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		return err
	}
	if err := os.Chown(etc, ids.Root(), ids.Root()); err != nil {
		return err
	}
	files := map[string]string{
		"hosts":       fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s\n", addr, hostname),
		"hostname":    hostname + "\n",
		"resolv.conf": resolvConf(),
	}
	for name, content := range files {
		p := filepath.Join(etc, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return fmt.Errorf("write /etc/%s: %w", name, err)
		}
		if err := os.Chown(p, ids.Root(), ids.Root()); err != nil {
			return err
		}
	}
	return nil
}

// resolvConf uses the host's public nameservers; private, loopback and
// link-local ones, and those inside the host's own networks (its LAN, its
// gateways: see hostnet.Networks), are unreachable from a sandbox, so
// public resolvers replace them.
func resolvConf() string {
	var ns []string
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && f[0] == "nameserver" {
				if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() && a.IsGlobalUnicast() && !a.IsPrivate() &&
					!hostnet.Contains(a) {
					ns = append(ns, a.String())
				}
			}
		}
	}
	if len(ns) == 0 {
		ns = []string{"1.1.1.1", "8.8.8.8"}
	}
	var b strings.Builder
	for _, a := range ns {
		b.WriteString("nameserver " + a + "\n")
	}
	return b.String()
}
