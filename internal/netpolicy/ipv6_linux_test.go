package netpolicy

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnableForwarding6KeepsRouterAdvertisements: switching IPv6
// forwarding on (in a netns of the test's own) first moves interfaces that
// accepted router advertisements (accept_ra 1, not forwarding) to
// accept_ra 2, leaves the others alone, logs the change, and does nothing
// at all when forwarding was on already.
func TestEnableForwarding6KeepsRouterAdvertisements(t *testing.T) {
	requireRoot(t)
	if !ipv6Available() {
		t.Skip("by design: no IPv6 on this host")
	}
	ns := "moattra" + testID(t)[1:9]
	ipCmd(t, "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	// Veth pairs (no dummy driver everywhere); lo and the peers accept no
	// router advertisements.
	sysctl := func(ifname, ra string) {
		ipCmd(t, "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf."+ifname+".accept_ra="+ra)
	}
	sysctl("lo", "0")
	for _, l := range []struct{ name, ra string }{{"ra1", "1"}, {"ra0", "0"}, {"ra2", "2"}, {"late", "0"}} {
		ipCmd(t, "-n", ns, "link", "add", l.name, "type", "veth", "peer", "name", l.name+"p")
		sysctl(l.name, l.ra)
		sysctl(l.name+"p", "0")
	}
	conf := func(ifname, key string) string {
		var v string
		if err := InNetns(filepath.Join(netnsDir, ns), func() error {
			b, err := os.ReadFile(filepath.Join(ipv6Conf, ifname, key))
			v = strings.TrimSpace(string(b))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	run := func() {
		if err := InNetns(filepath.Join(netnsDir, ns), func() error { return enableForwarding6(log, "moattra") }); err != nil {
			t.Fatal(err)
		}
	}
	run()
	for ifname, want := range map[string]string{"ra1": "2", "ra0": "0", "ra2": "2"} {
		if got := conf(ifname, "accept_ra"); got != want {
			t.Errorf("%s accept_ra = %s, want %s", ifname, got, want)
		}
	}
	if conf("all", "forwarding") != "1" || conf("ra0", "forwarding") != "1" {
		t.Errorf("forwarding not on: all %s, ra0 %s", conf("all", "forwarding"), conf("ra0", "forwarding"))
	}
	if !strings.Contains(logs.String(), "interfaces=ra1") {
		t.Errorf("the accept_ra change is not logged:\n%s", &logs)
	}
	// Already forwarding: an interface switched to accept_ra 1 later is left alone.
	sysctl("late", "1")
	ipCmd(t, "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.late.forwarding=0")
	run()
	if got := conf("late", "accept_ra"); got != "1" {
		t.Errorf("late accept_ra = %s, want 1 (forwarding was on already)", got)
	}
}
