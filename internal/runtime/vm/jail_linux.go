package vm

import (
	"errors"
	"os"

	"github.com/moatsh/moat/internal/idmap"
)

// Every QEMU runs jailed (see package launch and internal/jail) as the
// root ID of a host ID range of its own, recorded in the sandbox directory
// as idmap, so that resume and Recover find it.

// sandboxIDs returns the ID range recorded in sandbox directory dir,
// allocating one for a directory without (made by an older version).
func (r *Runtime) sandboxIDs(dir string) (idmap.Range, error) {
	ids, err := idmap.Read(dir)
	if err == nil {
		return ids, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return idmap.Range{}, err
	}
	return r.ids.Allocate(dir)
}
