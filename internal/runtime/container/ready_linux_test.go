package container

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWriteWatch checks the wait envd's readiness is built on: a write
// since the last wait ends it at once, none lets it run to its bound, and
// a context that ends first ends it with the context's error.
func TestWriteWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "envd.log")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := watchWrites(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()

	if _, err := f.WriteString("envd listening on [::]:49983\n"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := w.wait(ctx, time.Minute); err != nil {
		t.Fatalf("wait after a write: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("a queued write did not end the wait (took %v)", took)
	}

	start = time.Now()
	if err := w.wait(ctx, 20*time.Millisecond); err != nil {
		t.Fatalf("wait without a write: %v", err)
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Fatalf("the wait ended after %v without a write, before its bound", took)
	}

	go func() {
		time.Sleep(10 * time.Millisecond)
		_, _ = f.WriteString("more\n")
	}()
	if err := w.wait(ctx, time.Minute); err != nil {
		t.Fatalf("wait for a later write: %v", err)
	}

	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := w.wait(cctx, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past its context's deadline = %v, want %v", err, context.DeadlineExceeded)
	}
}

func TestWatchWritesMissing(t *testing.T) {
	if _, err := watchWrites(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("watching a missing file: no error")
	}
}

// TestLogSaysListening: the readiness read of envd's log finds envd's
// line only from the offset given (a resumed sandbox's log holds its
// earlier runs' lines), and nothing in a missing or empty log.
func TestLogSaysListening(t *testing.T) {
	dir := t.TempDir()
	earlier := "crun: started\nenvd listening on [::]:49983\n"
	for _, tc := range []struct {
		name, log string
		from      int64
		want      bool
	}{
		{"empty", "", 0, false},
		{"other lines", "crun: started\ncode interpreter listening on [::]:49999\n", 0, false},
		{"listening", "code interpreter listening on [::]:49999\nenvd listening on [::]:49983\n", 0, true},
		{"an earlier run's line", earlier, int64(len(earlier)), false},
		{"after an earlier run", earlier + "envd listening on [::]:49983\n", int64(len(earlier)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(p, []byte(tc.log), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := logSaysListening(p, tc.from); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if logSaysListening(filepath.Join(dir, "missing"), 0) {
		t.Fatal("a missing log says listening")
	}
}
