package build

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/build/layercache"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
	"github.com/moatsh/moat/internal/testkit"
)

// cacheEnv is newEnv with a fake runner and an uploaded COPY archive.
func cacheEnv(t *testing.T) (*env, *fakeRunner, string) {
	t.Helper()
	e := newEnv(t)
	fr := &fakeRunner{}
	e.m.cfg.Runner = fr
	hash := strings.Repeat("cd", 32)
	p := FilesPath(e.data, "a", hash)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte{0x1f, 0x8b, 0, 0}, 0o600); err != nil {
		t.Fatal(err)
	}
	return e, fr, hash
}

// steps: ENV, RUN writing etc/one, COPY, RUN writing last (its text).
func cacheSteps(hash, last string) []Step {
	return []Step{
		{Type: "ENV", Args: []string{"A", "1"}},
		{Type: "RUN", Args: []string{"write etc/one v1"}},
		{Type: "COPY", Args: []string{"app", "/srv/app"}, FilesHash: hash},
		{Type: "RUN", Args: []string{last}},
	}
}

// mustBuild builds and fails the test unless the build is ready; it
// returns the build's log and the indexes of the steps that ran.
func (e *env) mustBuild(t *testing.T, fr *fakeRunner, name string, spec Spec) (string, []int) {
	t.Helper()
	fr.execs = nil
	b, err := e.build(t, "a", name, spec)
	if err != nil || b.Status != store.BuildReady {
		t.Fatalf("build %s = %+v, %v", name, b, err)
	}
	var lines []string
	for _, l := range e.m.Logs(b.ID, 0) {
		lines = append(lines, l.Message)
	}
	var ran []int
	for _, x := range fr.execs {
		ran = append(ran, x.Index)
	}
	return strings.Join(lines, "\n"), ran
}

func rootfsOf(t *testing.T, e *env, name string) string {
	t.Helper()
	tpl, err := e.db.GetTeamTemplate(context.Background(), "a", name)
	if err != nil {
		t.Fatal(err)
	}
	return tpl.RootfsDir
}

