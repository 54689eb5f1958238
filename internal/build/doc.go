// Package build runs E2B template builds (the SDKs' Template.build): it
// compiles the steps the SDK sends into a Plan, then, in the background,
// makes the template's root filesystem from its base (a copy of another
// template's, or an OCI image through template.BuildFromImage), runs the
// steps and registers the template for the build's team. Each build keeps
// a log (in memory) the SDK polls.
//
// Steps:
//   - ENV, WORKDIR, USER set the template's process defaults
//     (store.TemplateConfig); the orchestrator hands them to envd's /init
//     at every create and resume, under the create's own envVars.
//   - RUN and COPY run in order in one build sandbox (a Runner; in Moat a
//     SandboxRunner over the container runtime: the same isolation as any
//     sandbox, never the host) whose root is an overlay over the new
//     rootfs. RUN runs as the step's user (else USER's, else "user") in
//     WORKDIR (else the user's home) with ENV. COPY unpacks the archive
//     the SDK uploaded (see FilesPath) inside the sandbox and copies it
//     like Docker's COPY, owned by the step's user. When every step exits
//     0 the sandbox is frozen and its writable layer is written into the
//     rootfs (applyUpper: owners shifted back, whiteouts and opaque dirs
//     honoured, everything through os.Root).
//
// Nothing half-built is registered: the rootfs replaces the template's
// only when every step succeeded, and the store's row changes in the
// same transaction that marks the build ready. Refused before a build
// starts (errdefs.ErrNotImplemented): startCmd/readyCmd, RUN/COPY without
// a Runner (the vm runtime), fromImageRegistry of type aws/gcp.
// Not done: per-step caching (every build runs every step; force and
// skipCache are accepted and change nothing but the image cache).
package build
