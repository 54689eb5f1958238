package envd_test

import (
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/envd/envdtest"
	"github.com/moatsh/moat/internal/testkit"
)

// randReader returns n deterministic pseudo-random bytes without holding
// them in memory.
func randReader(n int64, seed byte) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{seed}), n)
}

// uploadStream posts n bytes to path (multipart or octet-stream) through a
// pipe and returns their sha256.
func uploadStream(t testing.TB, url, path string, n int64, useMultipart bool) [32]byte {
	t.Helper()
	h := sha256.New()
	src := io.TeeReader(randReader(n, 7), h)
	pr, pw := io.Pipe()
	ctype := "application/octet-stream"
	if useMultipart {
		mw := multipart.NewWriter(pw)
		ctype = mw.FormDataContentType()
		go func() {
			w, err := mw.CreateFormFile("file", path)
			if err == nil {
				_, err = io.Copy(w, src)
			}
			if err == nil {
				err = mw.Close()
			}
			pw.CloseWithError(err)
		}()
	} else {
		go func() { _, err := io.Copy(pw, src); pw.CloseWithError(err) }()
	}
	r := do(t, "POST", url+"/files?path="+path, map[string]string{"Content-Type": ctype}, pr)
	if r.Status != 200 {
		t.Fatalf("upload %s: %d %s", path, r.Status, r.Body)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// downloadHash streams path and returns its sha256 and size.
func downloadHash(t testing.TB, url, path string) ([32]byte, int64) {
	t.Helper()
	resp, err := client.Get(url + "/files?path=" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("download %s: %s", path, resp.Status)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, n
}

// peakRSS returns the high-water resident set of pid in bytes.
func peakRSS(t testing.TB, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		testkit.Missing(t, "no /proc/%d/status to read envd's peak RSS from: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func Test100MiBRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("by design: -short leaves out the 100 MiB transfers")
	}
	const size = 100 << 20
	e := envdtest.Start(t)
	for _, mp := range []bool{false, true} {
		name := "big-octet.bin"
		if mp {
			name = "big-multipart.bin"
		}
		up := uploadStream(t, e.URL, name, size, mp)
		down, n := downloadHash(t, e.URL, name)
		if n != size || up != down {
			t.Fatalf("%s: round trip mismatch: %d bytes, sha %x vs %x", name, n, down, up)
		}
	}
	// Streaming, not buffering: envd never holds a whole file.
	if rss := peakRSS(t, e.Cmd.Process.Pid); rss > 80<<20 {
		t.Fatalf("envd peak RSS %d MiB after 100 MiB transfers; it buffers", rss>>20)
	}
}

const benchSize = 32 << 20

func BenchmarkUpload(b *testing.B) {
	e := envdtest.Start(b)
	b.SetBytes(benchSize)
	b.ResetTimer()
	for range b.N {
		uploadStream(b, e.URL, "bench.bin", benchSize, false)
	}
}

func BenchmarkDownload(b *testing.B) {
	e := envdtest.Start(b)
	uploadStream(b, e.URL, "bench.bin", benchSize, false)
	b.SetBytes(benchSize)
	b.ResetTimer()
	for range b.N {
		if _, n := downloadHash(b, e.URL, "bench.bin"); n != benchSize {
			b.Fatalf("short download %d", n)
		}
	}
}
