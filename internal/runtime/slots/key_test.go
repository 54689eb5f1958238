package slots

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/moatsh/moat/internal/runtime"
)

func TestKey(t *testing.T) {
	base := runtime.Spec{TemplateID: "base", RootfsDir: "/nonexistent/rootfs", VCPUs: 2, MemoryMiB: 512, DiskMiB: 2048, Pids: 1024}
	k := SpecKey(base)
	for name, f := range map[string]func(*runtime.Spec){
		"template": func(s *runtime.Spec) { s.TemplateID = "other" },
		"vcpus":    func(s *runtime.Spec) { s.VCPUs = 1 },
		"memory":   func(s *runtime.Spec) { s.MemoryMiB = 1024 },
		"disk":     func(s *runtime.Spec) { s.DiskMiB = 1 },
		"pids":     func(s *runtime.Spec) { s.Pids = 1 },
	} {
		s := base
		f(&s)
		if SpecKey(s) == k {
			t.Errorf("another %s, same key %q", name, k)
		}
	}
	same := base
	same.ID, same.AllowInternet, same.Hostname = "x", true, "h"
	if SpecKey(same) != k {
		t.Error("values a slot does not depend on changed the key")
	}
}

func TestDropStale(t *testing.T) {
	root := filepath.Join(t.TempDir(), "tpl", "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := runtime.Spec{TemplateID: "tpl", RootfsDir: root}
	s, f := newSet(1, 4)
	mk := func(key string) { s.Refill(key, f.make); s.Wait() }
	mk(SpecKey(spec))
	mk(SpecKey(runtime.Spec{TemplateID: "gone", RootfsDir: root}))
	if err := s.DropStale(context.Background(), []runtime.Spec{spec}); err != nil {
		t.Fatal(err)
	}
	if got := f.kills(); !slices.Equal(got, []string{"s2"}) || s.Count(SpecKey(spec)) != 1 {
		t.Fatalf("killed %v, idle %v", got, s.Idle())
	}
	// A rebuild (new stamp.json) makes the old build's slot stale.
	if err := os.WriteFile(filepath.Join(filepath.Dir(root), "stamp.json"), []byte(`{"build":"2"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.DropStale(context.Background(), []runtime.Spec{spec}); err != nil {
		t.Fatal(err)
	}
	if got := f.kills(); !slices.Equal(got, []string{"s1", "s2"}) {
		t.Fatalf("after the rebuild: killed %v", got)
	}
}
