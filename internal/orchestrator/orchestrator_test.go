package orchestrator_test

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// team is the team the tests act for unless they test teams.
const team = store.DefaultTeam

func create(t *testing.T, env *orchestratortest.Env, req orchestrator.CreateRequest) store.Sandbox {
	t.Helper()
	if req.Team == "" {
		req.Team = team
	}
	if req.Template == "" {
		req.Template = "base"
	}
	if req.Timeout == 0 {
		req.Timeout = time.Minute
	}
	sb, err := env.Orch.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return sb
}

func TestCreate(t *testing.T) {
	env := orchestratortest.New(t, orchestrator.Config{})
	sb := create(t, env, orchestrator.CreateRequest{Secure: true, EnvVars: map[string]string{"A": "1"},
		Metadata: map[string]string{"m": "v"}})
	if !regexp.MustCompile(`^i[a-z0-9]{20}$`).MatchString(sb.ID) {
		t.Fatalf("id %q", sb.ID)
	}
	if sb.State != store.StateRunning || sb.TemplateID != "tplbase" || sb.Alias != "base" || sb.EnvdAccessToken == "" {
		t.Fatalf("sandbox %+v", sb)
	}
	if sb.CPUCount != 2 || sb.MemoryMB != 512 || sb.DiskSizeMB != 1024 {
		t.Fatalf("limits %+v", sb)
	}
	in, ok := env.Runtime.Init(sb.ID)
	if !ok {
		t.Fatal("envd /init not called")
	}
	if in.AccessToken == nil || *in.AccessToken != sb.EnvdAccessToken || in.DefaultUser != "user" ||
		in.DefaultWorkdir != "/home/user" || in.EnvVars["A"] != "1" || in.Timestamp == nil ||
		in.Internal["E2B_SANDBOX_ID"] != sb.ID || in.Internal["E2B_TEMPLATE_ID"] != "tplbase" {
		t.Fatalf("init %+v", in)
	}
	rt, ok := env.Orch.Lookup(sb.ID)
	if !ok || rt.Addr.String() != "127.0.0.1" || rt.Token != sb.EnvdAccessToken || rt.State != store.StateRunning {
		t.Fatalf("lookup %+v %v", rt, ok)
	}
	row, err := env.DB.GetSandbox(context.Background(), sb.ID)
	if err != nil || row.Metadata["m"] != "v" {
		t.Fatalf("row %+v %v", row, err)
	}
	tpl, _ := env.DB.GetTemplate(context.Background(), "base")
	if tpl.SpawnCount != 1 {
		t.Fatalf("spawn count %d", tpl.SpawnCount)
	}
	insecure := create(t, env, orchestrator.CreateRequest{})
	if in, _ := env.Runtime.Init(insecure.ID); in.AccessToken != nil || insecure.EnvdAccessToken != "" {
		t.Fatalf("insecure sandbox got a token")
	}
}

