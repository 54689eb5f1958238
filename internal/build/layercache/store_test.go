package layercache

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestKeyChain: every input of a step changes its key and every later
// key; what is not an input (map order) does not.
func TestKeyChain(t *testing.T) {
	k0 := BaseImageKey("team", "img", "envd")
	run := StepInput{Type: "RUN", Args: []string{"make"}, User: "user", Workdir: "/src", Env: map[string]string{"A": "1", "B": "2"}}
	cp := StepInput{Type: "COPY", Args: []string{"app", "/app", "0000"}, User: "user", Workdir: "/", FilesSum: "f1"}
	chain := func(k0 string, steps ...StepInput) []string {
		keys := []string{k0}
		for _, s := range steps {
			keys = append(keys, StepKey(keys[len(keys)-1], s))
		}
		return keys
	}
	ref := chain(k0, run, cp)
	mod := func(f func(*StepInput)) StepInput {
		s := run
		s.Env = map[string]string{"A": "1", "B": "2"}
		f(&s)
		return s
	}
	cases := []struct {
		name  string
		keys  []string
		first int // the first key that must differ from ref's (-1: none may)
	}{
		{"same inputs", chain(k0, run, cp), -1},
		{"env in another order", chain(k0, StepInput{Type: "RUN", Args: []string{"make"}, User: "user", Workdir: "/src",
			Env: map[string]string{"B": "2", "A": "1"}}, cp), -1},
		{"other team", chain(BaseImageKey("other", "img", "envd"), run, cp), 0},
		{"other image", chain(BaseImageKey("team", "img2", "envd"), run, cp), 0},
		{"other envd", chain(BaseImageKey("team", "img", "envd2"), run, cp), 0},
		{"template base", chain(BaseTemplateKey("team", TemplateIdentity{ID: "img"}, "envd"), run, cp), 0},
		{"command", chain(k0, mod(func(s *StepInput) { s.Args = []string{"make all"} }), cp), 1},
		{"user", chain(k0, mod(func(s *StepInput) { s.User = "root" }), cp), 1},
		{"workdir", chain(k0, mod(func(s *StepInput) { s.Workdir = "/" }), cp), 1},
		{"env value", chain(k0, mod(func(s *StepInput) { s.Env["A"] = "2" }), cp), 1},
		{"env added", chain(k0, mod(func(s *StepInput) { s.Env["C"] = "" }), cp), 1},
		{"copy contents", chain(k0, run, StepInput{Type: "COPY", Args: cp.Args, User: "user", Workdir: "/", FilesSum: "f2"}), 2},
		{"copy mode", chain(k0, run, StepInput{Type: "COPY", Args: []string{"app", "/app", "0755"}, User: "user", Workdir: "/", FilesSum: "f1"}), 2},
		{"a step before", chain(k0, StepInput{Type: "ENV", Args: []string{"X", "1"}}, run, cp)[1:], 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.keys) != len(ref) {
				t.Fatalf("%d keys", len(c.keys))
			}
			for i := range ref {
				if !keyRE.MatchString(c.keys[i]) {
					t.Fatalf("key %d = %q", i, c.keys[i])
				}
				differs := c.keys[i] != ref[i]
				if want := c.first >= 0 && i >= c.first; differs != want {
					t.Errorf("key %d differs = %v, want %v", i, differs, want)
				}
			}
		})
	}
	// Parts are length-prefixed: moving a boundary changes the key.
	if keyOf("ab", "c") == keyOf("a", "bc") {
		t.Fatal("keyOf parts collide")
	}
}

