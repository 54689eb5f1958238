// Package vmbench measures the floors under the vm runtime's sandbox
// starts, outside any server: a template's cold boot against a restore of
// its snapshot into a QEMU started by hand, phase by phase (MeasureStart),
// and creates with and without the QEMU jail (CompareJail). `moat bench`
// prints them.
//
// It exists apart from package vm because none of it is needed to run
// sandboxes; it drives a vm.Runtime's parts (vm.Runtime.Parts) in a
// network scope of its own, so a running server's objects are never
// touched.
package vmbench
