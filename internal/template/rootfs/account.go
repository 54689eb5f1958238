package rootfs

import (
	"errors"
	"fmt"
	"github.com/moatsh/moat/internal/errdefs"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// baseDirs must exist in every rootfs: mount points the runtimes use and
// the usual writable places. Images (e.g. distroless ones) may lack some.
var baseDirs = []struct {
	name string
	mode fs.FileMode
}{
	{"etc", 0o755}, {"proc", 0o555}, {"sys", 0o555}, {"dev", 0o755}, {"run", 0o755},
	{"tmp", 0o777 | fs.ModeSticky}, {"root", 0o700}, {"home", 0o755}, {"usr/local/bin", 0o755},
}

// FinalizeImage makes an unpacked image a sandbox rootfs without running
// anything in it (it may have no shell or package manager): base
// directories, static files, envd and the sandbox user. It is idempotent.
func FinalizeImage(dir, envdPath string) (Account, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Account{}, fmt.Errorf("Finalize rootfs: %w", err)
	}
	defer root.Close()
	for _, d := range baseDirs {
		if _, err := root.Lstat(d.name); err == nil {
			continue
		}
		if err := root.MkdirAll(d.name, 0o755); err != nil {
			return Account{}, fmt.Errorf("Finalize rootfs: %w", err)
		}
		if err := root.Chmod(d.name, d.mode); err != nil {
			return Account{}, fmt.Errorf("Finalize rootfs: %w", err)
		}
	}
	for _, f := range staticFiles {
		if err := writeFile(root, f.name, []byte(f.data), 0o644); err != nil {
			return Account{}, fmt.Errorf("Finalize rootfs: %w", err)
		}
	}
	if err := InstallFile(root, EnvdPathInRootfs, envdPath, 0o755); err != nil {
		return Account{}, fmt.Errorf("Finalize rootfs: %w", err)
	}
	acc, err := ensureUser(root)
	if err != nil {
		return Account{}, fmt.Errorf("Finalize rootfs: sandbox user: %w", err)
	}
	return acc, nil
}

// ensureUser adds SandboxUser to /etc/passwd, /etc/group, /etc/shadow (and
// /etc/gshadow when present), creating the files when the image has none,
// gives it /home/user and, when sudo is installed, passwordless sudo. An
// existing account of that name is kept as it is. A new one gets uid and
// gid 1000, or the next free ids when taken.
func ensureUser(root *os.Root) (Account, error) {
	passwd, err := readDB(root, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\n")
	if err != nil {
		return Account{}, err
	}
	group, err := readDB(root, "etc/group", "root:x:0:\n")
	if err != nil {
		return Account{}, err
	}
	acc := Account{Name: SandboxUser, Shell: loginShell(root)}
	if u, ok := passwd.find(SandboxUser); ok {
		acc.UID, acc.GID = u.id, u.gid
		if f := strings.Split(u.line, ":"); len(f) == 7 {
			acc.Shell = f[6]
		}
	} else {
		acc.UID = passwd.freeID(1000)
		acc.GID = acc.UID
		if g, ok := group.find(SandboxUser); ok {
			acc.GID = g.id
		} else if group.hasID(acc.GID) {
			acc.GID = group.freeID(1000)
		}
		passwd.add(fmt.Sprintf("%s:x:%d:%d:%s:/home/%s:%s", SandboxUser, acc.UID, acc.GID, SandboxUser, SandboxUser, acc.Shell))
	}
	if _, ok := group.find(SandboxUser); !ok {
		group.add(fmt.Sprintf("%s:x:%d:", SandboxUser, acc.GID))
	}
	days := time.Now().Unix() / 86400
	shadow, err := readDB(root, "etc/shadow", fmt.Sprintf("root:*:%d:0:99999:7:::\n", days))
	if err != nil {
		return Account{}, err
	}
	if _, ok := shadow.find(SandboxUser); !ok {
		// "!": no password login; envd and sudo NOPASSWD need none.
		shadow.add(fmt.Sprintf("%s:!:%d:0:99999:7:::", SandboxUser, days))
	}
	shadowGID := 0
	if g, ok := group.find("shadow"); ok {
		shadowGID = g.id
	}
	for _, db := range []struct {
		d    *db
		mode fs.FileMode
		gid  int
	}{{passwd, 0o644, 0}, {group, 0o644, 0}, {shadow, 0o640, shadowGID}} {
		if err := db.d.write(root, db.mode, db.gid); err != nil {
			return Account{}, err
		}
	}
	if _, err := root.Lstat("etc/gshadow"); err == nil {
		gshadow, err := readDB(root, "etc/gshadow", "")
		if err != nil {
			return Account{}, err
		}
		if _, ok := gshadow.find(SandboxUser); !ok {
			gshadow.add(SandboxUser + ":!::")
			if err := gshadow.write(root, 0o640, shadowGID); err != nil {
				return Account{}, err
			}
		}
	}
	if exists(root, "usr/bin/sudo") || exists(root, "bin/sudo") {
		if err := root.MkdirAll("etc/sudoers.d", 0o755); err != nil {
			return Account{}, err
		}
		if err := writeFile(root, "etc/sudoers.d/"+SandboxUser,
			[]byte(SandboxUser+" ALL=(ALL:ALL) NOPASSWD: ALL\n"), 0o440); err != nil {
			return Account{}, err
		}
	}
	home := "home/" + SandboxUser
	if err := root.MkdirAll(home, 0o750); err != nil {
		return Account{}, err
	}
	if fi, err := root.Lstat(home); err == nil && fi.IsDir() { // never a shared inode (see Finalize)
		if err := root.Lchown(home, acc.UID, acc.GID); err != nil {
			return Account{}, err
		}
	}
	return acc, nil
}

// loginShell is bash when the image has it, else sh.
func loginShell(root *os.Root) string {
	for _, sh := range []string{"bin/bash", "usr/bin/bash"} {
		if exists(root, sh) {
			return "/" + sh
		}
	}
	return "/bin/sh"
}

// exists reports whether name is present (a symlink counts, wherever it
// points: images use absolute links that os.Root will not follow).
func exists(root *os.Root, name string) bool {
	_, err := root.Lstat(name)
	if err != nil {
		// A parent may be a symlink (/bin -> usr/bin); Stat follows it.
		_, err = root.Stat(name)
	}
	return err == nil
}

// db is a colon-separated account database (passwd, group, shadow).
type db struct {
	name    string
	text    string // as read, ending in a newline unless empty
	entries []dbEntry
	changed bool
}

type dbEntry struct {
	name    string
	id, gid int // passwd: uid, gid; group: gid; -1 when absent
	line    string
}

// readDB reads name from root; when it does not exist, the database starts
// as def.
func readDB(root *os.Root, name, def string) (*db, error) {
	b, err := root.ReadFile(name)
	d := &db{name: name}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		b, d.changed = []byte(def), true
	case err != nil:
		return nil, err
	}
	d.text = string(b)
	if d.text != "" && !strings.HasSuffix(d.text, "\n") {
		d.text += "\n"
	}
	d.entries = parseDB(d.text)
	return d, nil
}

