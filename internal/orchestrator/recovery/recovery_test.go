package recovery

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// memStore is the store as a map.
type memStore struct {
	rows      map[string]store.Sandbox
	updateErr error
}

func (m *memStore) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]store.Sandbox, error) {
	ids := slices.Sorted(maps.Keys(m.rows))
	out := make([]store.Sandbox, 0, len(ids))
	for _, id := range ids {
		out = append(out, m.rows[id])
	}
	return out, nil
}

func (m *memStore) UpdateSandbox(ctx context.Context, s store.Sandbox) error {
	if m.updateErr != nil {
		return m.updateErr
	}
	m.rows[s.ID] = s
	return nil
}

func (m *memStore) DeleteSandbox(ctx context.Context, id string) error {
	delete(m.rows, id)
	return nil
}

// fakeRuntime answers Recover with the handles of the IDs it still has.
type fakeRuntime struct {
	runtime.Runtime // only Name and Recover are called
	live            map[string]*runtime.Handle
	err             error
	asked           []string
}

func (r *fakeRuntime) Name() string { return "container" }

func (r *fakeRuntime) Recover(ctx context.Context, ids []string) ([]*runtime.Handle, error) {
	r.asked = slices.Clone(ids)
	var hs []*runtime.Handle
	for _, id := range ids {
		if h, ok := r.live[id]; ok {
			hs = append(hs, h)
		}
	}
	return hs, r.err
}

var addr = netip.MustParseAddr("10.11.0.9")

// TestRunDecidesPerStoredState walks every stored state (and a row no
// state machine knows) through a runtime that has or lacks the sandbox.
func TestRunDecidesPerStoredState(t *testing.T) {
	type outcome struct {
		state   store.State // "" when the row is deleted
		adopted bool
		addr    string
	}
	for _, tc := range []struct {
		name    string
		row     store.Sandbox
		handle  *runtime.Handle // nil: the runtime has no such sandbox
		want    outcome
		toAsk   bool // the ID goes to the runtime's Recover
		foreign bool
	}{
		{"running, alive", store.Sandbox{State: store.StateRunning, Runtime: "container"},
			&runtime.Handle{Addr: addr}, outcome{store.StateRunning, true, addr.String()}, true, false},
		{"running, gone", store.Sandbox{State: store.StateRunning, Runtime: "container"},
			nil, outcome{}, true, false},
		{"pausing, the pause finished", store.Sandbox{State: store.StatePausing, Runtime: "container", Addr: "10.0.0.1"},
			&runtime.Handle{Paused: true}, outcome{store.StatePaused, true, "10.0.0.1"}, true, false},
		{"pausing, the pause did not happen", store.Sandbox{State: store.StatePausing, Runtime: "container"},
			&runtime.Handle{Addr: addr}, outcome{store.StateRunning, true, addr.String()}, true, false},
		{"paused, still paused", store.Sandbox{State: store.StatePaused, Runtime: ""},
			&runtime.Handle{Paused: true}, outcome{store.StatePaused, true, ""}, true, false},
		{"paused, gone", store.Sandbox{State: store.StatePaused, Runtime: "container"},
			nil, outcome{}, true, false},
		{"resuming, the resume finished", store.Sandbox{State: store.StateResuming, Runtime: "container"},
			&runtime.Handle{Addr: addr}, outcome{store.StateRunning, true, addr.String()}, true, false},
		{"resuming, still paused", store.Sandbox{State: store.StateResuming, Runtime: "container"},
			&runtime.Handle{Paused: true}, outcome{store.StatePaused, true, ""}, true, false},
		{"unknown state", store.Sandbox{State: "creating", Runtime: "container"},
			&runtime.Handle{Addr: addr}, outcome{}, false, false},
		{"another server's runtime", store.Sandbox{State: store.StateRunning, Runtime: "vm", Addr: "10.0.0.2"},
			&runtime.Handle{Addr: addr}, outcome{store.StateRunning, false, "10.0.0.2"}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := tc.row
			row.ID = "sb1"
			db := &memStore{rows: map[string]store.Sandbox{row.ID: row}}
			rt := &fakeRuntime{live: map[string]*runtime.Handle{}}
			if tc.handle != nil {
				h := *tc.handle
				h.ID = row.ID
				rt.live[row.ID] = &h
			}
			var adopted []store.Sandbox
			var foreign map[string]store.Sandbox
			err := Run(context.Background(), Deps{Store: db, Runtime: rt, Log: slog.New(slog.DiscardHandler),
				Runs:    func(name string) bool { return name == "" || name == "container" },
				Foreign: func(m map[string]store.Sandbox) { foreign = m },
				Adopt: func(ctx context.Context, sb store.Sandbox, a netip.Addr) {
					if a != rt.live[sb.ID].Addr {
						t.Errorf("adopted at %v, runtime says %v", a, rt.live[sb.ID].Addr)
					}
					adopted = append(adopted, sb)
				}})
			if err != nil {
				t.Fatal(err)
			}
			got := outcome{adopted: len(adopted) == 1}
			if sb, ok := db.rows[row.ID]; ok {
				got.state, got.addr = sb.State, sb.Addr
			}
			if got != tc.want {
				t.Fatalf("outcome %+v, want %+v", got, tc.want)
			}
			if got.adopted && !reflect.DeepEqual(adopted[0], db.rows[row.ID]) {
				t.Fatalf("adopted %+v, stored %+v", adopted[0], db.rows[row.ID])
			}
			if asked := slices.Contains(rt.asked, row.ID); asked != tc.toAsk {
				t.Fatalf("runtime asked about %v, want asked %v", rt.asked, tc.toAsk)
			}
			if _, ok := foreign[row.ID]; ok != tc.foreign {
				t.Fatalf("foreign %v, want foreign %v", foreign, tc.foreign)
			}
		})
	}
}

