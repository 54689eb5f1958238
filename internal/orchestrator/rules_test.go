package orchestrator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/store"
)

const testCA = "-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"

var headerRules = []store.NetworkRule{{Domain: "api.example.com", Headers: map[string]string{"Authorization": "Bearer ${e2b.secrets.k}"}}}

func ruledRequest() orchestrator.CreateRequest {
	return orchestrator.CreateRequest{AllowOut: []string{"api.example.com"}, DenyOut: []string{"0.0.0.0/0"}, Rules: headerRules}
}

// TestHeaderRules: a sandbox created with header rules (from the warm pool
// too) has them in its record and its host policy, with its team, and its
// envd is handed the egress CA; so is a resumed one. A sandbox without
// header rules is never handed the CA.
func TestHeaderRules(t *testing.T) {
	env := orchestratortest.New(t, orchestrator.Config{EgressCA: []byte(testCA),
		Pools: []orchestrator.PoolSpec{{Template: "base", Size: 1}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); env.Orch.WaitPools() }()
	env.Orch.StartPools(ctx)
	warm := waitPool(t, env.Orch, 1, nil)

	sb := create(t, env, ruledRequest())
	if sb.ID != warm[0] {
		t.Fatalf("not created from the pool: %s, pool had %v", sb.ID, warm)
	}
	plainSb := create(t, env, orchestrator.CreateRequest{})
	for _, id := range []string{sb.ID, plainSb.ID} {
		in, _ := env.Runtime.Init(id)
		if want := id == sb.ID; (in.EgressCA == testCA) != want {
			t.Fatalf("%s: envd given the CA = %v, want %v", id, in.EgressCA != "", want)
		}
	}
	eg, _ := env.Runtime.Egress(sb.ID)
	if eg.Team != team || len(eg.Headers) != 1 || eg.Headers[0].Domain != "api.example.com" || len(eg.Domains) != 1 {
		t.Fatalf("host policy: %+v", eg)
	}
	if got, _ := env.Orch.Get(ctx, team, sb.ID); len(got.Network.Rules) != 1 {
		t.Fatalf("stored rules: %+v", got.Network)
	}

	if err := env.Orch.Pause(ctx, team, sb.ID); err != nil {
		t.Fatal(err)
	}
	n := env.Runtime.InitCount(sb.ID)
	if _, err := env.Orch.Resume(ctx, team, sb.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if in, _ := env.Runtime.Init(sb.ID); env.Runtime.InitCount(sb.ID) != n+1 || in.EgressCA != testCA {
		t.Fatalf("resume: %d inits, CA %v", env.Runtime.InitCount(sb.ID)-n, in.EgressCA != "")
	}
}

// TestUpdateNetworkRules: rules added to a running sandbox install the CA
// before they apply; a paused one gets it at resume; rules replace and
// clear like the rest of the policy.
func TestUpdateNetworkRules(t *testing.T) {
	env := orchestratortest.New(t, orchestrator.Config{EgressCA: []byte(testCA)})
	ctx := context.Background()
	sb := create(t, env, orchestrator.CreateRequest{Secure: true})
	n := env.Runtime.InitCount(sb.ID)
	up := orchestrator.NetworkUpdate{AllowOut: []string{"api.example.com"}, DenyOut: []string{"0.0.0.0/0"}, Rules: headerRules}
	if _, err := env.Orch.UpdateNetwork(ctx, team, sb.ID, up); err != nil {
		t.Fatal(err)
	}
	if in, _ := env.Runtime.Init(sb.ID); env.Runtime.InitCount(sb.ID) != n+1 || in.EgressCA != testCA || in.EnvVars != nil {
		t.Fatalf("update: %d inits, last %+v", env.Runtime.InitCount(sb.ID)-n, in)
	}
	if eg, _ := env.Runtime.Egress(sb.ID); len(eg.Headers) != 1 {
		t.Fatalf("host policy after update: %+v", eg)
	}
	up.Rules = nil
	if _, err := env.Orch.UpdateNetwork(ctx, team, sb.ID, up); err != nil {
		t.Fatal(err)
	}
	if eg, _ := env.Runtime.Egress(sb.ID); len(eg.Headers) != 0 || len(eg.Domains) != 1 {
		t.Fatalf("rules not cleared: %+v", eg)
	}
	if got, _ := env.Orch.Get(ctx, team, sb.ID); len(got.Network.Rules) != 0 {
		t.Fatalf("stored rules not cleared: %+v", got.Network)
	}
	// Paused: nothing to install now.
	if err := env.Orch.Pause(ctx, team, sb.ID); err != nil {
		t.Fatal(err)
	}
	n = env.Runtime.InitCount(sb.ID)
	up.Rules = headerRules
	if _, err := env.Orch.UpdateNetwork(ctx, team, sb.ID, up); err != nil {
		t.Fatal(err)
	}
	if env.Runtime.InitCount(sb.ID) != n {
		t.Fatal("a paused sandbox's envd was called")
	}
	if _, err := env.Orch.Resume(ctx, team, sb.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if in, _ := env.Runtime.Init(sb.ID); in.EgressCA != testCA {
		t.Fatal("the resume's /init did not carry the CA")
	}
}

// TestHeaderRulesWithoutCA: a server without an egress CA refuses header
// rules (501), at create and update, and leaves nothing behind.
func TestHeaderRulesWithoutCA(t *testing.T) {
	env := orchestratortest.New(t, orchestrator.Config{})
	ctx := context.Background()
	req := ruledRequest()
	req.Team, req.Template, req.Timeout = team, "base", time.Minute
	if _, err := env.Orch.Create(ctx, req); !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Fatalf("create: %v, want ErrNotImplemented", err)
	}
	if n := env.Runtime.Count(); n != 0 {
		t.Fatalf("%d sandboxes left by a refused create", n)
	}
	sb := create(t, env, orchestrator.CreateRequest{})
	_, err := env.Orch.UpdateNetwork(ctx, team, sb.ID, orchestrator.NetworkUpdate{AllowOut: req.AllowOut, DenyOut: req.DenyOut,
		Rules: headerRules})
	if !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Fatalf("update: %v, want ErrNotImplemented", err)
	}
	if eg, _ := env.Runtime.Egress(sb.ID); len(eg.Headers)+len(eg.Domains) != 0 {
		t.Fatalf("refused update applied: %+v", eg)
	}
}
