package export

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// Attr is a file's attributes as NFSv3's fattr3 carries them.
type Attr struct {
	Mode         uint32 // type and permission bits (st_mode)
	Nlink        uint32
	UID, GID     uint32 // as the server's user namespace sees them
	Size, Used   uint64
	RdevMajor    uint32
	RdevMinor    uint32
	FileID       uint64
	Atime, Mtime unix.Timespec
	Ctime        unix.Timespec
}

// IsDir reports whether the attributes are a directory's.
func (a Attr) IsDir() bool { return a.Mode&unix.S_IFMT == unix.S_IFDIR }

func attrOf(st *unix.Stat_t) Attr {
	return Attr{Mode: st.Mode, Nlink: uint32(st.Nlink), UID: st.Uid, GID: st.Gid, Size: uint64(st.Size),
		Used: uint64(st.Blocks) * 512, RdevMajor: unix.Major(st.Rdev), RdevMinor: unix.Minor(st.Rdev),
		FileID: st.Ino, Atime: st.Atim, Mtime: st.Mtim, Ctime: st.Ctim}
}

// fstat reads the attributes of an open descriptor (O_PATH too).
func fstat(fd int) (Attr, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Attr{}, err
	}
	return attrOf(&st), nil
}

// statAt reads name's attributes in directory dir without following it.
func statAt(dir int, name string) (Attr, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Attr{}, err
	}
	return attrOf(&st), nil
}

// dirent is one getdents64 record.
type dirent struct {
	ino  uint64
	off  int64 // the position after it: the NFS cookie
	typ  uint8
	name string
}

// parseDirents splits a getdents64 buffer into its records.
func parseDirents(b []byte) []dirent {
	var out []dirent
	for len(b) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < 19 || reclen > len(b) {
			break
		}
		name := b[19:reclen]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		out = append(out, dirent{ino: binary.NativeEndian.Uint64(b[0:8]), off: int64(binary.NativeEndian.Uint64(b[8:16])),
			typ: b[18], name: string(name)})
		b = b[reclen:]
	}
	return out
}
