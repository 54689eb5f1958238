// Package templatebuild is the client side of `moat template build
// --dockerfile` and `moat template rm`: it translates a Dockerfile into E2B
// build steps (internal/dockerfile), uploads COPY sources and builds the
// template on a running server through E2B's template REST API, with the
// routes, bodies and headers the SDKs' Template.build uses.
package templatebuild

import (
	"context"
	"io"
	"time"
)

// Options is one build of a Dockerfile on a server.
type Options struct {
	APIURL, APIKey string
	Dockerfile     string // path of the Dockerfile
	ContextDir     string // what COPY and ADD read from; "" is the Dockerfile's directory
	Name           string // template name
	CPU, MemoryMB  int    // 0: the server's default
	ReadyCmd       string // exits 0 once the start command is ready
	BuildArgs      map[string]string
	Force          bool          // skip the build cache
	Progress       io.Writer     // progress and build logs
	Poll           time.Duration // build status interval (default 500ms)
}

// Run builds o.Dockerfile as template o.Name and waits for the outcome;
// every local error (Dockerfile, context files) comes before a request.
func Run(ctx context.Context, o Options) error {
	ctxDir, err := contextDirOf(o.Dockerfile, o.ContextDir)
	if err != nil {
		return err
	}
	if o.Poll <= 0 {
		o.Poll = 500 * time.Millisecond
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	b := &dockerfileBuild{api: newTemplateAPI(o.APIURL, o.APIKey), path: o.Dockerfile, contextDir: ctxDir, name: o.Name,
		cpu: o.CPU, mem: o.MemoryMB, readyCmd: o.ReadyCmd, buildArgs: o.BuildArgs, force: o.Force,
		out: o.Progress, poll: o.Poll}
	return b.run(ctx)
}

// Delete deletes the template (or snapshot) idOrName of the API key's team.
func Delete(ctx context.Context, apiURL, apiKey, idOrName string) error {
	return newTemplateAPI(apiURL, apiKey).deleteTemplate(ctx, idOrName)
}
