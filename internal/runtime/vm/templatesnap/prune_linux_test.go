package templatesnap

import (
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/image"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
)

// writeQcow2 writes a file with just the qcow2 header fields
// image.Qcow2Backing reads: the magic and the backing file name.
func writeQcow2(t *testing.T, path, backing string) {
	t.Helper()
	h := make([]byte, 64+len(backing))
	copy(h, "QFI\xfb")
	binary.BigEndian.PutUint32(h[4:], 3)
	if backing != "" {
		binary.BigEndian.PutUint64(h[8:], 64)
		binary.BigEndian.PutUint32(h[16:], uint32(len(backing)))
		copy(h[64:], backing)
	}
	mustWrite(t, path, string(h))
}

func mustWrite(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// templateDir makes templates/<key> with an image and the given
// snapshots (name → meta boot line; ready).
func templateDir(t *testing.T, vmDir, key string, snaps map[string]string) string {
	t.Helper()
	dir := filepath.Join(vmDir, "templates", key)
	mustWrite(t, filepath.Join(dir, image.ImageName), "ext4")
	for name, boot := range snaps {
		s := filepath.Join(dir, name)
		mustWrite(t, filepath.Join(s, "meta"), "memory 512 MiB\n"+boot+"\nimage "+image.ImageName+"\n"+warmMetaLine+"\n")
		mustWrite(t, filepath.Join(s, snapshot.ReadyFile), "now")
		writeQcow2(t, filepath.Join(s, "disk.qcow2"), filepath.Join(dir, image.ImageName))
	}
	return dir
}

func TestPruneTemplates(t *testing.T) {
	root := t.TempDir()
	vmDir := filepath.Join(root, "vm")
	const boot = "boot 6.1 k1"
	set := New(Config{Dir: vmDir, Log: slog.New(slog.DiscardHandler)})
	set.boot = &image.BootFiles{Version: "6.1", Key: "k1"}

	// The live template "base" and its current key (from its stamp).
	rootfs := filepath.Join(root, "templates", "base", "rootfs")
	mustWrite(t, filepath.Join(root, "templates", "base", "stamp.json"), `{"cacheKey":"x"}`)
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	live := runtime.Spec{TemplateID: "base", RootfsDir: rootfs}
	cur := templateDir(t, vmDir, runtime.TemplateKey(live), map[string]string{
		"snap-new": boot, "snap-oldboot": "boot 6.1 k0", "snap-oldused": "boot 6.0 k0"})
	mustWrite(t, filepath.Join(cur, "rootfs.ext4"), "older layout")

	stale := templateDir(t, vmDir, "base-000000000001", map[string]string{"snap-a": boot})
	staleUsed := templateDir(t, vmDir, "base-000000000002", map[string]string{"snap-a": boot})
	deletedUsed := templateDir(t, vmDir, "abc123-000000000003", map[string]string{"snap-a": boot})
	booting := templateDir(t, vmDir, "def456-000000000004", map[string]string{"snap-a": boot})
	if err := os.Remove(filepath.Join(booting, "snap-a", snapshot.ReadyFile)); err != nil {
		t.Fatal(err)
	}
	busy := templateDir(t, vmDir, "creating1-000000000005", map[string]string{"snap-a": boot})
	noSnap := templateDir(t, vmDir, "gone-000000000006", nil)

	// A paused sandbox over staleUsed, a running one over the current
	// template's old-boot snapshot, a snapshot (fork) over deletedUsed.
	writeQcow2(t, filepath.Join(vmDir, "sandboxes", "sb1", "disk.qcow2"), filepath.Join(staleUsed, "snap-a", "disk.qcow2"))
	writeQcow2(t, filepath.Join(vmDir, "sandboxes", "sb2", "disk.qcow2"), "../../templates/"+filepath.Base(cur)+"/snap-oldused/disk.qcow2")
	writeQcow2(t, filepath.Join(vmDir, "snapshots", "sn1", "disk.qcow2"), filepath.Join(deletedUsed, "snap-a", "disk.qcow2"))

	old := time.Now().Add(-2 * time.Hour)
	_ = filepath.Walk(vmDir, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, old, old) })
	young := templateDir(t, vmDir, "new1-000000000007", map[string]string{"snap-a": boot})

	st, err := set.Prune(context.Background(), []runtime.Spec{live}, []string{"creating1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	gone := []string{stale, noSnap, filepath.Join(cur, "snap-oldboot"), filepath.Join(cur, "rootfs.ext4")}
	kept := []string{filepath.Join(cur, "snap-new"), filepath.Join(cur, image.ImageName), filepath.Join(cur, "snap-oldused"),
		staleUsed, deletedUsed, booting, busy, young}
	for _, p := range gone {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s kept, want it removed", p)
		}
	}
	for _, p := range kept {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed, want it kept: %v", p, err)
		}
	}
	if st.Dirs != 2 || st.Snapshots != 2 || st.Bytes <= 0 {
		t.Errorf("stats %+v", st)
	}

	// Once the sandboxes and the snapshot are gone, so are their images.
	for _, p := range []string{"sandboxes/sb1", "sandboxes/sb2", "snapshots/sn1"} {
		if err := os.RemoveAll(filepath.Join(vmDir, p)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := set.Prune(context.Background(), []runtime.Spec{live}, nil, 0); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{staleUsed, deletedUsed, busy, young, filepath.Join(cur, "snap-oldused")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s kept after its users went, want it removed", p)
		}
	}
	if _, err := os.Stat(filepath.Join(cur, "snap-new")); err != nil {
		t.Errorf("current snapshot removed: %v", err)
	}
}

func TestPruneTemplatesStopsOnUnreadableChain(t *testing.T) {
	vmDir := filepath.Join(t.TempDir(), "vm")
	set := New(Config{Dir: vmDir, Log: slog.New(slog.DiscardHandler)})
	set.boot = &image.BootFiles{Version: "6.1", Key: "k1"}
	stale := templateDir(t, vmDir, "x-000000000001", nil)
	// A disk whose header names a backing file too long to be real.
	bad := make([]byte, 64)
	copy(bad, "QFI\xfb")
	binary.BigEndian.PutUint64(bad[8:], 64)
	binary.BigEndian.PutUint32(bad[16:], 4000)
	mustWrite(t, filepath.Join(vmDir, "sandboxes", "sb", "disk.qcow2"), string(bad))
	if _, err := set.Prune(context.Background(), nil, nil, 0); err == nil {
		t.Fatal("no error for an unreadable backing chain")
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("removed %s although the users could not be read", stale)
	}
}