// parseDB parses the lines of an account database. Comments, blank lines
// and NIS "+"/"-" lines are not entries; malformed ids read as -1.
func parseDB(text string) []dbEntry {
	var out []dbEntry
	for line := range strings.SplitSeq(text, "\n") {
		if line == "" || line[0] == '#' || line[0] == '+' || line[0] == '-' {
			continue
		}
		f := strings.Split(line, ":")
		e := dbEntry{name: f[0], id: -1, gid: -1, line: line}
		if len(f) > 2 {
			if n, err := strconv.Atoi(f[2]); err == nil && n >= 0 {
				e.id = n
			}
		}
		if len(f) > 3 {
			if n, err := strconv.Atoi(f[3]); err == nil && n >= 0 {
				e.gid = n
			}
		}
		out = append(out, e)
	}
	return out
}

func (d *db) find(name string) (dbEntry, bool) {
	for _, e := range d.entries {
		if e.name == name {
			return e, true
		}
	}
	return dbEntry{}, false
}

func (d *db) hasID(id int) bool {
	for _, e := range d.entries {
		if e.id == id {
			return true
		}
	}
	return false
}

// freeID is the smallest id >= from no entry uses.
func (d *db) freeID(from int) int {
	id := from
	for d.hasID(id) {
		id++
	}
	return id
}

func (d *db) add(line string) {
	d.text += line + "\n"
	d.entries = append(d.entries, parseDB(line)...)
	d.changed = true
}

// write replaces the file when it changed (never through a symlink).
func (d *db) write(root *os.Root, mode fs.FileMode, gid int) error {
	if !d.changed {
		return nil
	}
	if fi, err := root.Lstat(d.name); err == nil && fi.Mode().IsRegular() {
		mode = fi.Mode().Perm()
	}
	if err := writeFile(root, d.name, []byte(d.text), mode); err != nil {
		return err
	}
	if err := root.Chmod(d.name, mode); err != nil { // WriteFile is subject to umask
		return err
	}
	return root.Lchown(d.name, 0, gid)
}

// Account is the sandbox user of a template.
type Account struct {
	Name  string `json:"name"`
	UID   int    `json:"uid"`
	GID   int    `json:"gid"`
	Shell string `json:"shell"`
}

// SandboxUser is the unprivileged account every template provides; E2B SDKs
// default to it.
const SandboxUser = "user"

// ReadAccount returns the sandbox user's account as the rootfs at dir
// records it (errdefs.ErrNotFound when it has none).
func ReadAccount(dir string) (Account, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Account{}, fmt.Errorf("open rootfs: %w", err)
	}
	defer root.Close()
	passwd, err := readDB(root, "etc/passwd", "")
	if err != nil {
		return Account{}, fmt.Errorf("read /etc/passwd: %w", err)
	}
	u, ok := passwd.find(SandboxUser)
	if !ok {
		return Account{}, fmt.Errorf("no %s account in /etc/passwd: %w", SandboxUser, errdefs.ErrNotFound)
	}
	acc := Account{Name: SandboxUser, UID: u.id, GID: u.gid}
	if f := strings.Split(u.line, ":"); len(f) == 7 {
		acc.Shell = f[6]
	}
	return acc, nil
}
