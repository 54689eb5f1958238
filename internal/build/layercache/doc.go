// Package layercache is the per-step layer cache of template builds,
// <DataDir>/cache/layers: full root filesystem trees named by a hash chain
// of their inputs (BaseImageKey, BaseTemplateKey, StepKey), committed once and never written after, shared
// between builds by hard-link copies (LinkTree), and collected by use, age,
// count and free disk space (Store.GC) unless a template still lists them
// (WriteRefs, Refs). It is its own package because it knows nothing of
// plans, steps or sandboxes: package build decides what a layer holds,
// this package only keeps layers safe to share (see package build's doc
// for the semantics).
package layercache