func TestCreateFailures(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*orchestratortest.Runtime)
		req   orchestrator.CreateRequest
		kind  error
		ranRt bool
	}{
		{"unknown template", nil, orchestrator.CreateRequest{Team: team, Template: "nope", Timeout: time.Minute}, errdefs.ErrNotFound, false},
		{"zero timeout", nil, orchestrator.CreateRequest{Team: team, Template: "base"}, errdefs.ErrInvalidArgument, false},
		{"timeout too long", nil, orchestrator.CreateRequest{Team: team, Template: "base", Timeout: 25 * time.Hour}, errdefs.ErrInvalidArgument, false},
		{"runtime create fails", func(r *orchestratortest.Runtime) {
			r.CreateF = func(runtime.Spec) error { return errdefs.ErrResourceExhausted }
		}, orchestrator.CreateRequest{Team: team, Template: "base", Timeout: time.Minute}, errdefs.ErrResourceExhausted, true},
		{"envd never healthy", func(r *orchestratortest.Runtime) { r.SetHealthy(false) },
			orchestrator.CreateRequest{Team: team, Template: "base", Timeout: time.Minute}, errdefs.ErrUnavailable, true},
		// envd's answers map back to kinds; one that blames envd's
		// caller blames the orchestrator (internal), not the API client.
		{"envd init fails", func(r *orchestratortest.Runtime) { r.SetInitStatus(http.StatusInternalServerError) },
			orchestrator.CreateRequest{Team: team, Template: "base", Timeout: time.Minute}, errdefs.ErrInternal, true},
		{"envd init busy", func(r *orchestratortest.Runtime) { r.SetInitStatus(http.StatusServiceUnavailable) },
			orchestrator.CreateRequest{Team: team, Template: "base", Timeout: time.Minute}, errdefs.ErrUnavailable, true},
		{"envd init disk full", func(r *orchestratortest.Runtime) { r.SetInitStatus(http.StatusInsufficientStorage) },
			orchestrator.CreateRequest{Team: team, Template: "base", Timeout: time.Minute}, errdefs.ErrNoSpace, true},
		{"envd init refuses the token", func(r *orchestratortest.Runtime) { r.SetInitStatus(http.StatusUnauthorized) },
			orchestrator.CreateRequest{Team: team, Template: "base", Timeout: time.Minute}, errdefs.ErrInternal, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := orchestratortest.New(t, orchestrator.Config{ReadyTimeout: 500 * time.Millisecond})
			if tt.setup != nil {
				tt.setup(env.Runtime)
			}
			_, err := env.Orch.Create(context.Background(), tt.req)
			if !errors.Is(err, tt.kind) || (tt.kind == errdefs.ErrInternal && errors.Is(err, errdefs.ErrUnauthenticated)) {
				t.Fatalf("err = %v, want %v", err, tt.kind)
			}
			if got := len(env.Runtime.Killed()) > 0; got != tt.ranRt {
				t.Fatalf("runtime kill called = %v, want %v", got, tt.ranRt)
			}
			// a create that failed in the runtime or envd says so to E2B's clients
			if code, _ := errdefs.ErrorCode(err); (code == errdefs.CodeCreateFailed) != tt.ranRt {
				t.Fatalf("error_code %q (runtime ran: %v)", code, tt.ranRt)
			}
			if env.Runtime.Count() != 0 {
				t.Fatal("runtime sandbox leaked")
			}
			rows, _ := env.DB.ListSandboxes(context.Background(), store.SandboxFilter{})
			if len(rows) != 0 {
				t.Fatalf("rows left: %+v", rows)
			}
		})
	}
}

// A create takes the ID of a sandbox the backend made ahead; its policy
// is set beside the runtime's Create (the slot's network lets nothing
// out), and the create answers only once it is set. A failed one, or one
// whose policy fails, kills that ID.
func TestCreatePrelaunched(t *testing.T) {
	env := orchestratortest.New(t, orchestrator.Config{ReadyTimeout: 500 * time.Millisecond})
	const slot = "islot0000000000000001"
	env.Runtime.AddSlot(slot)
	release := make(chan struct{})
	env.Runtime.EgressF = func(string, netpolicy.Egress) error { <-release; return nil }
	var egressDuring bool
	env.Runtime.CreateF = func(spec runtime.Spec) error {
		_, n := env.Runtime.Egress(spec.ID)
		egressDuring = n == 0 // the policy is still being set
		close(release)
		return nil
	}
	sb := create(t, env, orchestrator.CreateRequest{AllowOut: []string{"10.0.0.0/8"}})
	if sb.ID != slot || env.Runtime.State(slot) != "running" {
		t.Fatalf("created %s (%s), want the slot %s", sb.ID, env.Runtime.State(slot), slot)
	}
	if !egressDuring {
		t.Fatal("the slot's policy was set before its Create: it should overlap it")
	}
	if e, n := env.Runtime.Egress(slot); len(e.Allow) != 1 || n != 1 {
		t.Fatalf("slot's egress %+v (set %d times) when the create answered", e, n)
	}
	if in, ok := env.Runtime.Init(slot); !ok || in.Internal["E2B_SANDBOX_ID"] != slot {
		t.Fatalf("init of the slot %+v %v", in, ok)
	}
	env.Runtime.EgressF, env.Runtime.CreateF = nil, nil
	if other := create(t, env, orchestrator.CreateRequest{}); other.ID == slot {
		t.Fatal("a slot handed out twice")
	}
	failing := []struct {
		id      string
		create  func(runtime.Spec) error
		egressF func(string, netpolicy.Egress) error
	}{
		{"islot0000000000000002", func(runtime.Spec) error { return errdefs.ErrResourceExhausted }, nil},
		{"islot0000000000000003", nil, func(string, netpolicy.Egress) error { return errdefs.ErrInternal }},
	}
	for _, f := range failing {
		env.Runtime.AddSlot(f.id)
		env.Runtime.CreateF, env.Runtime.EgressF = f.create, f.egressF
		if _, err := env.Orch.Create(context.Background(), orchestrator.CreateRequest{Team: team, Template: "base", Timeout: time.Minute}); err == nil {
			t.Fatalf("%s: create succeeded", f.id)
		}
		if k := env.Runtime.Killed(); len(k) == 0 || k[len(k)-1] != f.id {
			t.Fatalf("killed %v, want the slot %s", k, f.id)
		}
	}
}

