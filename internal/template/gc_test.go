package template

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestRemoveOrphans(t *testing.T) {
	data := t.TempDir()
	lay := Layout{DataDir: data}
	mk := func(name string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(lay.RootfsDir(name), "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(lay.RootfsDir(name), "etc", "f"), make([]byte, 8192), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(lay.StampPath(name), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"live", "gone", "building", "fresh"} {
		mk(n)
	}
	old := time.Now().Add(-2 * time.Hour)
	_ = filepath.Walk(filepath.Join(data, "templates"), func(p string, _ os.FileInfo, _ error) error {
		return os.Chtimes(p, old, old)
	})
	mk("fresh") // just installed, not registered yet
	unlock, ok, err := tryLockFile(lay.LockPath("building"))
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	_ = os.Chtimes(lay.LockPath("building"), old, old)
	defer unlock()

	removed, freed, err := RemoveOrphans(data, map[string]bool{"live": true}, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != "gone" || freed < 8192 {
		t.Fatalf("removed %v, freed %d; want [gone] and at least 8 KiB", removed, freed)
	}
	for _, n := range []string{"live", "building", "fresh"} {
		if _, err := os.Stat(lay.RootfsDir(n)); err != nil {
			t.Errorf("%s removed: %v", n, err)
		}
	}
	if err := RemoveTemplateFiles(data, "building"); err == nil {
		t.Error("RemoveTemplateFiles removed a template whose build holds the lock")
	}
	unlock()
	if err := RemoveTemplateFiles(data, "building"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lay.TemplateDir("building")); !os.IsNotExist(err) {
		t.Errorf("template dir still there: %v", err)
	}
}
