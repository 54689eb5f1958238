// Package sparse copies files whose holes must stay holes (guest memory,
// disk images): copying them naively would write every zero and cost their
// full size in time and disk.
package sparse
