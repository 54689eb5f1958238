// Package build runs E2B template builds (the SDKs' Template.build): it
// compiles the steps the SDK sends into a Plan, then, in the background,
// makes the template's root filesystem from cached or new layers and
// registers the template for the build's team. Each build keeps a log (in
// memory) the SDK polls.
//
// Steps:
//   - ENV, WORKDIR, USER set the template's process defaults
//     (store.TemplateConfig); the orchestrator hands them to envd's /init
//     at every create and resume, under the create's own envVars.
//   - RUN and COPY run one by one, each in its own build sandbox (a
//     Runner; in Moat a SandboxRunner over the container runtime: the
//     same isolation as any sandbox, never the host) whose root is an
//     overlay over the layer before. RUN runs as the step's user (else
//     USER's, else "user") in WORKDIR (else the user's home) with ENV.
//     COPY unpacks the archive the SDK uploaded (see FilesPath) inside
//     the sandbox and copies it like Docker's COPY, owned by the step's
//     user. When the step exits 0 the sandbox is frozen and its writable
//     layer is written into the step's layer (upper.Apply: owners shifted
//     back, whiteouts and opaque dirs honoured, everything through
//     os.Root).
//   - startCmd and readyCmd are stored with the template; the
//     orchestrator runs them through envd at each create, on any runtime.
//
// Layer cache (E2B's semantics; package layercache keeps it). Each layer
// is a full root filesystem tree under <DataDir>/cache/layers, keyed by a
// hash chain: key0 names
// the base (an image: team, manifest digest, platform, what
// rootfs.FinalizeImage adds, envd's sha256; a template: team, its ID,
// build ID and stamp, envd's sha256), and each step's key hashes the
// previous key with the step's canonical form: its type and arguments
// and, for RUN and COPY, the effective user, workdir and environment and
// (COPY) the sha256 of the uploaded archive. ENV, WORKDIR and USER only
// extend the chain. A RUN or COPY whose key has a layer is not run: the
// log says "[i/n] CACHED <step>" (e.g. "[2/4] CACHED RUN apt-get install
// -y curl"). A step with force (the SDK's skipCache marks the next step)
// and every step after it run again, and the request's force rebuilds
// from the base on; their new layers replace the cached ones. Layers are
// never shared between teams.
//
// A new layer is a hard-link copy (cp -al) of the one before with one
// step's changes applied, and the template's rootfs is a hard-link copy of
// the last layer, swapped in by template.Install. So no writer may ever
// write into an existing file's inode there: upper.Apply, stageCopy and
// rootfs.Finalize, FinalizeImage and InstallFile unlink and create (or
// rename), and change owners and modes of directories only, which copies
// do not share (TestLayersNeverWrittenThrough fails otherwise).
//
// What is kept and when it goes (GC, at New and after every build, and
// never while a build in any process holds the cache's lock):
//   - the layers a template was built from (listed in its directory's
//     layers.json) stay as long as the template's directory exists;
//   - other layers stay while used within Config.LayerMaxAge (7 days);
//     the least recently used of them go beyond Config.MaxLayers (100),
//     and while the filesystem has less than Config.LayerMinFree (10 %)
//     of its space free (layers share unchanged files, so their count
//     says little about their size);
//   - replaced layers (after force) and the work directories of builds
//     that no longer run go at once.
//
// A failing build leaves nothing: its work directory (the failing step's
// tree, the template's copy) is removed before the failure is recorded,
// and the steps that succeeded before it stay cached (as unreferenced
// layers) for the fixed build. Nothing half-built is registered: the
// rootfs replaces the template's only when every step succeeded, and the
// store's row changes in the same transaction that marks the build
// ready. Refused before a build starts (errdefs.ErrNotImplemented):
// RUN/COPY without a Runner (the vm runtime), fromImageRegistry of type
// aws/gcp.
package build
