package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/netpolicy/firewall"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit"
	moat "github.com/moatsh/moat/sdk/go"
)

// These tests run the real `moat serve` binary with the container runtime
// in the default (host-wide) scope. Only this package starts such servers;
// its tests run one after the other. A server of someone else's holding the
// host lock makes them wait, then skip (fail under MOAT_TEST_REQUIRE=1:
// testkit.Missing), naming it.

// realServer is a `moat serve` process under test.
type realServer struct {
	cmd     *exec.Cmd
	dataDir string
	base    string
	key     string
	out     *lockedBuf
	done    chan error
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

var (
	moatBinOnce sync.Once
	moatBin     string
	moatBinErr  error
)

// requireRealServer needs a host that can run container sandboxes from the
// CI base template (testkit: a skip, a failure under MOAT_TEST_REQUIRE=1),
// builds moat (a build failure fails the test) and returns the rootfs.
func requireRealServer(t testing.TB) string {
	t.Helper()
	testkit.RequireRoot(t)
	testkit.RequireTool(t, "crun", "runc")
	rootfs := testkit.RequireTemplate(t, "base")
	moatBinOnce.Do(func() {
		d, err := os.MkdirTemp("", "moat-bin-")
		if err != nil {
			moatBinErr = err
			return
		}
		moatBin = filepath.Join(d, "moat")
		if out, err := exec.Command("go", "build", "-o", moatBin, ".").CombinedOutput(); err != nil {
			moatBinErr = fmt.Errorf("go build: %v: %s", err, out)
			return
		}
		// envd beside moat, where a server looks for the one it installs
		// into templates built over the API.
		if out, err := exec.Command("go", "build", "-o", filepath.Join(d, "envd"), "github.com/moatsh/moat/cmd/envd").CombinedOutput(); err != nil {
			moatBinErr = fmt.Errorf("go build envd: %v: %s", err, out)
		}
	})
	if moatBinErr != nil {
		t.Fatal(moatBinErr)
	}
	return rootfs
}

// newDataDir makes a data dir (traversable for the sandboxes' roots) whose
// store knows the template "base" at rootfs.
func newDataDir(t testing.TB, rootfs string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(context.Background(), filepath.Join(dir, "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.UpsertTemplate(context.Background(), store.Template{Name: "base", RootfsDir: rootfs}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startServer starts `moat serve` on dataDir with extra inherited files and
// waits until it listens. While another server holds the host lock it
// retries for up to two minutes, then skips (testkit.Missing).
func startServer(t testing.TB, dataDir string, extra ...*os.File) *realServer {
	t.Helper()
	return startServerArgs(t, dataDir, nil, extra...)
}

// startServerArgs is startServer with extra `moat serve` flags.
func startServerArgs(t testing.TB, dataDir string, args []string, extra ...*os.File) *realServer {
	t.Helper()
	// A server of an older build takes no host lock, and this one's Recover
	// would remove its sandboxes' network objects.
	if pids := otherServers(); len(pids) > 0 {
		testkit.Missing(t, "another moat serve is running (pids %v): not starting one in the host scope beside it", pids)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		s, err := tryStart(t, dataDir, args, extra...)
		if err == nil {
			return s
		}
		if !strings.Contains(err.Error(), "is running on this host") {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			testkit.Missing(t, "another moat serve holds the host lock: %v", err)
		}
		time.Sleep(2 * time.Second)
	}
}

// otherServers returns the PIDs of `moat serve` processes on the host.
func otherServers() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(string(b), "\x00")
		if len(args) > 1 && filepath.Base(args[0]) == "moat" && args[1] == "serve" {
			pids = append(pids, pid)
		}
	}
	return pids
}

func tryStart(t testing.TB, dataDir string, args []string, extra ...*os.File) (*realServer, error) {
	t.Helper()
	dropScopeTablesAtCleanup(t, args)
	s := &realServer{dataDir: dataDir, out: &lockedBuf{}, done: make(chan error, 1)}
	s.cmd = exec.Command(moatBin, append([]string{"serve", "--data-dir", dataDir, "--addr", "127.0.0.1:0", "--runtime", "container"}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.ExtraFiles = extra
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.done <- s.cmd.Wait() }()
	re := regexp.MustCompile(`moat listening on (\S+)`)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-s.done:
			return nil, fmt.Errorf("moat serve exited: %v: %s", err, s.out.String())
		default:
		}
		if m := re.FindStringSubmatch(s.out.String()); m != nil {
			s.base = "http://" + m[1]
			s.key = regexp.MustCompile(`e2b_[0-9a-f]{40}`).FindString(s.out.String())
			t.Cleanup(s.stop)
			return s, nil
		}
	}
	s.stop()
	return nil, fmt.Errorf("moat serve did not listen: %s", s.out.String())
}

// dropScopeTablesAtCleanup deletes, once the test's servers have stopped,
// the nftables tables of the server scope args name (--scope N) when no
// sandbox interface of that scope is left. A server deletes them itself when
// it stops cleanly with no sandbox; one the test kills with SIGKILL (the
// cluster tests' lost node and API outage) cannot, and its tables would
// outlive the run (the final leak check of scripts/test.sh lists them).
func dropScopeTablesAtCleanup(t testing.TB, args []string) {
	n := -1
	for i, a := range args {
		if a == "--scope" && i+1 < len(args) {
			n, _ = strconv.Atoi(args[i+1])
		}
	}
	if n <= 0 {
		return // the host scope's tables outlive servers by design
	}
	t.Cleanup(func() {
		links, err := exec.Command("ip", "-o", "link", "show").Output()
		if err != nil {
			t.Errorf("scope %d tables: ip link: %v", n, err)
			return
		}
		re := regexp.MustCompile(fmt.Sprintf(`(?m)^\d+: s%d[0-9a-z]`, n))
		if l := re.Find(links); l != nil {
			t.Logf("scope %d keeps its tables: interface %q is left", n, l)
			return
		}
		// The scope's tables as netpolicy.WithTestScope names them; missing
		// ones are not an error.
		if err := firewall.New(firewall.Config{Table: fmt.Sprintf("moats%d", n)}, nil).Delete(); err != nil {
			t.Errorf("scope %d tables: %v", n, err)
		}
	})
}

// stop ends the server with SIGTERM (SIGKILL after 15 s).
func (s *realServer) stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func (s *realServer) client() *moat.Client {
	return &moat.Client{APIURL: s.base, APIKey: s.key}
}

// createSandbox creates a sandbox from "base" and kills it at cleanup.
func (s *realServer) createSandbox(t *testing.T) *moat.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := s.client().CreateSandbox(ctx, moat.CreateOptions{Template: "base", Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatalf("create sandbox: %v\n%s", err, s.out.String())
	}
	t.Cleanup(func() { _ = sb.Kill(context.Background()) })
	return sb
}

// runIn runs cmd in sb and returns its stdout.
func runIn(t *testing.T, sb *moat.Sandbox, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	code, err := sb.Run(ctx, cmd, moat.RunOptions{Stdout: &out, Stderr: &out})
	if err != nil || code != 0 {
		t.Fatalf("run %q: %d %v %s", cmd, code, err, out.String())
	}
	return out.String()
}

// sandboxPIDs returns the host PIDs of every process in the PID namespace
// of the sandbox's init (its pid file).
func sandboxPIDs(t *testing.T, sandboxDir string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sandboxDir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := os.Readlink("/proc/" + strings.TrimSpace(string(b)) + "/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if got, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); got == ns {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// fileID is a descriptor's target: device and inode.
type fileID struct{ dev, ino uint64 }

func fdIDs(t *testing.T, pid int) map[fileID]string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	out := map[fileID]string{}
	for _, e := range ents {
		var st unix.Stat_t
		if unix.Stat(filepath.Join(dir, e.Name()), &st) == nil {
			out[fileID{st.Dev, st.Ino}] = e.Name()
		}
	}
	return out
}

// fdFlags returns the open flags of pid's descriptor fd (fdinfo, octal).
func fdFlags(t *testing.T, pid int, fd string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
			if err != nil {
				t.Fatalf("fdinfo flags %q: %v", v, err)
			}
			return int(n)
		}
	}
	t.Fatalf("no flags in fdinfo of %d/%s", pid, fd)
	return 0
}

