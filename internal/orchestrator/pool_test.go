package orchestrator_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/orchestrator/warmpool"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit"
)

// waitPool polls until the first pool has want ready members whose IDs
// satisfy ok, and returns them.
func waitPool(t *testing.T, o *orchestrator.Orchestrator, want int, ok func(ids []string) bool) []string {
	t.Helper()
	var st []warmpool.Status
	defer func() {
		if t.Failed() {
			t.Logf("pools: %+v", st)
		}
	}()
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("the pool to reach %d ready members", want), func() bool {
		st = o.Pools()
		return len(st) == 1 && st[0].Ready == want && (ok == nil || ok(st[0].IDs))
	})
	return st[0].IDs
}

func TestWarmPool(t *testing.T) {
	env := orchestratortest.New(t, orchestrator.Config{Pools: []orchestrator.PoolSpec{{Template: "base", Size: 2}}})
	ctx, cancel := context.WithCancel(context.Background())
	env.Orch.StartPools(ctx)
	warm := waitPool(t, env.Orch, 2, nil)

	// Members count against the host's reservation.
	if n := env.Orch.Reserved(); n.MemoryMiB != 2*512 || n.DiskMiB != 2*1024 {
		t.Fatalf("reserved with 2 warm members: %+v", n)
	}
	// Members are not sandboxes of anyone: not listed, deny-all network.
	if l, err := env.Orch.List(ctx, team, store.SandboxFilter{}); err != nil || len(l) != 0 {
		t.Fatalf("list shows %d sandboxes (%v), want none", len(l), err)
	}
	for _, id := range warm {
		if eg, _ := env.Runtime.Egress(id); eg.Internet {
			t.Fatalf("warm member %s has internet", id)
		}
		if !env.Runtime.Background(id) {
			t.Fatalf("warm member %s was not made in the background", id)
		}
		// The warm-up /init: the template's values, no access token.
		if in, ok := env.Runtime.Init(id); !ok || in.AccessToken != nil || in.DefaultUser != "user" ||
			in.Internal["E2B_SANDBOX_ID"] != id || in.Timestamp == nil {
			t.Fatalf("warm-up /init of member %s: %+v %v", id, in, ok)
		}
	}

	// A create takes one and applies the request to it.
	sb := create(t, env, orchestrator.CreateRequest{Secure: true, AllowInternet: true,
		EnvVars: map[string]string{"A": "1"}, DenyOut: []string{"10.0.0.0/8"}})
	if !slices.Contains(warm, sb.ID) {
		t.Fatalf("create did not take a warm member: %s not in %v", sb.ID, warm)
	}
	in, ok := env.Runtime.Init(sb.ID)
	if !ok || in.EnvVars["A"] != "1" || in.AccessToken == nil || *in.AccessToken != sb.EnvdAccessToken ||
		in.Internal["E2B_SANDBOX_ID"] != sb.ID {
		t.Fatalf("init of the handed-out member: %+v %v", in, ok)
	}
	if eg, _ := env.Runtime.Egress(sb.ID); !eg.Internet || len(eg.Deny) != 1 {
		t.Fatalf("egress of the handed-out member: %+v", eg)
	}
	if env.Runtime.Background(sb.ID) {
		t.Fatalf("handed-out member %s still has the background CPU weight", sb.ID)
	}
	if l, _ := env.Orch.List(ctx, team, store.SandboxFilter{}); len(l) != 1 || l[0].ID != sb.ID {
		t.Fatalf("list after the hand-out: %+v", l)
	}

	// The pool refills, never with the handed-out sandbox, even once it is gone.
	notReused := func(ids []string) bool { return !slices.Contains(ids, sb.ID) }
	waitPool(t, env.Orch, 2, notReused)
	if err := env.Orch.Kill(ctx, team, sb.ID); err != nil {
		t.Fatal(err)
	}
	var kept []string // handed out and not killed
	for range 3 {
		next := create(t, env, orchestrator.CreateRequest{})
		kept = append(kept, next.ID)
		if next.ID == sb.ID {
			t.Fatal("a handed-out sandbox was handed out again")
		}
		waitPool(t, env.Orch, 2, notReused)
	}

	// A rebuilt template drains the pool: its members are replaced.
	before := waitPool(t, env.Orch, 2, nil)
	if err := env.DB.UpsertTemplate(ctx, store.Template{ID: "tplbase", Name: "base", BuildID: "rebuilt",
		RootfsDir: "/nonexistent", CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024, EnvdVersion: state.Version}); err != nil {
		t.Fatal(err)
	}
	after := waitPool(t, env.Orch, 2, func(ids []string) bool {
		return !slices.Contains(ids, before[0]) && !slices.Contains(ids, before[1])
	})
	for _, id := range before {
		if !slices.Contains(env.Runtime.Killed(), id) {
			t.Fatalf("outdated member %s was not killed", id)
		}
	}

	// Shutdown kills the members; handed-out sandboxes stay.
	live := create(t, env, orchestrator.CreateRequest{})
	kept = append(kept, live.ID)
	cancel()
	env.Orch.WaitPools()
	for _, id := range after {
		if id != live.ID && !slices.Contains(env.Runtime.Killed(), id) {
			t.Fatalf("member %s survived shutdown", id)
		}
	}
	for _, id := range kept {
		if slices.Contains(env.Runtime.Killed(), id) {
			t.Fatalf("handed-out sandbox %s was killed at shutdown", id)
		}
	}
	if n := env.Runtime.Count(); n != len(kept) {
		t.Fatalf("after shutdown %d fake sandboxes, want the %d handed out", n, len(kept))
	}
}

func TestWarmPoolEmptyOrFailing(t *testing.T) {
	env := orchestratortest.New(t, orchestrator.Config{Pools: []orchestrator.PoolSpec{{Template: "base", Size: 1}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); env.Orch.WaitPools() }()
	// Without StartPools the pool is empty: creates work as without one.
	sb := create(t, env, orchestrator.CreateRequest{})
	if sb.State != store.StateRunning {
		t.Fatalf("unpooled create: %+v", sb)
	}
	env.Orch.StartPools(ctx)
	warm := waitPool(t, env.Orch, 1, nil)
	// A member whose envd refuses /init is killed, and the create is made
	// the ordinary way.
	env.Runtime.SetInitStatus(500)
	if _, err := env.Orch.Create(ctx, orchestrator.CreateRequest{Team: team, Template: "base", Timeout: time.Minute}); err == nil {
		t.Fatal("create succeeded although envd refuses /init")
	}
	if !slices.Contains(env.Runtime.Killed(), warm[0]) {
		t.Fatalf("failed member %s not killed", warm[0])
	}
	env.Runtime.SetInitStatus(204)
	next := create(t, env, orchestrator.CreateRequest{})
	if next.ID == warm[0] {
		t.Fatal("a failed member was handed out")
	}
}
