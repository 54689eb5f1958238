package netpolicy

import (
	"context"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
)

// Suspend takes a sandbox's network down but keeps its egress policy for
// the next Setup, whether the policy was set before the Suspend (a paused
// microVM's network is torn down in the background, after the orchestrator
// may already have set the policy for its resume) or while it was down;
// Teardown forgets it.
func TestSuspendKeepsPolicy(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	id := testID(t)
	allowed := func() bool {
		out, err := exec.Command("nft", "list", "table", "inet", "moattn").CombinedOutput()
		if err != nil {
			t.Fatalf("nft list: %v: %s", err, out)
		}
		return strings.Contains(string(out), "203.0.113.0/24")
	}
	policy := Egress{Allow: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}
	for _, setBefore := range []bool{true, false} {
		if _, err := m.Setup(ctx, id, false); err != nil {
			t.Fatal(err)
		}
		if setBefore {
			if err := m.SetEgress(ctx, id, policy); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Suspend(ctx, id); err != nil {
			t.Fatal(err)
		}
		if !setBefore {
			if err := m.SetEgress(ctx, id, policy); err != nil {
				t.Fatal(err)
			}
		}
		if allowed() {
			t.Fatal("a suspended sandbox's allow list is still in the firewall")
		}
		if _, err := m.Setup(ctx, id, false); err != nil {
			t.Fatal(err)
		}
		if !allowed() {
			t.Errorf("policy set before the suspend %v: not applied by the next Setup", setBefore)
		}
		if err := m.Teardown(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Setup(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Teardown(ctx, id) }()
	if allowed() {
		t.Error("Teardown kept the policy for the next Setup")
	}
}

// Two Teardowns of one sandbox at once (a paused microVM's network torn
// down in the background while a Recover tears it down again) both
// succeed: what one removed the other finds gone, not an error.
func TestConcurrentTeardowns(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	id := testID(t)
	for range 20 {
		if _, err := m.Setup(ctx, id, false); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 3)
		for range cap(errs) {
			go func() { errs <- m.Teardown(ctx, id) }()
		}
		for range cap(errs) {
			if err := <-errs; err != nil {
				t.Fatalf("concurrent teardown: %v", err)
			}
		}
	}
}
