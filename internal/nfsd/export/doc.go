// Package export is one directory tree that Moat's NFS server (package
// nfsd) serves: its file handles and the file system operations of NFSv3
// done on it as the calling guest user.
//
// It exists apart from the protocol code because it is where the server
// touches the host: every rule that keeps a guest inside its volume is
// here, and its tests drive it without a network.
//
// File handles are the kernel's own (name_to_handle_at: for ext4 an inode
// number and generation), so a handle survives a restart of the server
// and never names a deleted file's successor. The server cannot open a
// handle directly (open_by_handle_at needs CAP_DAC_READ_SEARCH on the
// host), so it keeps where it last saw each handle (parent and name) and
// opens the path again for every operation, checking that the handle
// found there is the one asked for; a handle it does not know or no
// longer finds there is looked for by walking the tree (at most every
// couple of seconds), else it is stale.
//
// Containment: every path is resolved from the export's root with
// openat2's RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS
// and RESOLVE_NO_XDEV, and every last component with O_NOFOLLOW, so a
// symlink a guest (or any sharer of the volume) planted is served as a
// symlink and never followed: NFS clients resolve symlinks themselves.
// Names a client sends are single components (no "/", NUL, "." or "..").
// Device nodes are never created.
//
// Identity: an operation runs on a locked OS thread whose filesystem user
// and group IDs and supplementary groups are the caller's (setfsuid,
// setfsgid, setgroups on that thread only), so the host kernel checks
// permissions and sets owners exactly as for a process of that user: a
// file a guest creates as uid N is owned by N. Like knfsd, the owner of a
// file may read and write it whatever its mode bits (a client that
// created a file 0444 still writes its data). The process must hold
// CAP_SETUID, CAP_SETGID and the file capabilities in its user namespace;
// IDs outside 0..65535 are treated as nobody (65534).
package export
