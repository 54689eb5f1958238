package firewall

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/moatsh/moat/internal/bench/benchpair"
	"github.com/moatsh/moat/internal/testkit"
)

// testFirewall installs a Firewall in a scope of its own (table moattf,
// interfaces tf*) and removes it at the end, checking that nothing stays.
// The interfaces need not exist: the sets key on names.
func testFirewall(t testing.TB) *Firewall {
	t.Helper()
	testkit.RequireRoot(t)
	testkit.RequireTool(t, "nft")
	f := New(Config{Table: "moattf", IfPrefix: "tf", Subnet: netip.MustParsePrefix("10.203.0.0/16"),
		Subnet6: netip.MustParsePrefix("fd6d:6f61:7400:cb00::/112")}, nil)
	if err := f.Delete(); err != nil { // a killed run's leftovers
		t.Fatal(err)
	}
	if err := f.Install(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Delete(); err != nil {
			t.Error(err)
		}
		for _, family := range []string{"inet", "arp"} {
			if out, _ := exec.Command("nft", "list", "table", family, "moattf").CombinedOutput(); !strings.Contains(string(out), "No such file") {
				t.Errorf("table %s moattf left behind:\n%s", family, out)
			}
		}
	})
	return f
}

// normal is st with empty entries dropped and lists sorted, to compare.
func normal(st *state) *state {
	out := &state{egress: map[string]map[string][]nftables.SetElement{}, allowed: map[string]bool{},
		proxied: map[string]bool{}, addrs: map[string][]netip.Addr{}}
	for name, byIf := range st.egress {
		for ifname, es := range byIf {
			if len(es) == 0 {
				continue
			}
			if out.egress[name] == nil {
				out.egress[name] = map[string][]nftables.SetElement{}
			}
			es = slices.Clone(es)
			slices.SortFunc(es, func(a, b nftables.SetElement) int { return strings.Compare(elemKey(a), elemKey(b)) })
			for i := range es {
				es[i] = nftables.SetElement{Key: es[i].Key, KeyEnd: es[i].KeyEnd}
			}
			out.egress[name][ifname] = es
		}
	}
	for k, v := range st.allowed {
		if v {
			out.allowed[k] = true
		}
	}
	for k, v := range st.proxied {
		if v {
			out.proxied[k] = true
		}
	}
	for k, v := range st.addrs {
		if len(v) > 0 {
			out.addrs[k] = slices.SortedFunc(slices.Values(v), netip.Addr.Compare)
		}
	}
	return out
}

// checkState fails unless what f holds equals what the kernel holds.
func checkState(t *testing.T, f *Firewall, after string) {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	kernel, err := f.readState(c)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	held := f.st
	f.mu.Unlock()
	if held == nil {
		return // unknown: read at the next change
	}
	if got, want := normal(held), normal(kernel); !reflect.DeepEqual(got, want) {
		t.Fatalf("after %s the Firewall holds\n%+v\nthe kernel\n%+v", after, got, want)
	}
}

var testPolicies = []struct{ allow, deny []netip.Prefix }{
	{nil, nil},
	{[]netip.Prefix{netip.MustParsePrefix("1.1.1.1/32")}, []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}},
	{[]netip.Prefix{netip.MustParsePrefix("8.8.0.0/16"), netip.MustParsePrefix("2001:db8::/32")}, nil},
	{nil, []netip.Prefix{netip.MustParsePrefix("9.9.9.9/32"), netip.MustParsePrefix("9.9.9.10/31")}},
}