func idOf(t *testing.T, f *os.File) fileID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return fileID{st.Dev, st.Ino}
}

// TestServeInheritedDescriptors (Part B): descriptors `moat serve` inherits
// (a pipe and a file, as an operator's shell might leave open) reach none
// of the sandbox's processes.
func TestServeInheritedDescriptors(t *testing.T) {
	rootfs := requireRealServer(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	f, err := os.CreateTemp(t.TempDir(), "inherited")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := startServer(t, newDataDir(t, rootfs), pw, f)
	leaked := map[fileID]string{idOf(t, pw): "inherited pipe", idOf(t, f): "inherited file"}
	held := fdIDs(t, s.cmd.Process.Pid)
	for id, what := range leaked {
		fd, ok := held[id]
		if !ok {
			t.Fatalf("moat serve does not hold the %s: the test proves nothing", what)
		}
		// Close-on-exec in the server: no child at all (crun, unshare,
		// mkfs.ext4, QEMU) gets it, not only the sandbox's processes.
		if flags := fdFlags(t, s.cmd.Process.Pid, fd); flags&unix.O_CLOEXEC == 0 {
			t.Errorf("moat serve's fd %s (%s) is not close-on-exec: flags %o", fd, what, flags)
		}
	}
	sb := s.createSandbox(t)
	runIn(t, sb, "sleep 300 >/dev/null 2>&1 &")
	pids := sandboxPIDs(t, filepath.Join(s.dataDir, "sandboxes", sb.ID))
	if len(pids) < 2 {
		t.Fatalf("sandbox processes: %v", pids)
	}
	for _, pid := range pids {
		for id, fd := range fdIDs(t, pid) {
			if what, ok := leaked[id]; ok {
				t.Errorf("sandbox process %d holds the %s as fd %s", pid, what, fd)
			}
		}
	}
	t.Logf("checked %d sandbox processes", len(pids))
}

// TestServeSecretsAtRest (Part C): neither an unprivileged host account nor
// a sandbox's host uid can read the store, its WAL/SHM, the templates or
// another sandbox's dir; each sandbox's root still reaches its own dir.
func TestServeSecretsAtRest(t *testing.T) {
	rootfs := requireRealServer(t)
	dataDir := newDataDir(t, rootfs)
	tdir := filepath.Join(dataDir, "templates", "old")
	if err := os.MkdirAll(filepath.Join(tdir, "rootfs", "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tdir, "build.log"), []byte("secret build output"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, dataDir)
	a, b := s.createSandbox(t), s.createSandbox(t)
	dirA, dirB := filepath.Join(dataDir, "sandboxes", a.ID), filepath.Join(dataDir, "sandboxes", b.ID)
	ra, err := idmap.Read(dirA)
	if err != nil {
		t.Fatal(err)
	}
	denied := []string{"cat " + filepath.Join(dataDir, "moat.db"), "cat " + filepath.Join(dataDir, "moat.db-wal"),
		"cat " + filepath.Join(dataDir, "moat.db-shm"), "ls " + filepath.Join(dataDir, "templates"),
		"cat " + filepath.Join(tdir, "build.log"), "ls " + filepath.Join(tdir, "rootfs"),
		"ls " + dirB, "cat " + filepath.Join(dirB, "config.json"), "ls " + dataDir,
		"ls " + filepath.Join(dataDir, "sandboxes"), "ls " + filepath.Join(dataDir, "egress-ca"),
		"cat " + filepath.Join(dataDir, "egress-ca", "ca.key")}
	if _, err := os.Stat(filepath.Join(dataDir, "egress-ca", "ca.key")); err != nil {
		t.Fatalf("the server made no egress CA: %v", err)
	}
	for _, uid := range []uint32{65534, uint32(ra.Root())} {
		for _, c := range denied {
			t.Run(fmt.Sprintf("uid %d %s", uid, strings.ReplaceAll(c, dataDir, "DATA")), func(t *testing.T) {
				if out, err := asUser(uid, c); err == nil {
					t.Errorf("succeeded: %s", out)
				}
			})
		}
	}
	// Controls: the mechanism runs commands, and a sandbox's root reaches its own dir.
	if out, err := asUser(65534, "ls /"); err != nil {
		t.Fatalf("as 65534: ls /: %v %s", err, out)
	}
	if out, err := asUser(uint32(ra.Root()), "ls "+filepath.Join(dirA, "rootfs")); err != nil {
		t.Errorf("sandbox root cannot reach its own dir: %v %s", err, out)
	}
	if got := runIn(t, a, "echo ok"); !strings.Contains(got, "ok") {
		t.Errorf("sandbox A: %q", got)
	}
}

// asUser runs a shell command as uid (and gid uid) with no supplementary groups.
func asUser(uid uint32, command string) (string, error) {
	cmd := exec.Command("sh", "-c", command)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSecondServerRefuses (Part D): a second `moat serve` with another data
// dir exits (it does not wait for the lock: tryStart's error is its exit,
// not "did not listen"), naming the first; the first one's sandbox, its
// netns and its veth are untouched.
func TestSecondServerRefuses(t *testing.T) {
	rootfs := requireRealServer(t)
	first := startServer(t, newDataDir(t, rootfs))
	sb := first.createSandbox(t)
	runIn(t, sb, "echo before")
	dataB := newDataDir(t, rootfs)
	start := time.Now()
	_, err := tryStart(t, dataB, nil)
	took := time.Since(start)
	if err == nil {
		t.Fatal("second moat serve started")
	}
	want := fmt.Sprintf("pid %d, data dir %s", first.cmd.Process.Pid, first.dataDir)
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("second server: %v; want its message to name %q", err, want)
	}
	t.Logf("second server refused in %v", took.Round(time.Millisecond))
	if got := runIn(t, sb, "echo after"); !strings.Contains(got, "after") {
		t.Errorf("first server's sandbox after the second start: %q", got)
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); !strings.Contains(string(out), "moat-"+sb.ID) {
		t.Errorf("netns moat-%s gone: %s", sb.ID, out)
	}
	if out, err := exec.Command("ip", "link", "show", "mh"+sb.ID[:min(12, len(sb.ID))]).CombinedOutput(); err != nil {
		t.Errorf("veth of %s gone: %v %s", sb.ID, err, out)
	}
	if _, err := os.Stat(filepath.Join(dataB, "sandboxes")); err == nil {
		t.Error("the refused server created its runtime state")
	}
}
