// Package memfile keeps the files behind a microVM's RAM and disk cheap to
// hand out and to pause: spares (each template snapshot's sparse memory
// copy and disk overlay made ahead of the creates that need them, already
// written back to disk), a low-priority flusher that starts the writeback
// of running guests' memory files every few seconds, and the fdatasync
// helpers a pause or snapshot commits its files with.
//
// It exists apart from package vm because it only moves, copies and syncs
// files; it knows nothing of QEMU or of sandbox bookkeeping.
package memfile