// An envd that cannot be reached at the first /init (still starting) is
// waited for through /health, then initialised once.
func TestCreateWaitsForEnvd(t *testing.T) {
	env := orchestratortest.New(t, orchestrator.Config{ReadyTimeout: 5 * time.Second})
	env.Runtime.SetHealthy(false)
	time.AfterFunc(50*time.Millisecond, func() { env.Runtime.SetHealthy(true) })
	sb, err := env.Orch.Create(context.Background(), orchestrator.CreateRequest{Team: team, Template: "base", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if n := env.Runtime.InitCount(sb.ID); n != 1 {
		t.Fatalf("init count = %d, want 1", n)
	}
}

func TestCreateLimitsAboveMax(t *testing.T) {
	env := orchestratortest.New(t, orchestrator.Config{MaxMemoryMiB: 256})
	_, err := env.Orch.Create(context.Background(), orchestrator.CreateRequest{Team: team, Template: "base", Timeout: time.Minute})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("err = %v", err)
	}
}

func TestPauseResumeConnect(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	o := env.Orch
	sb := create(t, env, orchestrator.CreateRequest{})

	if _, err := o.Resume(ctx, team, sb.ID, time.Minute); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("resume running: %v", err)
	}
	if _, resumed, err := o.Connect(ctx, team, sb.ID, time.Minute); err != nil || resumed {
		t.Fatalf("connect running: %v %v", resumed, err)
	}
	if err := o.Pause(ctx, team, sb.ID); err != nil {
		t.Fatal(err)
	}
	if env.Runtime.State(sb.ID) != "paused" {
		t.Fatal("runtime not paused")
	}
	if err := o.Pause(ctx, team, sb.ID); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("pause paused: %v", err)
	}
	if err := o.SetTimeout(ctx, team, sb.ID, time.Minute); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("timeout paused: %v", err)
	}
	if rt, _ := o.Lookup(sb.ID); rt.State != store.StatePaused {
		t.Fatalf("lookup state %q", rt.State)
	}
	got, resumed, err := o.Connect(ctx, team, sb.ID, 2*time.Minute)
	if err != nil || !resumed || got.State != store.StateRunning {
		t.Fatalf("connect paused: %+v %v %v", got, resumed, err)
	}
	if err := o.Pause(ctx, team, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := o.Resume(ctx, team, sb.ID, time.Minute); err != nil || got.State != store.StateRunning {
		t.Fatalf("resume: %v", err)
	}
	for _, f := range []func() error{
		func() error { return o.Pause(ctx, team, "inope") },
		func() error { _, err := o.Resume(ctx, team, "inope", time.Minute); return err },
		func() error { _, _, err := o.Connect(ctx, team, "inope", time.Minute); return err },
		func() error { return o.SetTimeout(ctx, team, "inope", time.Minute) },
		func() error { return o.Refresh(ctx, team, "inope", time.Minute) },
		func() error { return o.Kill(ctx, team, "inope") },
		func() error { _, err := o.Metrics(ctx, team, "inope", time.Time{}, time.Time{}); return err },
		func() error { _, err := o.Get(ctx, team, "inope"); return err },
	} {
		if err := f(); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("unknown id: %v", err)
		}
	}
}

func TestPauseFailureKeepsRunning(t *testing.T) {
	env := orchestratortest.New(t, orchestrator.Config{})
	env.Runtime.PauseF = func(string) error { return errdefs.ErrNotImplemented }
	sb := create(t, env, orchestrator.CreateRequest{})
	if err := env.Orch.Pause(context.Background(), team, sb.ID); !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Fatalf("err %v", err)
	}
	if got, _ := env.Orch.Get(context.Background(), team, sb.ID); got.State != store.StateRunning {
		t.Fatalf("state %q", got.State)
	}
}

