package benchcmd

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/app"
	"github.com/moatsh/moat/internal/bench"
	moat "github.com/moatsh/moat/sdk/go"
)

// moat bench --files: envd's file API (/files, as the SDKs call it: a
// small write as multipart, a large one as octet-stream) against the
// floor, a bare net/http file server (package envd/floor, `envd --floor`)
// in the same sandbox behind the same proxy, in a server this process
// runs. Requests alternate between the two, over one keep-alive client.
// It prints medians and ratios; the targets (the bursts issue) are
// printed beside them, nothing asserts them.

const (
	floorPort  = 8080
	bigFileMiB = 100
	bigRounds  = 3
)

// fileTarget is one side of the comparison.
type fileTarget struct {
	hc    *http.Client
	base  string // the proxy (the API URL)
	sb    *moat.Sandbox
	floor bool
}

func (f fileTarget) do(ctx context.Context, method, path, ctype string, body []byte) (time.Duration, error) {
	u := f.base + "/files?" + url.Values{"path": {path}, "username": {"user"}}.Encode()
	if f.floor {
		u = f.base + path
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, err
	}
	port := moat.EnvdPort
	if f.floor {
		port = floorPort
	}
	req.Header.Set("E2b-Sandbox-Id", f.sb.ID)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(port))
	if !f.floor && f.sb.AccessToken != "" {
		req.Header.Set("X-Access-Token", f.sb.AccessToken)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	start := time.Now()
	resp, err := f.hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err == nil && resp.StatusCode/100 != 2 {
		err = fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return d, err
}

// write puts body at path as the SDKs do (envd: multipart for small
// bodies, octet-stream for large ones; floor: PUT).
func (f fileTarget) write(ctx context.Context, path string, body []byte) (time.Duration, error) {
	if f.floor {
		return f.do(ctx, http.MethodPut, path, "", body)
	}
	if len(body) > 1<<20 {
		return f.do(ctx, http.MethodPost, path, "application/octet-stream", body)
	}
	var mp bytes.Buffer
	w := multipart.NewWriter(&mp)
	part, err := w.CreateFormFile("file", path)
	if err == nil {
		_, err = part.Write(body)
	}
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		return 0, err
	}
	return f.do(ctx, http.MethodPost, path, w.FormDataContentType(), mp.Bytes())
}

func (f fileTarget) read(ctx context.Context, path string) (time.Duration, error) {
	return f.do(ctx, http.MethodGet, path, "", nil)
}

// fileSeries are the four measurements of one target.
type fileSeries struct{ w1k, r1k, wBig, rBig bench.Series }

// benchFiles runs the comparison with n rounds of the 1 KiB operations.
func benchFiles(cmd *cobra.Command, dataDir string, be app.Backends, tmpl string, n int) error {
	ctx := cmd.Context()
	return withServer(ctx, dataDir, be, func(c *moat.Client) error {
		sb, err := c.CreateSandbox(ctx, moat.CreateOptions{Template: tmpl, Timeout: 30 * time.Minute})
		if err != nil {
			return fmt.Errorf("bench files: %w", err)
		}
		defer sb.Kill(context.WithoutCancel(ctx))
		if code, err := sb.Run(ctx, fmt.Sprintf("setsid -f /usr/local/bin/envd --floor :%d >/dev/null 2>&1", floorPort),
			moat.RunOptions{User: "root"}); err != nil || code != 0 {
			return fmt.Errorf("bench files: start the floor: exit %d, %v", code, err)
		}
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		envd := fileTarget{hc: hc, base: c.APIURL, sb: sb}
		floor := envd
		floor.floor = true
		if err := waitFloor(ctx, floor); err != nil {
			return err
		}
		var me, fl fileSeries
		if err := measureFiles(ctx, envd, floor, n, &me, &fl); err != nil {
			return err
		}
		printFiles(cmd.OutOrStdout(), n, &me, &fl)
		return nil
	})
}