func TestLayerCacheReuse(t *testing.T) {
	e, fr, hash := cacheEnv(t)
	log, ran := e.mustBuild(t, fr, "t1", Spec{FromTemplate: "mini", Steps: cacheSteps(hash, "write etc/two v1")})
	if len(ran) != 3 || strings.Contains(log, "CACHED") {
		t.Fatalf("cold build ran %v:\n%s", ran, log)
	}
	// The same steps: nothing runs, each step says CACHED.
	log, ran = e.mustBuild(t, fr, "t2", Spec{FromTemplate: "mini", Steps: cacheSteps(hash, "write etc/two v1")})
	for _, want := range []string{"CACHED FROM template mini", "[1/4] ENV A 1", "[2/4] CACHED RUN write etc/one v1",
		"[3/4] CACHED COPY app /srv/app", "[4/4] CACHED RUN write etc/two v1", "build finished"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if len(ran) != 0 {
		t.Fatalf("cached build ran %v", ran)
	}
	for _, f := range []string{"etc/one", "etc/two", "ran-2", "ran-3", "opt/data.txt", "usr/local/bin/envd"} {
		if _, err := os.Stat(filepath.Join(rootfsOf(t, e, "t2"), f)); err != nil {
			t.Errorf("cached template lacks %s: %v", f, err)
		}
	}
	// The same template again: its rootfs stays as it is.
	var before, after syscall.Stat_t
	if err := syscall.Stat(rootfsOf(t, e, "t1"), &before); err != nil {
		t.Fatal(err)
	}
	log, _ = e.mustBuild(t, fr, "t1", Spec{FromTemplate: "mini", Steps: cacheSteps(hash, "write etc/two v1")})
	if err := syscall.Stat(rootfsOf(t, e, "t1"), &after); err != nil || after.Ino != before.Ino ||
		!strings.Contains(log, "root filesystem is unchanged") {
		t.Fatalf("same template rebuilt (ino %d -> %d, %v):\n%s", before.Ino, after.Ino, err, log)
	}
	// The last step changed: only it runs.
	log, ran = e.mustBuild(t, fr, "t3", Spec{FromTemplate: "mini", Steps: cacheSteps(hash, "write etc/two v2")})
	if len(ran) != 1 || ran[0] != 4 || !strings.Contains(log, "[3/4] CACHED COPY") ||
		!strings.Contains(log, "[4/4] RUN write etc/two v2 (as user)") {
		t.Fatalf("last step changed: ran %v:\n%s", ran, log)
	}
	if got := readFile(t, rootfsOf(t, e, "t3"), "etc/two"); got != "v2" {
		t.Fatalf("etc/two = %q", got)
	}
	// Templates record their layers for GC.
	if b, err := os.ReadFile(filepath.Join(template.Layout{DataDir: e.data}.TemplateDir("t3"), layercache.RefsName)); err != nil ||
		strings.Count(string(b), ",") != 3 {
		t.Fatalf("layers.json = %s, %v", b, err)
	}
	// Another ENV before a step changes its key: it runs again.
	steps := append([]Step{{Type: "ENV", Args: []string{"B", "1"}}}, cacheSteps(hash, "write etc/two v1")...)
	if _, ran = e.mustBuild(t, fr, "t4", Spec{FromTemplate: "mini", Steps: steps}); len(ran) != 3 {
		t.Fatalf("changed env: ran %v", ran)
	}
}

// TestLayerCacheForce: a step's force (the SDK's skipCache) reruns it and
// every step after it; the request's force reruns everything, base
// included; a forced result replaces the cached one.
func TestLayerCacheForce(t *testing.T) {
	e, fr, hash := cacheEnv(t)
	e.mustBuild(t, fr, "f", Spec{FromTemplate: "mini", Steps: cacheSteps(hash, "write etc/two v1")})
	steps := cacheSteps(hash, "write etc/two v1")
	steps[2].Force = true
	log, ran := e.mustBuild(t, fr, "f", Spec{FromTemplate: "mini", Steps: steps})
	if len(ran) != 2 || ran[0] != 3 || ran[1] != 4 || !strings.Contains(log, "[2/4] CACHED RUN") {
		t.Fatalf("skipCache on step 3: ran %v:\n%s", ran, log)
	}
	log, ran = e.mustBuild(t, fr, "f", Spec{FromTemplate: "mini", Steps: cacheSteps(hash, "write etc/two v1"), Force: true})
	if len(ran) != 3 || strings.Contains(log, "CACHED") {
		t.Fatalf("force: ran %v:\n%s", ran, log)
	}
	if _, ran = e.mustBuild(t, fr, "f", Spec{FromTemplate: "mini", Steps: cacheSteps(hash, "write etc/two v1")}); len(ran) != 0 {
		t.Fatalf("after force: ran %v", ran)
	}
}

// TestLayersNeverWrittenThrough: a later step that changes a file an
// earlier layer holds leaves that layer, and the templates made from it,
// as they were, although they share the file's inode.
func TestLayersNeverWrittenThrough(t *testing.T) {
	e, fr, hash := cacheEnv(t)
	e.mustBuild(t, fr, "w1", Spec{FromTemplate: "mini", Steps: cacheSteps(hash, "write etc/two v1")})
	w1 := rootfsOf(t, e, "w1")
	// The layer of step 2 is in the cache: find it through w1's refs.
	b, err := os.ReadFile(filepath.Join(filepath.Dir(w1), layercache.RefsName))
	if err != nil {
		t.Fatal(err)
	}
	keys := strings.Split(strings.Trim(string(b), `[]"`), `","`)
	layer2, ok := e.m.cache.Lookup(keys[1])
	if !ok {
		t.Fatalf("no layer for step 2 (%v)", keys)
	}
	var a, l syscall.Stat_t
	if err := syscall.Stat(filepath.Join(w1, "etc/one"), &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(filepath.Join(layer2, "etc/one"), &l); err != nil {
		t.Fatal(err)
	}
	if a.Ino != l.Ino || a.Nlink < 2 {
		t.Fatalf("the template's etc/one is not a hard link of the layer's (ino %d/%d, nlink %d): the test proves nothing",
			a.Ino, l.Ino, a.Nlink)
	}
	// Step 4 now rewrites etc/one (from step 2's layer), a file from the
	// base and the workdir of the COPY.
	steps := cacheSteps(hash, "write etc/one v2")
	steps = append(steps, Step{Type: "RUN", Args: []string{"write opt/data.txt changed"}})
	e.mustBuild(t, fr, "w2", Spec{FromTemplate: "mini", Steps: steps})
	w2 := rootfsOf(t, e, "w2")
	for _, c := range []struct{ root, file, want string }{
		{w2, "etc/one", "v2"}, {w2, "opt/data.txt", "changed"},
		{w1, "etc/one", "v1"}, {layer2, "etc/one", "v1"}, {w1, "opt/data.txt", "from mini\n"},
		{layer2, "opt/data.txt", "from mini\n"}, {w1, "last", "write etc/two v1"}, {layer2, "last", "write etc/one v1"},
	} {
		if got := readFile(t, c.root, c.file); got != c.want {
			t.Errorf("%s in %s = %q, want %q", c.file, c.root, got, c.want)
		}
	}
}

// TestFailedStepLeavesNoLayer: the failing step's tree never becomes a
// layer and the build's work directory is gone; the steps before it stay
// cached for the fixed build.
func TestFailedStepLeavesNoLayer(t *testing.T) {
	e, fr, hash := cacheEnv(t)
	e.mustBuild(t, fr, "x", Spec{FromTemplate: "mini", Steps: cacheSteps(hash, "write etc/two v1")})
	before := layerLinks(t, e)
	b, err := e.build(t, "a", "x", Spec{FromTemplate: "mini", Steps: cacheSteps(hash, "false")})
	if err != nil || b.Status != store.BuildError || b.ReasonStep != "4" {
		t.Fatalf("build = %+v, %v", b, err)
	}
	if after := layerLinks(t, e); after != before {
		t.Fatalf("layers %d -> %d after a failed step", before, after)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.m.cache.Dir(), ".work")); len(ents) != 0 {
		t.Fatalf("work dirs left: %v", ents)
	}
	if readFile(t, rootfsOf(t, e, "x"), "etc/two") != "v1" {
		t.Fatal("the failed build changed the template")
	}
	// A bad USER at the end fails after all steps: nothing is left either.
	steps := append(cacheSteps(hash, "write etc/two v1"), Step{Type: "USER", Args: []string{"nobody"}})
	if b, _ := e.build(t, "a", "x", Spec{FromTemplate: "mini", Steps: steps}); b.Status != store.BuildError {
		t.Fatalf("bad user: %+v", b)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.m.cache.Dir(), ".work")); len(ents) != 0 {
		t.Fatalf("work dirs left: %v", ents)
	}
	st, ran, err := gcNow(t, e)
	if err != nil || !ran || st.Kept != before || st.Layers != 0 {
		t.Fatalf("GC = %+v, %v, %v (want %d kept)", st, ran, err, before)
	}
}

