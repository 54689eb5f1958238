package templatebuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/dockerfile"
)

// dockerfileBuild is `moat template build --dockerfile`: the Dockerfile is
// translated locally (internal/dockerfile) and built by a running server
// through the REST API, exactly as the SDKs' Template.build does it.
type dockerfileBuild struct {
	api        *templateAPI
	path       string // the Dockerfile
	contextDir string
	name       string
	cpu, mem   int
	readyCmd   string
	buildArgs  map[string]string
	force      bool
	out        io.Writer // progress and build logs
	poll       time.Duration
}

// prepared is a translated Dockerfile with its COPY sources resolved.
type prepared struct {
	tpl   *dockerfile.Template
	steps []stepBody
	files map[int]*contextFiles // by step index
}

// prepare parses the Dockerfile and hashes every COPY source: all local
// errors come out before anything is sent.
func (b *dockerfileBuild) prepare() (*prepared, error) {
	f, err := os.Open(b.path)
	if err != nil {
		return nil, fmt.Errorf("dockerfile: %w", err)
	}
	defer f.Close()
	tpl, err := dockerfile.Parse(f, b.buildArgs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.path, err)
	}
	ignore, err := readDockerignore(b.contextDir)
	if err != nil {
		return nil, err
	}
	p := &prepared{tpl: tpl, files: map[int]*contextFiles{}}
	for i, s := range tpl.Steps {
		sb := stepBody{Type: s.Type, Args: s.Args, Force: b.force}
		if s.Type == "COPY" {
			cf, err := collectFiles(b.contextDir, s.Args[0], s.Args[1], ignore)
			if err != nil {
				return nil, fmt.Errorf("%s line %d: %w", b.path, s.Line, err)
			}
			sb.FilesHash = cf.hash
			p.files[i] = cf
		}
		p.steps = append(p.steps, sb)
	}
	return p, nil
}

// run builds the template and waits for the outcome.
func (b *dockerfileBuild) run(ctx context.Context) error {
	p, err := b.prepare()
	if err != nil {
		return err
	}
	start := buildStart{StartCmd: p.tpl.StartCmd, ReadyCmd: b.readyCmd, Force: b.force, Steps: p.steps}
	isTpl, err := b.api.templateExists(ctx, p.tpl.From)
	if err != nil {
		return fmt.Errorf("FROM %s: %w", p.tpl.From, err)
	}
	if isTpl {
		start.FromTemplate = p.tpl.From
	} else {
		start.FromImage = p.tpl.From
	}
	req := buildRequest{Name: b.name}
	if b.cpu > 0 {
		c := int32(b.cpu)
		req.CPUCount = &c
	}
	if b.mem > 0 {
		m := int32(b.mem)
		req.MemoryMB = &m
	}
	ids, err := b.api.requestBuild(ctx, req)
	if err != nil {
		return fmt.Errorf("request build: %w", err)
	}
	fmt.Fprintf(b.out, "template %s: ID %s, build %s\n", b.name, ids.TemplateID, ids.BuildID)
	if err := b.uploadAll(ctx, ids, p); err != nil {
		return err
	}
	if err := b.api.startBuild(ctx, ids, start); err != nil {
		return fmt.Errorf("start build: %w", err)
	}
	return b.wait(ctx, ids, p)
}

// uploadAll uploads the COPY sources the server does not have yet.
func (b *dockerfileBuild) uploadAll(ctx context.Context, ids buildIDs, p *prepared) error {
	done := map[string]bool{}
	for i, s := range p.tpl.Steps {
		cf := p.files[i]
		if cf == nil || done[cf.hash] {
			continue
		}
		done[cf.hash] = true
		link, err := b.api.filesLink(ctx, ids.TemplateID, cf.hash)
		if err != nil {
			return fmt.Errorf("COPY %s (line %d): %w", s.Args[0], s.Line, err)
		}
		if link.Present && !b.force {
			fmt.Fprintf(b.out, "COPY %s: already uploaded\n", s.Args[0])
			continue
		}
		if err := b.uploadOne(ctx, link.URL, cf); err != nil {
			return fmt.Errorf("COPY %s (line %d): %w", s.Args[0], s.Line, err)
		}
		fmt.Fprintf(b.out, "COPY %s: uploaded %d file(s), %s\n", s.Args[0], len(cf.rel), HumanBytes(cf.Bytes))
	}
	return nil
}

func (b *dockerfileBuild) uploadOne(ctx context.Context, url string, cf *contextFiles) error {
	if url == "" {
		return errors.New("the server handed out no upload URL")
	}
	arch, err := cf.archive()
	if err != nil {
		return err
	}
	defer os.Remove(arch)
	return b.api.upload(ctx, url, arch)
}

// wait polls the build's status with logsOffset, as the SDK does, and
// shows its progress and logs until it is ready or failed.
func (b *dockerfileBuild) wait(ctx context.Context, ids buildIDs, p *prepared) error {
	pr := newBuildProgress(b.out, p.tpl.Steps)
	defer pr.close()
	pr.expect, _ = b.api.lastBuild(ctx, ids.TemplateID, ids.BuildID)
	offset := 0
	for {
		st, err := b.api.status(ctx, ids, offset)
		if err != nil {
			return fmt.Errorf("build status: %w", err)
		}
		offset += len(st.LogEntries)
		for _, e := range st.LogEntries {
			pr.entry(e)
		}
		switch st.Status {
		case "ready":
			if len(st.LogEntries) > 0 {
				continue // drain the tail of the log first
			}
			pr.finish(fmt.Sprintf("template %s built (ID %s)", b.name, ids.TemplateID))
			return nil
		case "error":
			if len(st.LogEntries) > 0 {
				continue
			}
			msg, step := "unknown error", ""
			if st.Reason != nil {
				msg, step = st.Reason.Message, st.Reason.Step
			}
			return fmt.Errorf("build of %s failed at %s: %s", b.name, describeStep(step, p.tpl.Steps), msg)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for build %s: %w (the build goes on in the server)", ids.BuildID, ctx.Err())
		case <-time.After(b.poll):
		}
	}
}

// describeStep names a build step as the user wrote it: the server counts
// "base", "1".."n" and "finalize".
func describeStep(step string, steps []dockerfile.Step) string {
	n, err := strconv.Atoi(step)
	switch {
	case step == "":
		return "an unknown step"
	case err != nil:
		return "step " + step
	case n < 1 || n > len(steps):
		return "step " + step
	}
	s := steps[n-1]
	where := "added by moat"
	if s.Line > 0 {
		where = fmt.Sprintf("Dockerfile line %d", s.Line)
	}
	return fmt.Sprintf("step %d/%d (%s: %s)", n, len(steps), where, truncate(s.Type+" "+strings.Join(s.Args, " "), 80))
}

func truncate(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// HumanBytes formats a size as the CLI prints sizes (B, KiB, MiB, GiB).
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// contextDirOf is --context, defaulting to the Dockerfile's directory.
func contextDirOf(dockerfilePath, ctxFlag string) (string, error) {
	dir := ctxFlag
	if dir == "" {
		dir = filepath.Dir(dockerfilePath)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("context %s: not a directory", dir)
	}
	return abs, nil
}
