// Package upper writes what a build step changed into the step's layer.
//
// A RUN or COPY step runs in a sandbox whose root is an overlay over the
// layer before; the overlay's upper directory then holds the step's
// changes, owned by the sandbox's host ID range. Apply copies them into
// the new layer (owners shifted back, whiteouts and opaque directories
// honoured) through os.Root, so nothing the sandbox planted (symlinks,
// hard links, device nodes) leads outside the layer. It is its own
// package because it is the one place untrusted trees are read into a
// template, and it needs no part of the build's plan or cache.
package upper
