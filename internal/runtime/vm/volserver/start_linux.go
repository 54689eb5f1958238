package volserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/jail"
	"github.com/moatsh/moat/internal/nfsd"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/guestnet"
)

// proc is one server process.
type proc struct {
	pid *runtime.Process
}

// kill SIGKILLs the process and waits (5 s at most) until it is gone.
func (p *proc) kill() error {
	defer p.pid.Close()
	if err := p.pid.Kill(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.pid.Wait(ctx); err != nil {
		return fmt.Errorf("volume server %d survived SIGKILL: %w", p.pid.PID(), err)
	}
	return nil
}

// start starts cfg's server process: a listener in the sandbox's netns, an
// idmapped mount of every volume, the jail, its pidfile and cgroup.
func start(ctx context.Context, cfg *Config) (_ *proc, retErr error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ln, err := guestnet.Listen(cfg.NetNS, nfsd.Port)
	if err != nil {
		return nil, fmt.Errorf("volume server of %s: %w", cfg.Sandbox, err)
	}
	defer ln.Close()
	pc := nfsd.ProcConfig{Sandbox: cfg.Sandbox, Verifier: bootVerifier()}
	var mounts []jail.NSMount
	defer func() {
		for _, m := range mounts {
			m.File.Close()
		}
	}()
	for i, v := range cfg.Volumes {
		if !isMountPoint(v.Source) {
			return nil, fmt.Errorf("volume server of %s: %s is not mounted: %w", cfg.Sandbox, v.Source, errdefs.ErrUnavailable)
		}
		// noexec: the server runs nothing; nosymfollow: even a bug of its
		// own could not make the kernel follow a symlink on the volume.
		f, err := idmap.OpenTree(v.Source, idmap.Range{Host: cfg.Host}, unix.MOUNT_ATTR_NOEXEC|unix.MOUNT_ATTR_NOSYMFOLLOW)
		if err != nil {
			return nil, fmt.Errorf("volume server of %s: %w", cfg.Sandbox, err)
		}
		mounts = append(mounts, jail.NSMount{Dir: nfsd.ExportName(i), File: f})
		pc.Exports = append(pc.Exports, nfsd.ExportName(i))
	}
	b, err := json.Marshal(pc)
	if err != nil {
		return nil, err
	}
	prog, err := os.Open(cfg.Binary)
	if err != nil {
		return nil, fmt.Errorf("volume server of %s: %w", cfg.Sandbox, err)
	}
	defer prog.Close()
	cmd, err := jail.NSCommand(&jail.NSConfig{Host: cfg.Host, Mounts: mounts, Files: []*os.File{ln}, Keep: nfsd.Caps,
		Program: prog, Args: []string{Name, cfg.Sandbox}, Env: []string{nfsd.ConfigEnv + "=" + string(b)}})
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(cfg.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o640)
	if err != nil {
		return nil, fmt.Errorf("volume server log: %w", err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start volume server of %s: %w", cfg.Sandbox, err)
	}
	pfd, err := runtime.OpenProcess(cmd.Process.Pid)
	go func() { _ = cmd.Wait() }() // reaps it; pfd sees the exit
	if err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	p := &proc{pid: pfd}
	defer func() {
		if retErr != nil {
			_ = p.kill()
		}
	}()
	if cfg.Cgroup != "" {
		if err := cgroups.AddPID(cfg.Cgroup, cmd.Process.Pid); err != nil {
			return nil, fmt.Errorf("volume server of %s: %w", cfg.Sandbox, err)
		}
	}
	if err := writePID(cfg.Dir, cmd.Process.Pid); err != nil {
		return nil, err
	}
	return p, nil
}

func writePID(dir string, pid int) error {
	tmp := filepath.Join(dir, pidFile+".tmp")
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("volume server pidfile: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, pidFile)); err != nil {
		return fmt.Errorf("volume server pidfile: %w", err)
	}
	return nil
}

// bootVerifier is NFS's write verifier: derived from the host's boot ID,
// so it changes exactly when data a guest wrote UNSTABLE may have been
// lost (a host crash); a server restart loses nothing the kernel holds.
func bootVerifier() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		b = []byte(strconv.FormatInt(time.Now().UnixNano(), 10))
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// isMountPoint reports whether p is a mount point: the server must never
// serve the empty directory under a volume's mount (writes would land in
// the data dir, not the volume's image).
func isMountPoint(p string) bool {
	var a, b unix.Stat_t
	if unix.Lstat(p, &a) != nil || unix.Lstat(filepath.Dir(p), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// Find locates the moat-nfsd binary: path (vm.Settings.NFSD), next
// to the running executable, or on $PATH.
func Find(path string) (string, error) {
	cands := []string{path}
	if exe, err := os.Executable(); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(exe), Name))
	}
	if p, err := exec.LookPath(Name); err == nil {
		cands = append(cands, p)
	}
	for _, c := range cands {
		if fi, err := os.Stat(c); c != "" && err == nil && fi.Mode().IsRegular() {
			return c, nil
		}
	}
	return "", errors.New("moat-nfsd not found (CGO_ENABLED=0 go build -o <dir of moat>/moat-nfsd ./cmd/moat-nfsd, or moat serve --nfsd PATH, env MOAT_NFSD)")
}