func TestRunRuntimeAndStoreErrors(t *testing.T) {
	listFailed := errors.New("cannot list")
	for _, tc := range []struct {
		name      string
		rows      []store.Sandbox
		live      []string
		rtErr     error
		updateErr error
		wantErr   error // nil: Run succeeds
		wantRows  []string
	}{
		{"runtime lists nothing: abort, keep every row", []store.Sandbox{
			{ID: "a", State: store.StateRunning}, {ID: "b", State: store.StatePaused}},
			nil, listFailed, nil, listFailed, []string{"a", "b"}},
		{"partial failure: adopt what came back", []store.Sandbox{
			{ID: "a", State: store.StateRunning}, {ID: "b", State: store.StateRunning}},
			[]string{"a"}, listFailed, nil, nil, []string{"a"}},
		{"failure with only foreign rows goes on", []store.Sandbox{
			{ID: "a", State: store.StateRunning, Runtime: "vm"}},
			nil, listFailed, nil, nil, []string{"a"}},
		{"a failed update aborts", []store.Sandbox{{ID: "a", State: store.StateRunning}},
			[]string{"a"}, nil, listFailed, listFailed, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := &memStore{rows: map[string]store.Sandbox{}, updateErr: tc.updateErr}
			for _, sb := range tc.rows {
				db.rows[sb.ID] = sb
			}
			rt := &fakeRuntime{live: map[string]*runtime.Handle{}, err: tc.rtErr}
			for _, id := range tc.live {
				rt.live[id] = &runtime.Handle{ID: id, Addr: addr}
			}
			err := Run(context.Background(), Deps{Store: db, Runtime: rt, Log: slog.New(slog.DiscardHandler),
				Runs:    func(name string) bool { return name != "vm" },
				Foreign: func(map[string]store.Sandbox) {},
				Adopt:   func(context.Context, store.Sandbox, netip.Addr) {}})
			if (tc.wantErr == nil) != (err == nil) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if rows := slices.Sorted(maps.Keys(db.rows)); !slices.Equal(rows, tc.wantRows) {
				t.Fatalf("rows left %v, want %v", rows, tc.wantRows)
			}
		})
	}
}

// TestRunOnlyThisNode: rows of another node are neither deleted nor
// adopted (foreign, and the runtime is told of them, so it removes
// nothing of theirs); rows without a node are claimed when adopted; this
// node's own rows are reconciled as always.
func TestRunOnlyThisNode(t *testing.T) {
	running := func(id, node string) store.Sandbox {
		return store.Sandbox{ID: id, State: store.StateRunning, Runtime: "container", NodeID: node}
	}
	db := &memStore{rows: map[string]store.Sandbox{
		"other": running("other", "node-b"), "legacy": running("legacy", ""),
		"mine": running("mine", "node-a"), "gone": running("gone", "node-a"),
	}}
	rt := &fakeRuntime{live: map[string]*runtime.Handle{
		"legacy": {ID: "legacy", Addr: addr}, "mine": {ID: "mine", Addr: addr}, "other": {ID: "other", Addr: addr},
	}}
	var adopted []string
	var foreign map[string]store.Sandbox
	err := Run(context.Background(), Deps{Store: db, Runtime: rt, Log: slog.New(slog.DiscardHandler), Node: "node-a",
		Runs: func(string) bool { return true }, Foreign: func(m map[string]store.Sandbox) { foreign = m },
		Adopt: func(_ context.Context, sb store.Sandbox, _ netip.Addr) { adopted = append(adopted, sb.ID) }})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rt.asked, "other") {
		t.Errorf("the runtime was not told of another node's sandbox (it would remove it as an orphan): %v", rt.asked)
	}
	if _, ok := foreign["other"]; !ok {
		t.Errorf("another node's sandbox is not handed over as foreign: %v", foreign)
	}
	if got := db.rows["other"]; !reflect.DeepEqual(got, running("other", "node-b")) {
		t.Errorf("another node's row changed: %+v", got)
	}
	slices.Sort(adopted)
	if !slices.Equal(adopted, []string{"legacy", "mine"}) {
		t.Errorf("adopted %v, want legacy and mine", adopted)
	}
	if db.rows["legacy"].NodeID != "node-a" {
		t.Errorf("a row without a node was not claimed: %+v", db.rows["legacy"])
	}
	if _, ok := db.rows["gone"]; ok {
		t.Error("this node's row of a sandbox the runtime lost was kept")
	}
}
