package runtime

import (
	"testing"
)

func TestBoxes(t *testing.T) {
	type box struct{ n int }
	var b Boxes[box]
	if _, ok := b.Lookup("a"); ok {
		t.Fatal("Lookup on empty Boxes found an entry")
	}
	a := b.Get("a")
	a.n = 1
	if got := b.Get("a"); got != a {
		t.Fatal("second Get returned a different entry")
	}
	if got, ok := b.Lookup("a"); !ok || got != a {
		t.Fatalf("Lookup = %v, %v; want the entry", got, ok)
	}
	b.Forget("a", &box{}) // not the current entry: kept
	if _, ok := b.Lookup("a"); !ok {
		t.Fatal("Forget of a stale entry removed the current one")
	}
	b.Forget("a", a)
	if _, ok := b.Lookup("a"); ok {
		t.Fatal("Forget did not remove the entry")
	}
	if got := b.Get("a"); got == a {
		t.Fatal("Get after Forget returned the forgotten entry")
	}
}

func TestHostScope(t *testing.T) {
	for _, tc := range []struct {
		scope         int
		cgroup, state string
		firstSlot     uint32
	}{
		{0, "/moat", "/run/moat", 0},
		{1, "/moat-s1", "/run/moat/s1", 4096},
		{9, "/moat-s9", "/run/moat/s9", 9 * 4096},
	} {
		b := Host{Scope: tc.scope}
		if b.ScopeCgroup() != tc.cgroup || b.ScopeStateDir() != tc.state || b.ScopeFirstSlot() != tc.firstSlot {
			t.Errorf("scope %d: %s %s %d, want %s %s %d", tc.scope, b.ScopeCgroup(), b.ScopeStateDir(), b.ScopeFirstSlot(),
				tc.cgroup, tc.state, tc.firstSlot)
		}
	}
}
