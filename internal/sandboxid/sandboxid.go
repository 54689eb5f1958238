// Package sandboxid makes and checks sandbox IDs. The IDs name host objects
// (directories, cgroups, network namespaces, interfaces), so every package
// that derives such a name checks them the same way; a leaf package lets
// the network manager and the orchestrator do that without importing the
// runtime seam.
package sandboxid

import (
	"fmt"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/randid"
)

// Validate checks that id can name host objects: 1..maxLen characters of
// [a-z0-9]. Each user passes the longest ID its own names have room for.
func Validate(id string, maxLen int) error {
	if id == "" || len(id) > maxLen {
		return fmt.Errorf("sandbox id %q: length must be 1..%d: %w", id, maxLen, errdefs.ErrInvalidArgument)
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return fmt.Errorf("sandbox id %q: only [a-z0-9] allowed: %w", id, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// New is a new sandbox ID: "i" and 20 of [a-z0-9] (the orchestrator's, and
// a backend's for sandboxes it makes ahead).
func New() string { return "i" + randid.New(20) }