// TestLayerStoreGC: referenced layers stay, unreferenced ones go after
// their age or beyond the cap (oldest first), replaced generations and
// work dirs always go; GC does not run while a build holds the store.
func TestLayerStoreGC(t *testing.T) {
	s := Store{dir: filepath.Join(t.TempDir(), "layers")}
	unlock, _, err := s.Lock(false, true)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	key := func(i int) string { return keyOf("k", string(rune('a'+i))) }
	add := func(i int, age time.Duration) string {
		t.Helper()
		w, err := s.WorkDir()
		if err != nil {
			t.Fatal(err)
		}
		tree := filepath.Join(w, "t")
		if err := os.MkdirAll(filepath.Join(tree, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		dir, err := s.Commit(key(i), tree)
		if err != nil {
			t.Fatal(err)
		}
		ts := unix.NsecToTimespec(now.Add(-age).UnixNano())
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(s.dir, key(i)), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	old := add(0, 10*24*time.Hour)    // unreferenced, too old: goes
	oldRef := add(1, 30*24*time.Hour) // referenced: stays
	replaced := add(2, time.Hour)
	cur := add(2, time.Hour) // a second commit of key 2 replaces the first
	a := add(3, 3*time.Hour) // the cap of 2 unreferenced: the oldest goes
	b := add(4, 2*time.Hour)
	if dir, ok := s.Lookup(key(2)); !ok || dir != cur {
		t.Fatalf("lookup = %s %v, want %s", dir, ok, cur)
	}
	// A build holds the store: no GC.
	if _, ok, err := s.Lock(true, false); ok || err != nil {
		t.Fatalf("exclusive lock while shared: ok=%v err=%v", ok, err)
	}
	unlock()
	ex, ok, err := s.Lock(true, false)
	if !ok || err != nil {
		t.Fatalf("exclusive lock: ok=%v err=%v", ok, err)
	}
	defer ex()
	st, err := s.GC(map[string]bool{key(1): true}, Policy{Now: now, MaxAge: 7 * 24 * time.Hour, MaxLayers: 2,
		MinFree: 0.1, Free: func() (float64, error) { return 0.5, nil }})
	if err != nil {
		t.Fatal(err)
	}
	want := GCStats{Layers: 2, Replaced: 1, WorkDirs: 6, Kept: 3}
	if st != want {
		t.Errorf("stats = %+v, want %+v", st, want)
	}
	for dir, kept := range map[string]bool{old: false, oldRef: true, replaced: false, cur: true, a: false, b: true} {
		if _, err := os.Stat(dir); (err == nil) != kept {
			t.Errorf("%s: kept=%v, want %v", filepath.Base(dir), err == nil, kept)
		}
	}
	for i, found := range map[int]bool{0: false, 1: true, 2: true, 3: false, 4: true} {
		if _, ok := s.Lookup(key(i)); ok != found {
			t.Errorf("lookup(key %d) = %v, want %v", i, ok, found)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(s.dir, ".work")); len(ents) != 0 {
		t.Errorf("work dirs left: %v", ents)
	}
}

// TestLayerStoreGCDiskPressure: while the filesystem is short of space the
// least recently used unreferenced layers go, however young; referenced
// ones stay.
func TestLayerStoreGCDiskPressure(t *testing.T) {
	s := Store{dir: filepath.Join(t.TempDir(), "layers")}
	unlock, _, err := s.Lock(true, true)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	var keys []string
	for i := range 4 {
		w, err := s.WorkDir()
		if err != nil {
			t.Fatal(err)
		}
		k := keyOf("p", string(rune('a'+i)))
		if _, err := s.Commit(k, w); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
		time.Sleep(10 * time.Millisecond) // distinct last-use times
	}
	calls := 0
	free := func() (float64, error) { // 5 % free, then 15 % after one removal
		calls++
		return 0.05 + 0.1*float64(calls-1), nil
	}
	st, err := s.GC(map[string]bool{keys[0]: true}, Policy{Now: time.Now(), MaxAge: time.Hour, MaxLayers: 100,
		MinFree: 0.1, Free: free})
	if err != nil {
		t.Fatal(err)
	}
	// The first check finds 5 % free: the oldest unreferenced (keys[1])
	// goes; the second finds 15 %: the rest stay.
	if st.Layers != 1 || st.Kept != 3 {
		t.Fatalf("stats = %+v", st)
	}
	for i, want := range []bool{true, false, true, true} {
		if _, ok := s.Lookup(keys[i]); ok != want {
			t.Errorf("layer %d kept = %v, want %v", i, ok, want)
		}
	}
}
