package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moatsh/moat/internal/build/layercache"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
	"github.com/moatsh/moat/internal/template/rootfs"
)

// layer is a cached tree and the key it is stored under.
type layer struct {
	key, dir string
}

// base is a build's first layer and what its base brings.
type base struct {
	layer
	cfg   store.TemplateConfig // the base's process defaults
	image *template.ImageInfo  // the image it came from (nil for a template)
}

// baseLayer returns the layer of plan's base: from the cache unless the
// build is forced, else made in work (an image unpacked, or a copy of the
// source template) and committed.
func (m *Manager) baseLayer(ctx context.Context, b store.Build, plan Plan, envdSum, work string) (base, error) {
	if plan.FromTemplate != "" {
		return m.templateBase(ctx, b, plan, envdSum, work)
	}
	src := template.ImageSource{Ref: plan.FromImage, Credentials: plan.Registry}
	img, err := template.PullImage(ctx, m.cfg.DataDir, src, m.log)
	if err != nil {
		if name := e2bBuiltin(plan.FromImage); name != "" && plan.Registry == nil {
			m.logf(b.ID, "info", "base", "fromImage %s: no registry serves it (%v); the built-in template %s stands in for it", plan.FromImage, err, name)
			plan.FromImage, plan.FromTemplate = "", name
			return m.templateBase(ctx, b, plan, envdSum, work)
		}
		return base{}, fmt.Errorf("fromImage %s: %w", plan.FromImage, err)
	}
	out := base{cfg: imageConfig(img.Config),
		image: &template.ImageInfo{Ref: img.Ref, Digest: img.Digest, Platform: img.Platform, Config: img.Config}}
	out.key = layercache.BaseImageKey(b.Team, template.ImageCacheKey(img), envdSum)
	if dir, ok := m.cache.Lookup(out.key); ok && !plan.Force {
		out.dir = dir
		if acc, err := rootfs.ReadAccount(dir); err == nil {
			out.image.User = acc
		}
		m.logf(b.ID, "info", "base", "CACHED FROM image %s (%s)", plan.FromImage, img.Digest)
		return out, nil
	}
	m.logf(b.ID, "info", "base", "FROM image %s: unpacking %s (%d layers)", plan.FromImage, img.Digest, len(img.Layers))
	tree := filepath.Join(work, "base")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return base{}, fmt.Errorf("base layer: %w", err)
	}
	if out.image.User, err = template.UnpackImage(ctx, img, tree, 0, m.cfg.EnvdPath, m.log); err != nil {
		return base{}, fmt.Errorf("fromImage %s: %w", plan.FromImage, err)
	}
	out.dir, err = m.cache.Commit(out.key, tree)
	return out, err
}

// templateBase is baseLayer for fromTemplate.
func (m *Manager) templateBase(ctx context.Context, b store.Build, plan Plan, envdSum, work string) (base, error) {
	src, err := m.cfg.DB.GetTeamTemplate(ctx, b.Team, plan.FromTemplate)
	if err != nil {
		return base{}, fmt.Errorf("fromTemplate %s: %w", plan.FromTemplate, err)
	}
	var out base
	if out.cfg, err = m.cfg.DB.TemplateConfigOf(ctx, src.ID); err != nil {
		return base{}, err
	}
	if fi, err := os.Stat(src.RootfsDir); err != nil || !fi.IsDir() {
		return base{}, fmt.Errorf("fromTemplate %s: its root filesystem is missing: %w", plan.FromTemplate, errdefs.ErrNotFound)
	}
	id := layercache.TemplateIdentity{ID: src.ID, BuildID: src.BuildID, Stamp: stampOf(src.RootfsDir)}
	if strings.HasPrefix(id.Stamp, layerStampPrefix) {
		// Built here: its last layer names its content, so a fully cached
		// rebuild of it (a new build ID, the same tree) keeps this cache.
		id.BuildID = ""
	}
	out.key = layercache.BaseTemplateKey(b.Team, id, envdSum)
	if dir, ok := m.cache.Lookup(out.key); ok && !plan.Force {
		out.dir = dir
		m.logf(b.ID, "info", "base", "CACHED FROM template %s", plan.FromTemplate)
		return out, nil
	}
	m.logf(b.ID, "info", "base", "FROM template %s", plan.FromTemplate)
	tree := filepath.Join(work, "base")
	if err := template.CopyRootfs(ctx, src.RootfsDir, tree, m.cfg.EnvdPath); err != nil {
		return base{}, fmt.Errorf("fromTemplate %s: %w", plan.FromTemplate, err)
	}
	out.dir, err = m.cache.Commit(out.key, tree)
	return out, err
}

// layerStampPrefix starts the stamp's cache key of a template built here:
// "layer:<key of the chain>@<generation of its last layer>" (a forced
// rebuild makes a new generation under the same key).
const layerStampPrefix = "layer:"

// stampOf is the part of a template's stamp that changes with its rootfs
// (the stamp beside it, see template.Layout; "" without one): the cache
// key and envd's hash, and, for a template not built here, the build ID.
func stampOf(rootfs string) string {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(rootfs), "stamp.json"))
	if err != nil {
		return ""
	}
	var st struct{ CacheKey, BuildID, EnvdSHA256 string }
	if json.Unmarshal(b, &st) != nil {
		return ""
	}
	if strings.HasPrefix(st.CacheKey, layerStampPrefix) {
		return st.CacheKey + "/" + st.EnvdSHA256
	}
	return st.CacheKey + "/" + st.BuildID + "/" + st.EnvdSHA256
}

