package sparse

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSparseCopy(t *testing.T) {
	const mib = 1 << 20
	type chunk struct{ off, n int64 }
	for _, tc := range []struct {
		name   string
		size   int64
		chunks []chunk
	}{
		{name: "empty", size: 0},
		{name: "all hole", size: 16 * mib},
		{name: "data in holes", size: 16 * mib, chunks: []chunk{{0, 4096}, {mib, 3 * 4096}, {5*mib + 4096, mib}}},
		{name: "ends in data", size: 8*mib + 100, chunks: []chunk{{2 * mib, 4096}, {8 * mib, 100}}},
		{name: "dense", size: 3 * mib, chunks: []chunk{{0, 3 * mib}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
			f, err := os.Create(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(tc.size); err != nil {
				t.Fatal(err)
			}
			var want int64
			for _, c := range tc.chunks {
				b := make([]byte, c.n)
				_, _ = rand.Read(b)
				if _, err := f.WriteAt(b, c.off); err != nil {
					t.Fatal(err)
				}
				want += c.n
			}
			f.Close() // not synced: ranges that are only delayed allocations must count as data
			n, err := Copy(src, dst)
			if err != nil {
				t.Fatal(err)
			}
			// Data ranges are whole filesystem blocks, so a copy may cover a little more.
			if n < want || n > want+int64(len(tc.chunks))*2*65536 {
				t.Errorf("copied %d bytes, want about %d", n, want)
			}
			a, _ := os.ReadFile(src)
			b, _ := os.ReadFile(dst)
			if !bytes.Equal(a, b) {
				t.Fatal("copy differs from the source")
			}
			if got, want := dataMap(t, dst), dataMap(t, src); !equalMaps(got, want) {
				t.Errorf("data ranges of the copy %v, of the source %v", got, want)
			}
			if sb, db := blocks(t, src), blocks(t, dst); db > sb+128 {
				t.Errorf("copy allocates %d blocks, source %d", db, sb)
			}
			if _, err := Copy(src, dst); !errors.Is(err, os.ErrExist) {
				t.Errorf("copy onto an existing file: %v", err)
			}
		})
	}
}

// dataMap lists path's data ranges as SEEK_DATA/SEEK_HOLE report them.
func dataMap(t *testing.T, path string) [][2]int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	var out [][2]int64
	for off := int64(0); off < fi.Size(); {
		d, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		h, err := unix.Seek(int(f.Fd()), d, unix.SEEK_HOLE)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, [2]int64{d, h})
		off = h
	}
	return out
}

func equalMaps(a, b [][2]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func blocks(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks
}