// layerKeyRE is a layer key (an entry of the cache's directory).
var layerKeyRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func layerLinks(t *testing.T, e *env) int {
	t.Helper()
	ents, err := os.ReadDir(e.m.cache.Dir())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, x := range ents {
		if layerKeyRE.MatchString(x.Name()) {
			n++
		}
	}
	return n
}

func readFile(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStartCmdWithoutRunner: startCmd/readyCmd need no build sandbox (the
// orchestrator runs them at each create, on any runtime); RUN still does.
func TestStartCmdWithoutRunner(t *testing.T) {
	e := newEnv(t)
	b, err := e.build(t, "a", "svc", Spec{FromTemplate: "mini", StartCmd: "python3 -m http.server", ReadyCmd: "true"})
	if err != nil || b.Status != store.BuildReady {
		t.Fatalf("build = %+v, %v", b, err)
	}
	tpl, _ := e.db.GetTeamTemplate(context.Background(), "a", "svc")
	if c, _ := e.db.TemplateConfigOf(context.Background(), tpl.ID); c.StartCmd != "python3 -m http.server" || c.ReadyCmd != "true" {
		t.Fatalf("config = %+v", c)
	}
}

// TestFromTemplateCache: a template built here is a base by its content
// (its last layer): a fully cached rebuild of it keeps the cache of
// templates built from it, a forced one does not.
func TestFromTemplateCache(t *testing.T) {
	e, fr, hash := cacheEnv(t)
	parent := Spec{FromTemplate: "mini", Steps: cacheSteps(hash, "write etc/two v1")}
	child := Spec{FromTemplate: "p", Steps: []Step{{Type: "RUN", Args: []string{"write etc/three v1"}}}}
	e.mustBuild(t, fr, "p", parent)
	e.mustBuild(t, fr, "c", child)
	e.mustBuild(t, fr, "p", parent) // fully cached: a new build ID, the same tree
	if log, ran := e.mustBuild(t, fr, "c", child); len(ran) != 0 || !strings.Contains(log, "CACHED FROM template p") {
		t.Fatalf("child after a cached rebuild of its base: ran %v:\n%s", ran, log)
	}
	parent.Force = true
	e.mustBuild(t, fr, "p", parent)
	if log, ran := e.mustBuild(t, fr, "c", child); len(ran) != 1 || strings.Contains(log, "CACHED") {
		t.Fatalf("child after a forced rebuild of its base: ran %v:\n%s", ran, log)
	}
}

// TestGCAfterTemplateRemoval: a template's layers stay while its
// directory exists, however old; once it is gone they go with age.
func TestGCAfterTemplateRemoval(t *testing.T) {
	e, fr, hash := cacheEnv(t)
	e.mustBuild(t, fr, "gone", Spec{FromTemplate: "mini", Steps: cacheSteps(hash, "write etc/two v1")})
	n := layerLinks(t, e)
	e.m.cfg.LayerMaxAge = time.Nanosecond
	if st, ran, err := gcNow(t, e); err != nil || !ran || st.Layers != 0 || st.Kept != n {
		t.Fatalf("GC with the template = %+v, %v, %v (want %d kept)", st, ran, err, n)
	}
	if err := template.RemoveTemplateFiles(e.data, "gone"); err != nil {
		t.Fatal(err)
	}
	if st, ran, err := gcNow(t, e); err != nil || !ran || st.Layers != n || st.Kept != 0 {
		t.Fatalf("GC without the template = %+v, %v, %v (want %d removed)", st, ran, err, n)
	}
	if ents, _ := os.ReadDir(e.m.cache.Dir()); len(ents) != 2 { // .lock and .work
		t.Fatalf("left in the cache: %v", ents)
	}
	// The next build starts cold and works.
	if _, ran := e.mustBuild(t, fr, "again", Spec{FromTemplate: "mini", Steps: cacheSteps(hash, "write etc/two v1")}); len(ran) != 3 {
		t.Fatalf("after GC: ran %v", ran)
	}
}

// gcNow runs GC, waiting for the one a finished build may be running.
func gcNow(t *testing.T, e *env) (st layercache.GCStats, ran bool, err error) {
	t.Helper()
	testkit.WaitFor(t, time.Second, "a GC run of our own (a finished build's GC to end)", func() bool {
		st, ran, err = e.m.GC()
		return ran || err != nil
	})
	return st, ran, err
}
