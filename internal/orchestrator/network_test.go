package orchestrator_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// wantEgress checks the policy the runtime last got for id.
func wantEgress(t *testing.T, env *orchestratortest.Env, id string, allow, deny []netip.Prefix, internet bool) {
	t.Helper()
	e, n := env.Runtime.Egress(id)
	if n == 0 || !slices.Equal(e.Allow, allow) || !slices.Equal(e.Deny, deny) || e.Internet != internet {
		t.Fatalf("egress of %s = %+v (set %d times), want allow %v deny %v internet %v", id, e, n, allow, deny, internet)
	}
}

// TestNetworkPolicy: the policy reaches the runtime before the sandbox
// starts, is validated, replaced by UpdateNetwork (persisted), re-applied
// on resume and after a restart, and inherited by forks.
func TestNetworkPolicy(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	var order []string
	env.Runtime.EgressF = func(id string, e netpolicy.Egress) error {
		if env.Runtime.State(id) == "" {
			order = append(order, "policy before create")
		}
		return nil
	}
	sb := create(t, env, orchestrator.CreateRequest{AllowInternet: true, AllowOut: []string{"1.2.3.4"},
		DenyOut: []string{"0.0.0.0/0"}, PrivateTraffic: true})
	if len(order) != 1 {
		t.Fatalf("policy not set before the runtime's create: %v", order)
	}
	wantEgress(t, env, sb.ID, prefixes("1.2.3.4/32"), prefixes("0.0.0.0/0"), true)
	if !slices.Equal(sb.Network.AllowOut, []string{"1.2.3.4/32"}) || sb.Network.TrafficAccessToken == "" {
		t.Fatalf("network %+v", sb.Network)
	}
	if rt, _ := env.Orch.Lookup(sb.ID); rt.TrafficToken != sb.Network.TrafficAccessToken {
		t.Fatalf("route token %q", rt.TrafficToken)
	}

	for _, bad := range []orchestrator.CreateRequest{{AllowOut: []string{"example.com"}}, {DenyOut: []string{"1.2.3.4/99"}}} {
		bad.Team, bad.Template, bad.Timeout = team, "base", 60e9
		if _, err := env.Orch.Create(ctx, bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("create %+v: %v", bad, err)
		}
	}

	off := false
	up, err := env.Orch.UpdateNetwork(ctx, team, sb.ID, orchestrator.NetworkUpdate{AllowOut: []string{"5.6.7.0/24"}, AllowInternet: &off})
	if err != nil {
		t.Fatal(err)
	}
	wantEgress(t, env, sb.ID, prefixes("5.6.7.0/24"), nil, false)
	if got, _ := env.DB.GetSandbox(ctx, sb.ID); !slices.Equal(got.Network.AllowOut, []string{"5.6.7.0/24"}) ||
		len(got.Network.DenyOut) != 0 || got.AllowInternet || got.Network.TrafficAccessToken != sb.Network.TrafficAccessToken {
		t.Fatalf("stored %+v", got)
	}
	if up.AllowInternet {
		t.Fatal("update returned internet on")
	}
	// Omitting allow_internet_access keeps it.
	if _, err := env.Orch.UpdateNetwork(ctx, team, sb.ID, orchestrator.NetworkUpdate{DenyOut: []string{"0.0.0.0/0"}}); err != nil {
		t.Fatal(err)
	}
	wantEgress(t, env, sb.ID, nil, prefixes("0.0.0.0/0"), false)
	if _, err := env.Orch.UpdateNetwork(ctx, team, sb.ID, orchestrator.NetworkUpdate{AllowOut: []string{"*.example.com"}}); !errors.Is(err, netpolicy.ErrDomainsRequireDenyAll) {
		t.Fatalf("domain update without deny-all: %v", err)
	}
	if _, err := env.Orch.UpdateNetwork(ctx, team, sb.ID, orchestrator.NetworkUpdate{
		AllowOut: []string{"*.Example.com", "api.example.com", "1.2.3.4"}, DenyOut: []string{"0.0.0.0/0"}}); err != nil {
		t.Fatalf("domain update: %v", err)
	}
	if got, _ := env.Runtime.Egress(sb.ID); !slices.Equal(got.Domains, []string{"*.example.com", "api.example.com"}) ||
		len(got.Allow) != 1 {
		t.Fatalf("domain update reached the runtime as %+v", got)
	}
	if _, err := env.Orch.UpdateNetwork(ctx, team, sb.ID, orchestrator.NetworkUpdate{DenyOut: []string{"0.0.0.0/0"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Orch.UpdateNetwork(ctx, "other", sb.ID, orchestrator.NetworkUpdate{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("other team's update: %v", err)
	}
	// A failing host update leaves the stored policy alone.
	env.Runtime.EgressF = func(string, netpolicy.Egress) error { return errors.New("nft down") }
	if _, err := env.Orch.UpdateNetwork(ctx, team, sb.ID, orchestrator.NetworkUpdate{}); err == nil {
		t.Fatal("update with a failing runtime succeeded")
	}
	env.Runtime.EgressF = nil
	if got, _ := env.DB.GetSandbox(ctx, sb.ID); !slices.Equal(got.Network.DenyOut, []string{"0.0.0.0/0"}) {
		t.Fatalf("stored after failed update: %+v", got.Network)
	}

	// Paused: updated, and re-applied at resume.
	if err := env.Orch.Pause(ctx, team, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Orch.UpdateNetwork(ctx, team, sb.ID, orchestrator.NetworkUpdate{AllowOut: []string{"9.9.9.9"}, DenyOut: []string{"0.0.0.0/0"}}); err != nil {
		t.Fatal(err)
	}
	_, before := env.Runtime.Egress(sb.ID)
	if _, err := env.Orch.Resume(ctx, team, sb.ID, 60e9); err != nil {
		t.Fatal(err)
	}
	if _, after := env.Runtime.Egress(sb.ID); after != before+1 {
		t.Fatalf("resume did not re-apply the policy (%d → %d)", before, after)
	}
	wantEgress(t, env, sb.ID, prefixes("9.9.9.9/32"), prefixes("0.0.0.0/0"), false)

	// Restart: Recover re-applies the stored policy.
	_, before = env.Runtime.Egress(sb.ID)
	o2, err := orchestrator.New(orchestrator.Config{Store: env.DB, Runtime: env.Runtime, EnvdPort: env.Runtime.EnvdPort})
	if err != nil {
		t.Fatal(err)
	}
	if err := o2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if _, after := env.Runtime.Egress(sb.ID); after != before+1 {
		t.Fatalf("recover did not re-apply the policy")
	}
	if got, err := o2.Get(ctx, team, sb.ID); err != nil || !slices.Equal(got.Network.AllowOut, []string{"9.9.9.9/32"}) {
		t.Fatalf("after restart: %+v, %v", got.Network, err)
	}
}

func TestForkInheritsNetworkPolicy(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	src := create(t, env, orchestrator.CreateRequest{AllowOut: []string{"1.2.3.4"}, DenyOut: []string{"0.0.0.0/0"}, PrivateTraffic: true})
	res, err := env.Orch.Fork(ctx, team, src.ID, 2, 60e9)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		f := r.Sandbox
		if !slices.Equal(f.Network.AllowOut, src.Network.AllowOut) || !slices.Equal(f.Network.DenyOut, src.Network.DenyOut) {
			t.Fatalf("fork network %+v, source %+v", f.Network, src.Network)
		}
		if f.Network.TrafficAccessToken == "" || f.Network.TrafficAccessToken == src.Network.TrafficAccessToken {
			t.Fatal("fork needs a traffic token of its own")
		}
		wantEgress(t, env, f.ID, prefixes("1.2.3.4/32"), prefixes("0.0.0.0/0"), false)
	}
	if got, _ := env.DB.GetSandbox(ctx, src.ID); !slices.Equal(got.Network.AllowOut, []string{"1.2.3.4/32"}) {
		t.Fatalf("source lost its policy: %+v", got.Network)
	}
}
