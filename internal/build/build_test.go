package build

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/moatsh/moat/internal/build/upper"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/oci"
	"github.com/moatsh/moat/internal/oci/ocitest"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
	"github.com/moatsh/moat/internal/testkit"
)

type env struct {
	db   *store.DB
	m    *Manager
	data string
}

// newEnv makes a store with a shared template "mini" whose rootfs is a
// small tree with root and user accounts, and a Manager over it.
func newEnv(t *testing.T) *env {
	t.Helper()
	testkit.RequireRoot(t) // builds chown /home/user
	ctx := context.Background()
	dir := t.TempDir()
	db, err := store.Open(ctx, filepath.Join(dir, "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	mini := filepath.Join(dir, "mini")
	for name, body := range map[string]string{
		"etc/passwd":   "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n",
		"etc/group":    "root:x:0:\nuser:x:1000:\n",
		"opt/data.txt": "from mini\n",
	} {
		p := filepath.Join(mini, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.UpsertTemplate(ctx, store.Template{ID: "mini", Name: "mini", RootfsDir: mini}); err != nil {
		t.Fatal(err)
	}
	envd := filepath.Join(dir, "envd")
	exe, err := os.Executable() // a static ELF file, as envd must be
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(exe); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(envd, b, 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	m, err := New(ctx, Config{DB: db, DataDir: data, EnvdPath: envd, Logger: slog.New(slog.NewTextHandler(tlog{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return &env{db: db, m: m, data: data}
}

type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) { l.t.Log(strings.TrimSpace(string(p))); return len(p), nil }

// build requests and starts a build of name for team and waits for it.
func (e *env) build(t *testing.T, team, name string, spec Spec) (store.Build, error) {
	t.Helper()
	ctx := context.Background()
	b, err := e.db.RequestBuild(ctx, team, name, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.Start(ctx, b, spec); err != nil {
		return b, err
	}
	var got store.Build
	testkit.WaitFor(t, 30*time.Second, "build "+b.ID+" to finish", func() bool {
		var err error
		if got, err = e.db.GetBuild(ctx, team, b.TemplateID, b.ID); err != nil {
			t.Fatal(err)
		}
		return got.Status == store.BuildReady || got.Status == store.BuildError
	})
	return got, nil
}

func TestBuildFromTemplate(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	b, err := e.build(t, "a", "derived", Spec{FromTemplate: "mini", Steps: []Step{
		{Type: "ENV", Args: []string{"A", "1"}}, {Type: "WORKDIR", Args: []string{"/srv/app"}}, {Type: "USER", Args: []string{"root"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != store.BuildReady {
		t.Fatalf("build = %+v", b)
	}
	tpl, err := e.db.GetTeamTemplate(ctx, "a", "derived")
	if err != nil {
		t.Fatal(err)
	}
	if tpl.RootfsDir != (template.Layout{DataDir: e.data}).RootfsDir("derived") {
		t.Fatalf("rootfs = %s", tpl.RootfsDir)
	}
	if got, _ := os.ReadFile(filepath.Join(tpl.RootfsDir, "opt/data.txt")); string(got) != "from mini\n" {
		t.Fatalf("copied file = %q", got)
	}
	for _, p := range []string{"usr/local/bin/envd", "srv/app"} {
		if _, err := os.Stat(filepath.Join(tpl.RootfsDir, p)); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	c, _ := e.db.TemplateConfigOf(ctx, tpl.ID)
	if c.Env["A"] != "1" || c.Workdir != "/srv/app" || c.User != "root" {
		t.Fatalf("config = %+v", c)
	}
	logs := e.m.Logs(b.ID, 0)
	var text []string
	for _, l := range logs {
		if l.Time.IsZero() || l.Level == "" {
			t.Fatalf("log entry %+v", l)
		}
		text = append(text, l.Message)
	}
	all := strings.Join(text, "\n")
	for _, want := range []string{"FROM template mini", "[1/3] ENV A 1", "[3/3] USER root", "build finished"} {
		if !strings.Contains(all, want) {
			t.Fatalf("log lacks %q:\n%s", want, all)
		}
	}
	if rest := e.m.Logs(b.ID, len(logs)); len(rest) != 0 {
		t.Fatalf("logs past the end: %v", rest)
	}
	// The derived template inherits its base's config; a later build
	// from it adds to it.
	b2, err := e.build(t, "a", "derived2", Spec{FromTemplate: "derived", Steps: []Step{{Type: "ENV", Args: []string{"B", "2"}}}})
	if err != nil || b2.Status != store.BuildReady {
		t.Fatalf("build 2 = %+v, %v", b2, err)
	}
	tpl2, _ := e.db.GetTeamTemplate(ctx, "a", "derived2")
	c2, _ := e.db.TemplateConfigOf(ctx, tpl2.ID)
	if c2.Env["A"] != "1" || c2.Env["B"] != "2" || c2.Workdir != "/srv/app" || c2.User != "root" {
		t.Fatalf("inherited config = %+v", c2)
	}
	// Another team cannot start from a's template: it does not exist for it.
	if _, err := e.build(t, "b", "theirs", Spec{FromTemplate: "derived"}); !errors.Is(err, errdefs.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "not found") {
		t.Fatalf("other team's base: %v", err)
	}
}

// TestFailedBuildRegistersNothing: a USER the rootfs lacks fails the build
// naming the step, registers nothing and leaves an existing template of
// the name as it was.
func TestFailedBuildRegistersNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if b, err := e.build(t, "a", "keep", Spec{FromTemplate: "mini"}); err != nil || b.Status != store.BuildReady {
		t.Fatalf("first build = %+v, %v", b, err)
	}
	before, _ := e.db.GetTeamTemplate(ctx, "a", "keep")
	b, err := e.build(t, "a", "keep", Spec{FromTemplate: "mini", Steps: []Step{
		{Type: "ENV", Args: []string{"A", "1"}}, {Type: "USER", Args: []string{"nobody"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != store.BuildError || b.ReasonStep != "2" || !strings.Contains(b.Reason, "USER nobody") {
		t.Fatalf("build = %+v", b)
	}
	after, _ := e.db.GetTeamTemplate(ctx, "a", "keep")
	if after.BuildID != before.BuildID {
		t.Fatalf("failed build changed the template: %+v -> %+v", before, after)
	}
	if c, _ := e.db.TemplateConfigOf(ctx, after.ID); c.Env["A"] != "" {
		t.Fatalf("failed build's config registered: %+v", c)
	}
	if _, err := os.Stat(filepath.Join(after.RootfsDir, "etc/passwd")); err != nil {
		t.Fatalf("the template's rootfs is gone: %v", err)
	}
	// Nothing is half-built under a new name either.
	b, _ = e.build(t, "a", "never", Spec{FromTemplate: "mini", Steps: []Step{{Type: "USER", Args: []string{"nobody"}}}})
	if b.Status != store.BuildError {
		t.Fatalf("build = %+v", b)
	}
	if _, err := e.db.GetTeamTemplate(ctx, "a", "never"); !errdefs.IsNotFound(err) {
		t.Fatalf("failed template registered: %v", err)
	}
	if _, err := os.Stat((template.Layout{DataDir: e.data}).RootfsDir("never")); !os.IsNotExist(err) {
		t.Fatalf("failed build left a rootfs: %v", err)
	}
	var sawError bool
	for _, l := range e.m.Logs(b.ID, 0) {
		sawError = sawError || (l.Level == "error" && strings.Contains(l.Message, "USER nobody"))
	}
	if !sawError {
		t.Fatal("no error entry in the build log")
	}
}

// TestBuildFromImage pulls from an in-process registry with credentials
// and takes the image's ENV and WORKDIR as defaults under the steps'.
func TestBuildFromImage(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	reg := ocitest.NewRegistry(t, "u", "p")
	img := ocitest.Image(t, "linux/amd64", v1.Config{Env: []string{"PATH=/bin", "FROM_IMAGE=yes"}, WorkingDir: "/work"},
		ocitest.Layer(t, ocitest.Tar(t, ocitest.Dir("bin", 0o755), ocitest.Dir("etc", 0o755), ocitest.Dir("work", 0o755),
			ocitest.File("etc/os-release", 0o644, "ID=test\n"))))
	reg.PushImage(t, "test/img:1", img)

	b, err := e.build(t, "a", "fromimg", Spec{FromImage: reg.Ref("test/img:1"), Steps: []Step{{Type: "ENV", Args: []string{"A", "1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Status == store.BuildReady {
		t.Fatalf("anonymous pull from a registry that wants credentials succeeded: %+v", b)
	}
	if b.ReasonStep != "base" || !strings.Contains(b.Reason, "authentication") {
		t.Fatalf("failed build = %+v", b)
	}
	b, err = e.build(t, "a", "fromimg", Spec{FromImage: reg.Ref("test/img:1"), Registry: &oci.Credentials{Username: "u", Password: "p"},
		Steps: []Step{{Type: "ENV", Args: []string{"A", "1"}}}})
	if err != nil || b.Status != store.BuildReady {
		t.Fatalf("build = %+v, %v", b, err)
	}
	tpl, _ := e.db.GetTeamTemplate(ctx, "a", "fromimg")
	c, _ := e.db.TemplateConfigOf(ctx, tpl.ID)
	if c.Env["FROM_IMAGE"] != "yes" || c.Env["A"] != "1" || c.Workdir != "/work" {
		t.Fatalf("config = %+v", c)
	}
	if _, err := os.Stat(filepath.Join(tpl.RootfsDir, "etc/os-release")); err != nil {
		t.Fatal(err)
	}
}

// fakeRunner stands in for the build sandbox: it records what it was asked
// to run, prints a line per command and "runs" a command the way the
// sandbox's changes reach the rootfs: written into an upper dir (ran-<index>
// and last hold the command; "write PATH TEXT" writes PATH), then applied
// with upper.Apply. "false" exits 1.
type fakeRunner struct {
	execs  []Exec
	rootfs string
	staged []string // files under stageDir while running
}

func (f *fakeRunner) Run(_ context.Context, rootfs string, execs []Exec, out func(Exec, string, string)) error {
	f.rootfs = rootfs
	ents, _ := os.ReadDir(filepath.Join(rootfs, stageDir))
	for _, e := range ents {
		f.staged = append(f.staged, e.Name())
	}
	upperDir, err := os.MkdirTemp("", "fake-upper-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(upperDir)
	for _, e := range execs {
		f.execs = append(f.execs, e)
		out(e, "stdout", "running "+e.Cmd)
		if e.Cmd == "false" {
			out(e, "stderr", "it failed")
			return &ExitError{Index: e.Index, Kind: e.Kind, Code: 1}
		}
		files := map[string]string{fmt.Sprintf("ran-%d", e.Index): e.Cmd, "last": e.Cmd}
		if f, ok := strings.CutPrefix(e.Cmd, "write "); ok {
			p, text, _ := strings.Cut(f, " ")
			files[p] = text
		}
		for p, text := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(upperDir, p)), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(upperDir, p), []byte(text), 0o644); err != nil {
				return err
			}
		}
	}
	return upper.Apply(upperDir, rootfs, upper.IDShift{Host: 0, Size: 1 << 30}, func(string) {})
}

func TestBuildRunSteps(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	b0, err := e.db.RequestBuild(ctx, "a", "runs", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Without a runner, RUN is refused before anything starts.
	err = e.m.Start(ctx, b0, Spec{FromTemplate: "mini", Steps: []Step{{Type: "RUN", Args: []string{"true"}}}})
	if !errors.Is(err, errdefs.ErrNotImplemented) || !strings.Contains(err.Error(), "step 1 (RUN)") {
		t.Fatalf("RUN without runner: %v", err)
	}
	fr := &fakeRunner{}
	e.m.cfg.Runner = fr
	b, err := e.build(t, "a", "runs", Spec{FromTemplate: "mini", Steps: []Step{
		{Type: "ENV", Args: []string{"A", "1"}},
		{Type: "RUN", Args: []string{"echo one"}},
		{Type: "WORKDIR", Args: []string{"/srv"}},
		{Type: "USER", Args: []string{"root"}},
		{Type: "ENV", Args: []string{"B", "2"}},
		{Type: "RUN", Args: []string{"echo two", "user"}},
	}})
	if err != nil || b.Status != store.BuildReady {
		t.Fatalf("build = %+v, %v", b, err)
	}
	want := []Exec{
		{Index: 2, Cmd: "echo one", User: "user", Workdir: "/home/user", Env: map[string]string{"A": "1"}},
		{Index: 6, Cmd: "echo two", User: "user", Workdir: "/srv", Env: map[string]string{"A": "1", "B": "2"}},
	}
	if len(fr.execs) != len(want) {
		t.Fatalf("execs = %+v", fr.execs)
	}
	for i, w := range want {
		g := fr.execs[i]
		if g.Index != w.Index || g.Cmd != w.Cmd || g.User != w.User || g.Workdir != w.Workdir || fmt.Sprint(g.Env) != fmt.Sprint(w.Env) {
			t.Errorf("exec %d = %+v, want %+v", i, g, w)
		}
	}
	tpl, _ := e.db.GetTeamTemplate(ctx, "a", "runs")
	if fr.rootfs == tpl.RootfsDir {
		t.Fatal("commands ran over the installed template, not a fresh copy")
	}
	for _, f := range []string{"ran-2", "ran-6"} {
		if _, err := os.Stat(filepath.Join(tpl.RootfsDir, f)); err != nil {
			t.Fatalf("the runner's changes are not in the template: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(tpl.RootfsDir, "srv")); err != nil {
		t.Fatalf("RUN workdir not made: %v", err)
	}
	var all []string
	for _, l := range e.m.Logs(b.ID, 0) {
		all = append(all, l.Level+" "+l.Step+" "+l.Message)
	}
	text := strings.Join(all, "\n")
	for _, w := range []string{"info 2 [2/6] RUN echo one (as user)", "info 2 running echo one", "info 6 running echo two"} {
		if !strings.Contains(text, w) {
			t.Fatalf("log lacks %q:\n%s", w, text)
		}
	}

	// A failing command: error naming the step and exit code, nothing
	// registered, the template as it was.
	fr.execs = nil
	b, err = e.build(t, "a", "runs", Spec{FromTemplate: "mini", Steps: []Step{
		{Type: "RUN", Args: []string{"echo ok"}}, {Type: "RUN", Args: []string{"false"}}, {Type: "ENV", Args: []string{"C", "3"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != store.BuildError || b.ReasonStep != "2" || b.Reason != "step 2 (RUN): the command exited with code 1" {
		t.Fatalf("failed build = %+v", b)
	}
	if after, _ := e.db.GetTeamTemplate(ctx, "a", "runs"); after.BuildID != tpl.BuildID {
		t.Fatalf("failed build replaced the template")
	}
	var sawStderr bool
	for _, l := range e.m.Logs(b.ID, 0) {
		sawStderr = sawStderr || (l.Level == "warn" && l.Message == "it failed" && l.Step == "2")
	}
	if !sawStderr {
		t.Fatal("stderr line not in the log")
	}
}

func TestBuildCopySteps(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	fr := &fakeRunner{}
	e.m.cfg.Runner = fr
	hash := strings.Repeat("ab", 32)
	// Never uploaded: the build fails naming the step and the hash.
	b, err := e.build(t, "a", "copies", Spec{FromTemplate: "mini", Steps: []Step{
		{Type: "COPY", Args: []string{"app", "/srv/app", "", "0755"}, FilesHash: hash}}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != store.BuildError || b.ReasonStep != "1" || !strings.Contains(b.Reason, "files "+hash+" were never uploaded") {
		t.Fatalf("build = %+v", b)
	}
	p := FilesPath(e.data, "a", hash)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte{0x1f, 0x8b, 0, 0}, 0o600); err != nil {
		t.Fatal(err)
	}
	// Another team's upload is not this team's.
	if bb, err := e.build(t, "b", "theirs", Spec{FromTemplate: "mini", Steps: []Step{
		{Type: "COPY", Args: []string{"app", "/srv/app"}, FilesHash: hash}}}); err != nil || bb.Status != store.BuildError {
		t.Fatalf("b used a's upload: %+v, %v", bb, err)
	}
	b, err = e.build(t, "a", "copies", Spec{FromTemplate: "mini", Steps: []Step{
		{Type: "USER", Args: []string{"user"}},
		{Type: "COPY", Args: []string{"app", "/srv/app", "", "0755"}, FilesHash: hash}}})
	if err != nil || b.Status != store.BuildReady {
		t.Fatalf("build = %+v, %v", b, err)
	}
	if len(fr.execs) != 1 || fr.execs[0].Kind != "COPY" || fr.execs[0].User != "root" ||
		!strings.Contains(fr.execs[0].Cmd, "dest='/srv/app'") || !strings.Contains(fr.execs[0].Cmd, "owner='user'") ||
		!strings.Contains(fr.execs[0].Cmd, "tar -xzf") || !strings.Contains(fr.execs[0].Cmd, "chmod 0755") {
		t.Fatalf("execs = %+v", fr.execs)
	}
	if len(fr.staged) != 1 || fr.staged[0] != hash+".tar" {
		t.Fatalf("staged = %v", fr.staged)
	}
	tpl, _ := e.db.GetTeamTemplate(ctx, "a", "copies")
	if _, err := os.Stat(filepath.Join(tpl.RootfsDir, stageDir)); !os.IsNotExist(err) {
		t.Fatalf("staged archives left in the template: %v", err)
	}
}
