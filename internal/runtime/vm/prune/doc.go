// Package prune removes the template images and snapshots (under
// <DataDir>/vm/templates) that nothing needs any more, never one that a
// sandbox's or snapshot's disk still has on its qcow2 backing chain, one
// still being taken, or one touched recently. It exists apart from package
// vm because it is a pass over files on disk that shares no state with the
// running sandboxes: package vm tells it which templates are current.
package prune