// runChain walks the steps over bs: every step extends the key chain; a
// RUN or COPY step reuses the layer of its key ("CACHED" in the log) or
// runs in a build sandbox over a copy of the layer before it. From the
// first forced step on (or from the base with the request's force)
// nothing is reused. It returns the last layer and the keys of the
// chain's layers; step names a failing step.
func (m *Manager) runChain(ctx context.Context, b store.Build, plan Plan, bs base, work string) (last layer, keys []string, step string, err error) {
	runs := make(map[int]RunStep, len(plan.Runs))
	for _, r := range plan.Runs {
		runs[r.Index] = r
	}
	forced, n := plan.Force, len(plan.Steps)
	last, keys = bs.layer, []string{bs.key}
	for i, st := range plan.Steps {
		idx := i + 1
		forced = forced || st.Force
		r, isRun := runs[idx]
		if !isRun {
			last.key = layercache.StepKey(last.key, layercache.StepInput{Type: st.Type, Args: st.Args})
			m.logf(b.ID, "info", fmt.Sprint(idx), "[%d/%d] %s %s", idx, n, st.Type, strings.Join(st.Args, " "))
			continue
		}
		e, in, err := m.resolveRun(b, r, bs.cfg)
		if err != nil {
			return layer{}, nil, fmt.Sprint(idx), err
		}
		key := layercache.StepKey(last.key, in)
		if dir, ok := m.cache.Lookup(key); ok && !forced {
			m.logf(b.ID, "info", fmt.Sprint(idx), "[%d/%d] CACHED %s", idx, n, e.Label)
			last, keys = layer{key: key, dir: dir}, append(keys, key)
			continue
		}
		m.logf(b.ID, "info", fmt.Sprint(idx), "[%d/%d] %s (as %s)", idx, n, e.Label, e.User)
		if last, err = m.runStep(ctx, b, last, key, r, e, work); err != nil {
			return layer{}, nil, fmt.Sprint(idx), err
		}
		keys = append(keys, key)
	}
	return last, keys, "", nil
}

// resolveRun resolves a RUN or COPY step over the base's config and
// returns its canonical form for the key chain (COPY: with the sha256 of
// the team's upload, errdefs.ErrInvalidArgument when there is none).
func (m *Manager) resolveRun(b store.Build, r RunStep, cfg store.TemplateConfig) (Exec, layercache.StepInput, error) {
	e := resolve(r, cfg)
	in := layercache.StepInput{Type: "RUN", Args: []string{r.Cmd}, User: e.User, Workdir: e.Workdir, Env: e.Env}
	if c := r.Copy; c != nil {
		sum, err := fileSHA256(FilesPath(m.cfg.DataDir, b.Team, c.Hash))
		if errors.Is(err, os.ErrNotExist) {
			return Exec{}, layercache.StepInput{}, fmt.Errorf("step %d (COPY): COPY %s: files %s were never uploaded: %w",
				r.Index, c.Src, c.Hash, errInvalid)
		}
		if err != nil {
			return Exec{}, layercache.StepInput{}, fmt.Errorf("step %d (COPY): %w", r.Index, err)
		}
		e.Kind, e.Label = "COPY", fmt.Sprintf("COPY %s %s", c.Src, c.Dest)
		in = layercache.StepInput{Type: "COPY", Args: []string{c.Src, c.Dest, fmt.Sprintf("%04o", uint32(c.Mode))},
			User: e.User, Workdir: e.Workdir, Env: e.Env, FilesSum: sum}
	}
	return e, in, nil
}

// runStep makes the layer of key: a hard-link copy of prev in work, the
// step's workdir made and (COPY) its archive staged in it, the step run in
// a build sandbox over it and its changes written into it, then
// committed. On failure the tree stays in work (removed with it).
func (m *Manager) runStep(ctx context.Context, b store.Build, prev layer, key string, r RunStep, e Exec, work string) (layer, error) {
	tree := filepath.Join(work, fmt.Sprintf("step-%d", r.Index))
	if err := layercache.LinkTree(ctx, prev.dir, tree); err != nil {
		return layer{}, fmt.Errorf("step %d: %w", r.Index, err)
	}
	if err := checkConfig(tree, store.TemplateConfig{Workdir: e.Workdir}); err != nil {
		return layer{}, fmt.Errorf("step %d: %w", r.Index, err)
	}
	if c := r.Copy; c != nil {
		gz, err := stageCopy(m.cfg.DataDir, b.Team, tree, c)
		if err != nil {
			return layer{}, fmt.Errorf("step %d (COPY): %w", r.Index, err)
		}
		e = Exec{Index: r.Index, Kind: "COPY", Label: e.Label, Cmd: copyScript(c, c.Dest, e.User, "/"+stageDir+"/"+c.Hash+".tar", gz),
			User: "root", Workdir: e.Workdir, Env: e.Env}
	}
	err := m.cfg.Runner.Run(ctx, tree, []Exec{e}, func(e Exec, stream, line string) {
		level := "info"
		if stream == "stderr" {
			level = "warn"
		}
		m.logf(b.ID, level, fmt.Sprint(e.Index), "%s", line)
	})
	if uerr := unstage(tree); uerr != nil && err == nil {
		err = fmt.Errorf("step %d: remove staged files: %w", r.Index, uerr)
	}
	if err != nil {
		return layer{}, err
	}
	dir, err := m.cache.Commit(key, tree)
	if err != nil {
		return layer{}, err
	}
	return layer{key: key, dir: dir}, nil
}
