// Package volume keeps teams' volumes on the host: one sparse ext4 image
// per volume, <data>/volumes/<id>/image.ext4, whose size is the volume's
// quota, loop-mounted on <data>/volumes/<id>/mnt while something uses it
// (the volume content API, or sandboxes that mount it).
//
// A volume is mounted on the host on first use (a content API request or a
// sandbox that mounts it) and stays mounted until it is deleted or the
// server stops with nothing holding it: never unmounted and mounted again
// while the server runs, because a sandbox's bind mount keeps the first
// filesystem instance alive after a host unmount, and a second loop mount
// of the same image would be a second ext4 instance on it (corruption).
// Holders are counted so that delete refuses a volume in use. Every
// path a caller passes is resolved under the mount with openat2's
// RESOLVE_IN_ROOT and RESOLVE_NO_SYMLINKS (see Resolve): a sandbox that
// mounts the volume can plant symlinks and ".." tricks in it, and the
// content API, which runs as root on the host, must never follow them.
//
// The records (name, team, size, token) are the store's; this package only
// knows volume IDs.
package volume