// The per-sandbox sets' record stays what the kernel holds through random
// binds, policies, admissions, clears and unbinds of a few interfaces,
// including the ones that change nothing.
func TestStateFollowsKernel(t *testing.T) {
	f := testFirewall(t)
	r := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for i := range 300 {
		ifname := fmt.Sprintf("tf%d", r.IntN(5))
		var op string
		var err error
		switch r.IntN(5) {
		case 0:
			a := netip.AddrFrom4([4]byte{10, 203, byte(r.IntN(4)), byte(2 + r.IntN(3))})
			a6 := netip.Addr{}
			if r.IntN(2) == 0 {
				a6 = netip.MustParseAddr(fmt.Sprintf("fd6d:6f61:7400:cb00::%x", 2+r.IntN(3)))
			}
			op, err = fmt.Sprintf("Bind(%s, %s, %s)", ifname, a, a6), f.Bind(ifname, a, a6)
		case 1:
			op, err = "Unbind("+ifname+")", f.Unbind(ifname)
		case 2:
			p := testPolicies[r.IntN(len(testPolicies))]
			internet, proxied := r.IntN(2) == 0, r.IntN(2) == 0
			op = fmt.Sprintf("WriteEgress(%s, %v, %v, %v, %v)", ifname, p.allow, p.deny, internet, proxied)
			err = f.WriteEgress(ifname, p.allow, p.deny, internet, proxied)
		case 3:
			op, err = "ClearEgress("+ifname+")", f.ClearEgress(ifname)
		case 4:
			on := r.IntN(2) == 0
			op, err = fmt.Sprintf("SetAllowed(%s, %v)", ifname, on), f.SetAllowed(ifname, on)
		}
		if err != nil {
			t.Fatalf("step %d, %s: %v", i, op, err)
		}
		checkState(t, f, op)
	}
}

// A set changed behind the Firewall's back (an operator's nft command)
// costs a retry from a fresh read, not a failed teardown or a policy left
// half written.
func TestStateChangedBehindItsBack(t *testing.T) {
	f := testFirewall(t)
	allow := []netip.Prefix{netip.MustParsePrefix("1.1.1.0/24")}
	deny := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	a := netip.MustParseAddr("10.203.0.2")
	for _, err := range []error{f.Bind("tf1", a, netip.Addr{}), f.WriteEgress("tf1", allow, deny, true, true)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	nft := func(args string) {
		t.Helper()
		if out, err := exec.Command("nft", strings.Fields(args)...).CombinedOutput(); err != nil {
			t.Fatalf("nft %s: %v\n%s", args, err, out)
		}
	}
	nft("flush set inet moattf egress_allow")
	nft("flush set inet moattf allowed")
	nft("flush set inet moattf sandbox_addrs")
	nft("flush set arp moattf sandbox_addrs")
	if err := f.WriteEgress("tf1", nil, deny, false, false); err != nil {
		t.Fatalf("policy after its elements went away: %v", err)
	}
	checkState(t, f, "WriteEgress")
	if err := f.Unbind("tf1"); err != nil {
		t.Fatalf("unbind after its binding went away: %v", err)
	}
	if err := f.ClearEgress("tf1"); err != nil {
		t.Fatal(err)
	}
	checkState(t, f, "Unbind, ClearEgress")
	if allow, deny, err := f.EgressRanges("tf1"); err != nil || len(allow)+len(deny) != 0 {
		t.Fatalf("left: allow %v, deny %v (%v)", allow, deny, err)
	}
}

// BenchmarkSandboxSets times one sandbox's set changes on a create and a
// kill with the default policy (Bind, WriteEgress with internet access,
// SetAllowed off, ClearEgress, Unbind) among others made the same way, with
// the Firewall's record of the sets against reading them back from the
// kernel for each change (the former way: a dump of every sandbox's
// elements).
func BenchmarkSandboxSets(b *testing.B) {
	f := testFirewall(b)
	others := 200
	for i := range others {
		ifname := fmt.Sprintf("tfo%d", i)
		a := netip.AddrFrom4([4]byte{10, 203, byte(i / 64), byte(i%64*4 + 2)})
		if err := f.Bind(ifname, a, netip.Addr{}); err != nil {
			b.Fatal(err)
		}
		if err := f.WriteEgress(ifname, nil, nil, true, false); err != nil {
			b.Fatal(err)
		}
	}
	forget := func() {
		f.mu.Lock()
		f.st = nil
		f.mu.Unlock()
	}
	cycle := func(reread bool) time.Duration {
		start := time.Now()
		for _, op := range []func() error{
			func() error { return f.Bind("tfnew", netip.MustParseAddr("10.203.255.2"), netip.Addr{}) },
			func() error { return f.WriteEgress("tfnew", nil, nil, true, false) },
			func() error { return f.SetAllowed("tfnew", false) },
			func() error { return f.ClearEgress("tfnew") },
			func() error { return f.Unbind("tfnew") },
		} {
			if reread {
				forget()
			}
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	benchpair.Compare(b, fmt.Sprintf("one sandbox's set changes among %d", others),
		benchpair.Way{Name: "record", Run: func() time.Duration { return cycle(false) }},
		benchpair.Way{Name: "sets-read-back", Run: func() time.Duration { return cycle(true) }})
}