// waitFloor waits until the floor answers a write.
func waitFloor(ctx context.Context, floor fileTarget) error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err = floor.write(ctx, "/tmp/floor-ready", []byte("ok")); err == nil {
			return nil
		}
	}
	return fmt.Errorf("bench files: the floor does not answer: %w", err)
}

// measureFiles alternates the two targets: n rounds of a 1 KiB write and
// read, then bigRounds of a bigFileMiB upload and download.
func measureFiles(ctx context.Context, envd, floor fileTarget, n int, me, fl *fileSeries) error {
	small, big := make([]byte, 1024), make([]byte, bigFileMiB<<20)
	if _, err := rand.Read(big); err != nil {
		return err
	}
	copy(small, big)
	for i := -5; i < n; i++ { // 5 rounds of warm-up (connections, page cache)
		for _, t := range []struct {
			tg fileTarget
			s  *fileSeries
		}{{envd, me}, {floor, fl}} {
			w, err := t.tg.write(ctx, "/tmp/bench-1k", small)
			if err != nil {
				return fmt.Errorf("bench files: 1 KiB write: %w", err)
			}
			r, err := t.tg.read(ctx, "/tmp/bench-1k")
			if err != nil {
				return fmt.Errorf("bench files: 1 KiB read: %w", err)
			}
			if i >= 0 {
				t.s.w1k.Samples = append(t.s.w1k.Samples, w)
				t.s.r1k.Samples = append(t.s.r1k.Samples, r)
			}
		}
	}
	for range bigRounds {
		for _, t := range []struct {
			tg fileTarget
			s  *fileSeries
		}{{envd, me}, {floor, fl}} {
			w, err := t.tg.write(ctx, "/tmp/bench-big", big)
			if err != nil {
				return fmt.Errorf("bench files: %d MiB upload: %w", bigFileMiB, err)
			}
			r, err := t.tg.read(ctx, "/tmp/bench-big")
			if err != nil {
				return fmt.Errorf("bench files: %d MiB download: %w", bigFileMiB, err)
			}
			t.s.wBig.Samples = append(t.s.wBig.Samples, w)
			t.s.rBig.Samples = append(t.s.rBig.Samples, r)
		}
	}
	return nil
}

func printFiles(out io.Writer, n int, me, fl *fileSeries) {
	fmt.Fprintf(out, "files through the proxy: envd's /files vs a bare net/http file server in the same sandbox (the floor); medians of %d (1 KiB) and %d (%d MiB) rounds, alternating\n", n, bigRounds, bigFileMiB)
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "operation\tenvd\tfloor\tenvd/floor\ttarget")
	for _, r := range []struct {
		name   string
		m, f   bench.Series
		target string
	}{{"write 1 KiB", me.w1k, fl.w1k, "≤ 1.3"}, {"read 1 KiB", me.r1k, fl.r1k, "≤ 1.3"}} {
		fmt.Fprintf(tw, "%s\t%v\t%v\t%.2f\t%s\n", r.name, r.m.Median().Round(time.Microsecond), r.f.Median().Round(time.Microsecond),
			float64(r.m.Median())/float64(r.f.Median()), r.target)
	}
	mbps := func(d time.Duration) float64 { return float64(bigFileMiB) * 1.048576 / d.Seconds() }
	for _, r := range []struct {
		name string
		m, f bench.Series
	}{{fmt.Sprintf("upload %d MiB", bigFileMiB), me.wBig, fl.wBig}, {fmt.Sprintf("download %d MiB", bigFileMiB), me.rBig, fl.rBig}} {
		fmt.Fprintf(tw, "%s\t%.0f MB/s\t%.0f MB/s\t%.2f (throughput)\t≥ 0.8\n", r.name, mbps(r.m.Median()), mbps(r.f.Median()),
			mbps(r.m.Median())/mbps(r.f.Median()))
	}
	tw.Flush()
}