func TestTimeouts(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{MaxTimeout: time.Hour})
	o := env.Orch
	sb := create(t, env, orchestrator.CreateRequest{Timeout: 10 * time.Minute})

	// Connect and Refresh never shorten.
	if got, _, err := o.Connect(ctx, team, sb.ID, time.Minute); err != nil || !got.EndAt.Equal(sb.EndAt) {
		t.Fatalf("connect shortened: %v → %v (%v)", sb.EndAt, got.EndAt, err)
	}
	if err := o.Refresh(ctx, team, sb.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if got, _ := o.Get(ctx, team, sb.ID); !got.EndAt.Equal(sb.EndAt) {
		t.Fatal("refresh shortened")
	}
	// Extend is capped at StartedAt + MaxTimeout.
	if got, _, _ := o.Connect(ctx, team, sb.ID, time.Hour); got.EndAt.After(sb.StartedAt.Add(time.Hour)) {
		t.Fatalf("end %v beyond max", got.EndAt)
	}
	if err := o.SetTimeout(ctx, team, sb.ID, 2*time.Hour); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("set too long: %v", err)
	}
	// SetTimeout shortens.
	if err := o.SetTimeout(ctx, team, sb.ID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if got, _ := o.Get(ctx, team, sb.ID); got.EndAt.After(time.Now().Add(31 * time.Second)) {
		t.Fatalf("not shortened: %v", got.EndAt)
	}
	row, _ := env.DB.GetSandbox(ctx, sb.ID)
	if row.EndAt.After(time.Now().Add(31 * time.Second)) {
		t.Fatal("store not updated")
	}
}

