package vm

import (
	"encoding/hex"
	"encoding/json"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/guestnet"
	"github.com/moatsh/moat/internal/testkit"
)

// guardDrops is the number of IPv4 packets from forged sources the tap's
// anti-spoofing chain in sandbox id's network namespace dropped (its first
// counter); other is what else it dropped.
func guardDrops(t *testing.T, id string) (forged, other int) {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+filepath.Join("/run/netns", testScope+"-"+id), "--",
		"nft", "-j", "list", "chain", "netdev", guestnet.GuardTable, "guest").Output()
	if err != nil {
		t.Fatalf("nft list chain: %v", err)
	}
	var doc struct {
		Nftables []struct {
			Rule *struct {
				Expr []struct {
					Counter *struct{ Packets int } `json:"counter"`
				} `json:"expr"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	var counters []int
	for _, o := range doc.Nftables {
		if o.Rule == nil {
			continue
		}
		for _, e := range o.Rule.Expr {
			if e.Counter != nil {
				counters = append(counters, e.Counter.Packets)
			}
		}
	}
	if len(counters) != 2 {
		t.Fatalf("counters %v in %s, want 2", counters, out)
	}
	return counters[0], counters[1]
}

// TestGuestAntiSpoof: the sandbox's namespace drops what the guest sends
// from an address other than its own, and passes its own traffic.
func TestGuestAntiSpoof(t *testing.T) {
	r := testRuntime(t)
	h := create(t, r)
	before, _ := guardDrops(t, h.ID)
	sh(t, h, "busybox ping -c 1 -W 3 169.254.100.1 >/dev/null")
	if d, _ := guardDrops(t, h.ID); d != before {
		t.Errorf("the guest's own ping: %d drops, want %d", d, before)
	}
	sh(t, h, "busybox ip addr add 10.99.0.5/32 dev eth0")
	if out, err := run(h, "root", 30*time.Second, "busybox", "ping", "-c", "2", "-W", "1", "-I", "10.99.0.5", "169.254.100.1"); err == nil {
		t.Errorf("a ping from a forged source was answered: %q", out)
	}
	forged, other := guardDrops(t, h.ID)
	if forged < before+2 {
		t.Errorf("forged pings: %d drops, want at least %d", forged, before+2)
	}
	// IPv6: the guest's own address reaches its gateway, another does not.
	sh(t, h, "busybox ping -c 1 -W 3 "+guestnet.TapAddr6.String()+" >/dev/null")
	forged6 := netip.MustParseAddr("fd6d:6f61:7400:ffff::3")
	sh(t, h, "busybox ip -6 addr add "+forged6.String()+"/126 dev eth0")
	testkit.WaitFor(t, 30*time.Second, "the end of duplicate address detection of "+forged6.String(), func() bool {
		return !ipv6Tentative(t, h, forged6)
	})
	if out, err := run(h, "root", 30*time.Second, "busybox", "ping", "-c", "2", "-W", "1", "-I", forged6.String(), guestnet.TapAddr6.String()); err == nil {
		t.Errorf("an IPv6 ping from a forged source was answered: %q", out)
	}
	if _, other6 := guardDrops(t, h.ID); other6 < other+2 {
		t.Errorf("forged IPv6 pings: %d other drops, want at least %d", other6, other+2)
	}
	t.Logf("dropped: %d IPv4 from forged sources, %d other (IPv6 and the like)", forged, other)
	// The guest still works.
	if code, err := health(h, 5*time.Second); err != nil || code != 204 {
		t.Fatalf("/health = %d, %v", code, err)
	}
}

// ipv6Tentative reports whether the guest's address a is missing or still
// tentative (duplicate address detection runs: it cannot be a source yet),
// by its flags in the guest's /proc/net/if_inet6 (IFA_F_TENTATIVE 0x40).
func ipv6Tentative(t *testing.T, h *runtime.Handle, a netip.Addr) bool {
	t.Helper()
	b := a.As16()
	want := hex.EncodeToString(b[:])
	for _, l := range strings.Split(sh(t, h, "cat /proc/net/if_inet6"), "\n") {
		if f := strings.Fields(l); len(f) >= 5 && f[0] == want {
			flags, err := strconv.ParseUint(f[4], 16, 32)
			if err != nil {
				t.Fatalf("/proc/net/if_inet6: %q: %v", l, err)
			}
			return flags&0x40 != 0
		}
	}
	return true
}
