package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTemplateKey(t *testing.T) {
	root := filepath.Join(t.TempDir(), "base", "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	k1 := TemplateKey(Spec{TemplateID: "Base/1", RootfsDir: root})
	if !strings.HasPrefix(k1, "base_1-") {
		t.Fatalf("key %q", k1)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(root), "stamp.json"), []byte(`{"build":"2"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if k2 := TemplateKey(Spec{TemplateID: "Base/1", RootfsDir: root}); k2 == k1 {
		t.Fatal("a new stamp.json did not change the key")
	}
}

func TestCount(t *testing.T) {
	for _, c := range []struct{ n, def, want int }{{0, 4, 4}, {2, 4, 2}, {-1, 4, 0}, {0, 0, 0}} {
		if got := Count(c.n, c.def); got != c.want {
			t.Errorf("Count(%d, %d) = %d, want %d", c.n, c.def, got, c.want)
		}
	}
}