func TestKill(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	running := create(t, env, orchestrator.CreateRequest{})
	paused := create(t, env, orchestrator.CreateRequest{})
	if err := env.Orch.Pause(ctx, team, paused.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{running.ID, paused.ID} {
		if err := env.Orch.Kill(ctx, team, id); err != nil {
			t.Fatal(err)
		}
		if err := env.Orch.Kill(ctx, team, id); !errdefs.IsNotFound(err) {
			t.Fatalf("second kill: %v", err)
		}
		if _, ok := env.Orch.Lookup(id); ok {
			t.Fatal("still routable")
		}
	}
	if env.Runtime.Count() != 0 {
		t.Fatal("runtime leaked")
	}
}

func TestRecover(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	alive := create(t, env, orchestrator.CreateRequest{})
	paused := create(t, env, orchestrator.CreateRequest{})
	if err := env.Orch.Pause(ctx, team, paused.ID); err != nil {
		t.Fatal(err)
	}
	dead := create(t, env, orchestrator.CreateRequest{})
	_ = env.Runtime.Kill(ctx, dead.ID) // died while the server was down

	o2, err := orchestrator.New(orchestrator.Config{Store: env.DB, Runtime: env.Runtime, EnvdPort: env.Runtime.EnvdPort})
	if err != nil {
		t.Fatal(err)
	}
	if err := o2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if rt, ok := o2.Lookup(alive.ID); !ok || rt.State != store.StateRunning {
		t.Fatal("alive not adopted")
	}
	if rt, ok := o2.Lookup(paused.ID); !ok || rt.State != store.StatePaused {
		t.Fatal("paused not adopted")
	}
	if _, ok := o2.Lookup(dead.ID); ok {
		t.Fatal("dead adopted")
	}
	if _, err := env.DB.GetSandbox(ctx, dead.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("dead row kept: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	sb := create(t, env, orchestrator.CreateRequest{})
	ms, err := env.Orch.Metrics(ctx, team, sb.ID, time.Time{}, time.Time{})
	if err != nil || len(ms) != 1 {
		t.Fatalf("metrics %v %v", ms, err)
	}
	m := ms[0]
	if m.CPUCount != 2 || m.MemTotal != 512<<20 || m.MemUsed == 0 || m.DiskTotal != 1024<<20 || m.CPUUsedPct < 0 || m.CPUUsedPct > 100 {
		t.Fatalf("metric %+v", m)
	}
	// A backend that cannot see the disk (a VM): envd's figures, asked with
	// the sandbox's token.
	secure := create(t, env, orchestrator.CreateRequest{Secure: true})
	env.Runtime.SetEnvdDisk(5<<20, 100<<20)
	ms, err = env.Orch.Metrics(ctx, team, secure.ID, time.Time{}, time.Time{})
	if err != nil || len(ms) != 1 || ms[0].DiskUsed != 5<<20 || ms[0].DiskTotal != 100<<20 {
		t.Fatalf("metrics with envd disk figures: %+v %v", ms, err)
	}
	if got := env.Runtime.MetricsToken(); got != secure.EnvdAccessToken {
		t.Fatalf("envd /metrics got token %q, want the sandbox's", got)
	}
	_ = env.Orch.Pause(ctx, team, sb.ID)
	if ms, err := env.Orch.Metrics(ctx, team, sb.ID, time.Time{}, time.Time{}); err != nil || len(ms) != 0 {
		t.Fatalf("paused metrics %v %v", ms, err)
	}
}

// TestMetricsHistory: Run collects every running sandbox's readings, and
// Metrics answers a time range from them, with one reading taken now while
// the sandbox runs; a microVM's disk figures come from envd about once a
// minute of collections, not at each.
func TestMetricsHistory(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	env := orchestratortest.New(t, orchestrator.Config{MetricsEvery: 10 * time.Millisecond})
	ran := make(chan struct{})
	go func() { defer close(ran); env.Orch.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	sb := create(t, env, orchestrator.CreateRequest{})
	env.Runtime.SetEnvdDisk(5<<20, 100<<20)
	secure := create(t, env, orchestrator.CreateRequest{Secure: true})
	var all []orchestrator.Metric
	for deadline := time.Now().Add(10 * time.Second); len(all) < 30; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d readings after 10 s of collections every 10 ms", len(all))
		}
		var err error
		if all, err = env.Orch.Metrics(ctx, team, sb.ID, time.Time{}, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range all {
		if i > 0 && !m.Time.After(all[i-1].Time) {
			t.Fatalf("reading %d at %v, not after %v", i, m.Time, all[i-1].Time)
		}
		if m.CPUCount != 2 || m.MemTotal != 512<<20 || m.DiskTotal != 100<<20 { // the fake's disk comes from envd
			t.Fatalf("reading %d: %+v", i, m)
		}
	}
	// A range: only its readings, without one taken now when it ended before.
	from, to := all[5].Time, all[9].Time
	if got, err := env.Orch.Metrics(ctx, team, sb.ID, from, to); err != nil || len(got) != 5 ||
		!got[0].Time.Equal(from) || !got[4].Time.Equal(to) {
		t.Fatalf("metrics from %v to %v: %d readings, %v", from, to, len(got), err)
	}
	// Disk figures the runtime cannot see are envd's, asked far less
	// often than readings are collected.
	vm, err := env.Orch.Metrics(ctx, team, secure.ID, time.Time{}, time.Time{})
	if err != nil || len(vm) < 20 {
		t.Fatalf("microVM metrics: %d readings, %v", len(vm), err)
	}
	for _, m := range vm {
		if m.DiskUsed != 5<<20 || m.DiskTotal != 100<<20 {
			t.Fatalf("microVM reading with disk %d/%d, want envd's", m.DiskUsed, m.DiskTotal)
		}
	}
	// Without requests (each asks envd for the disk as it is), a second
	// of collections asks it a few times, not at each of ~200 readings.
	calls0, n0 := env.Runtime.MetricsCalls(), len(all)+len(vm)
	time.Sleep(time.Second)
	calls := env.Runtime.MetricsCalls() - calls0
	all, _ = env.Orch.Metrics(ctx, team, sb.ID, time.Time{}, time.Time{})
	vm, _ = env.Orch.Metrics(ctx, team, secure.ID, time.Time{}, time.Time{})
	if n := len(all) + len(vm) - n0; n < 20 || calls > n/4 {
		t.Fatalf("envd's /metrics called %d times for %d readings collected", calls, n)
	}
	// Paused: what was collected, no reading taken now.
	if err := env.Orch.Pause(ctx, team, sb.ID); err != nil {
		t.Fatal(err)
	}
	paused, err := env.Orch.Metrics(ctx, team, sb.ID, time.Time{}, time.Time{})
	if err != nil || len(paused) < len(all)-1 {
		t.Fatalf("paused: %d readings (had %d), %v", len(paused), len(all), err)
	}
	time.Sleep(50 * time.Millisecond)
	if again, _ := env.Orch.Metrics(ctx, team, sb.ID, time.Time{}, time.Time{}); len(again) != len(paused) {
		t.Fatalf("readings of a paused sandbox grew from %d to %d", len(paused), len(again))
	}
}

func TestRecoverRuntimeErrors(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	sb := create(t, env, orchestrator.CreateRequest{})
	env.Runtime.RecoverErr = errors.New("could not remove a leftover")
	fresh := func() *orchestrator.Orchestrator {
		o, err := orchestrator.New(orchestrator.Config{Store: env.DB, Runtime: env.Runtime, EnvdPort: env.Runtime.EnvdPort})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	// Partial failure: the live sandbox is still adopted.
	o := fresh()
	if err := o.Recover(ctx); err != nil {
		t.Fatalf("partial failure stopped recovery: %v", err)
	}
	if _, ok := o.Lookup(sb.ID); !ok {
		t.Fatal("not adopted")
	}
	// Total failure with live rows: abort rather than forget them.
	_ = env.Runtime.Kill(ctx, sb.ID)
	if err := fresh().Recover(ctx); err == nil {
		t.Fatal("recovery with no handles and an error succeeded")
	}
	if _, err := env.DB.GetSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("row dropped on failed recovery: %v", err)
	}
}
