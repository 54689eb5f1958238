package template

import (
	"bufio"
	"context"
	"fmt"
	"github.com/moatsh/moat/internal/template/catalog"
	"github.com/moatsh/moat/internal/template/progress"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// dpkgOptions stay in the rootfs (/etc/dpkg/dpkg.cfg.d/99mmdebstrap), as in
// Docker's Debian images: no fsync per file (a crashed build is rebuilt
// anyway; much faster on a busy disk). Path filters are not passed here:
// mmdebstrap would then pipe every essential .deb through mmtarfilter
// (python3), which is slow; slimStep applies them after the install.
var dpkgOptions = []string{"force-unsafe-io"}

// mmdebstrapArgs returns the command line that builds def into target.
// stepFiles are the scripts of def's steps (same order), aptCache the shared
// .deb directory ("" disables it).
func mmdebstrapArgs(def catalog.Definition, target string, stepFiles []string, aptCache string) []string {
	args := []string{
		"--mode=root",
		"--format=directory",
		"--verbose", // apt's lines feed the progress display and build.log
		"--variant=" + def.Variant,
	}
	for _, o := range dpkgOptions {
		args = append(args, "--dpkgopt="+o)
	}
	if len(def.Packages) > 0 {
		args = append(args, "--include="+strings.Join(def.Packages, ","))
	}
	if aptCache != "" {
		// Documented in mmdebstrap(1) "apt-cacher without a proxy": keep the
		// essential .debs, copy the cache in before download and out after
		// the last step.
		args = append(args,
			"--skip=essential/unlink",
			`--setup-hook=mkdir -p "$1"/var/cache/apt/archives/`,
			"--setup-hook=sync-in "+aptCache+" /var/cache/apt/archives/",
		)
	}
	for _, f := range stepFiles {
		args = append(args, `--customize-hook=chroot "$1" /bin/sh -e < `+shellQuote(f))
	}
	if aptCache != "" {
		args = append(args, "--customize-hook=sync-out /var/cache/apt/archives "+aptCache)
	}
	return append(args, def.Suite, target, def.Mirror)
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeSteps writes every step of def as a script in dir, announcing itself
// so the progress output shows which step runs.
func writeSteps(def catalog.Definition, dir string) ([]string, error) {
	var files []string
	for i, s := range def.AllSteps() {
		f := filepath.Join(dir, fmt.Sprintf("step-%02d-%s.sh", i, s.Name))
		body := fmt.Sprintf("echo '==> step %s'\n%s\n", s.Name, s.Script)
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			return nil, fmt.Errorf("write step %s: %w", s.Name, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// killGrace is how long a cancelled build may take to clean up.
const killGrace = time.Minute

// tailBuffer keeps the last n lines written, for error messages.
type tailBuffer struct {
	n     int
	lines []string
}

func (t *tailBuffer) add(s string) {
	t.lines = append(t.lines, s)
	if len(t.lines) > t.n {
		t.lines = t.lines[len(t.lines)-t.n:]
	}
}

// runLogged runs name args, feeding every output line (stdout and stderr
// merged) to prog and to logFile. On failure the error carries the last
// output lines. Cancelling ctx sends SIGTERM first so that mmdebstrap can
// unmount what it mounted inside the chroot.
func runLogged(ctx context.Context, prog *progress.Progress, logFile io.Writer, name string, args ...string) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("run %s: %w", name, err)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "DEBIAN_FRONTEND=noninteractive")
	// mmdebstrap runs in its own process group. On cancel the whole group
	// (apt, dpkg, hooks) gets SIGTERM, so mmdebstrap unmounts what it
	// mounted in the chroot and exits; if it has not after killGrace, the
	// group is killed and rootfs.RemoveTree detaches the leftover mounts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var killTimer atomic.Pointer[time.Timer]
	cmd.Cancel = func() error {
		pgid := cmd.Process.Pid
		killTimer.Store(time.AfterFunc(killGrace, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }))
		return syscall.Kill(-pgid, syscall.SIGTERM)
	}
	defer func() {
		if t := killTimer.Load(); t != nil {
			t.Stop()
		}
	}()
	fmt.Fprintf(logFile, "$ %s %s\n", name, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("run %s (is it installed? apt-get install mmdebstrap): %w", name, err)
	}
	pw.Close()
	tail := &tailBuffer{n: 25}
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logFile, line)
		prog.Line(line)
		tail.add(line)
	}
	pr.Close()
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", name, ctx.Err())
		}
		return fmt.Errorf("%s failed: %w; last output:\n  %s", name, err, strings.Join(tail.lines, "\n  "))
	}
	return nil
}
