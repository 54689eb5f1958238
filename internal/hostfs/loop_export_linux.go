package hostfs

// LoopMount attaches img to a free loop device that detaches itself once
// unmounted and mounts it on target (internal/volume mounts volume images
// with it).
func LoopMount(img, target, fstype string, flags uintptr) error {
	return loopMount(img, target, fstype, flags)
}
