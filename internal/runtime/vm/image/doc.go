// Package image prepares the files a microVM boots and runs from: the
// guest kernel and its initramfs (moat-vminit and the virtio modules,
// packed as a cpio archive in Go), a template's read-only ext4 disk image,
// and qcow2 overlays over it (their size and backing chains read from the
// qcow2 header). It exists apart from package vm because it only deals
// with files on the host: no QEMU process, network or sandbox state.
package image
