package hostfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/idmap"
)

// volumesDir holds the volume mounts of a gVisor sandbox dir: runsc's
// gofer takes no idmap bind option (crun's), so Moat mounts an idmapped
// copy of each volume itself, <dir>/volumes/<i>, and the OCI spec binds
// that.
const volumesDir = "volumes"

// MountVolume attaches at <dir>/volumes/<i> a read-write idmapped copy
// (r's range, nosuid, nodev) of the volume's host mount src and returns
// its path: uid N of the sandbox (host r.Host+N) owns N's files on the
// volume, as a container's idmapped bind mount gives. UnmountAll unmounts
// it; RemoveDir refuses while it is mounted.
func MountVolume(dir string, i int, src string, r idmap.Range) (string, error) {
	target := filepath.Join(dir, volumesDir, strconv.Itoa(i))
	if err := os.MkdirAll(target, 0o755); err != nil {
		return "", fmt.Errorf("volume mount point: %w", err)
	}
	f, err := idmap.OpenTree(src, r, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := unix.MoveMount(int(f.Fd()), "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return "", fmt.Errorf("mount volume on %s: %w", target, err)
	}
	return target, nil
}

// volumeMountPoints are the entries of <dir>/volumes.
func volumeMountPoints(dir string) []string {
	ents, _ := os.ReadDir(filepath.Join(dir, volumesDir))
	var out []string
	for _, e := range ents {
		out = append(out, filepath.Join(volumesDir, e.Name()))
	}
	return out
}
