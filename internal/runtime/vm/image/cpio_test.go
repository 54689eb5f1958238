package image

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/testkit"
)

func TestCpioWriter(t *testing.T) {
	var buf bytes.Buffer
	c := &cpioWriter{w: &buf}
	c.Dir("dev", 0o755)
	c.CharDev("dev/console", 0o600, 5, 1)
	c.File("init", 0o755, []byte("hello"))
	c.File("empty", 0o644, nil)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 || !strings.HasPrefix(buf.String(), "070701") {
		t.Fatalf("bad archive: len %d", buf.Len())
	}
	if !strings.Contains(buf.String(), "TRAILER!!!") {
		t.Fatal("no trailer")
	}
	// Cross-check with busybox cpio when it is installed.
	bb := testkit.RequireTool(t, "busybox")
	dir := t.TempDir()
	cmd := exec.Command(bb, "cpio", "-t")
	cmd.Stdin = bytes.NewReader(buf.Bytes())
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("busybox cpio -t: %v: %s", err, out)
	}
	for _, want := range []string{"dev", "dev/console", "init", "empty"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("listing %q lacks %s", out, want)
		}
	}
}
