// Package users resolves the OS accounts that envd runs commands and creates
// files as. Inside a sandbox names come from /etc/passwd; in host mode (envd
// run as a plain process for its own tests) the sandbox's two well-known
// accounts, root and user, both map to the account envd runs as, with a
// chosen home directory, so that tests need no privileges and no rootfs.
package users

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"

	"github.com/moatsh/moat/internal/errdefs"
)

// User is a resolved OS account.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups
	Home   string
}

// IsCurrent reports whether commands for u can run without changing
// credentials.
func (u *User) IsCurrent() bool {
	return int(u.UID) == os.Getuid() && int(u.GID) == os.Getgid()
}

// Resolver looks users up by name.
type Resolver struct {
	hostMode bool
	hostHome string

	mu    sync.Mutex
	cache map[string]*User
}

// NewResolver returns a resolver reading the system account database.
func NewResolver() *Resolver { return &Resolver{cache: map[string]*User{}} }

// NewHostResolver returns a resolver for host mode: "root" and "user" are the
// current account with home directory home; other names come from the system.
func NewHostResolver(home string) *Resolver {
	return &Resolver{hostMode: true, hostHome: home, cache: map[string]*User{}}
}

// Lookup returns the account called name. An unknown name is an error of
// kind errdefs.ErrUnauthenticated, as envd answers "invalid username".
func (r *Resolver) Lookup(name string) (*User, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u, ok := r.cache[name]; ok {
		return u, nil
	}
	u, err := r.lookup(name)
	if err != nil {
		return nil, err
	}
	r.cache[name] = u
	return u, nil
}

func (r *Resolver) lookup(name string) (*User, error) {
	if name == "" {
		return nil, errdefs.Publicf(errdefs.ErrUnauthenticated, "invalid username: ''")
	}
	if r.hostMode && (name == "root" || name == "user") {
		cur, err := user.Current()
		if err != nil {
			return nil, fmt.Errorf("current user: %w", err)
		}
		u, err := fromOS(cur)
		if err != nil {
			return nil, err
		}
		u.Name = name
		u.Home = r.hostHome
		return u, nil
	}
	osu, err := user.Lookup(name)
	if err != nil {
		return nil, errdefs.Publicf(errdefs.ErrUnauthenticated, "invalid username: '%s'", name)
	}
	return fromOS(osu)
}

func fromOS(osu *user.User) (*User, error) {
	uid, err := strconv.ParseUint(osu.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", osu.Username, osu.Uid, err)
	}
	gid, err := strconv.ParseUint(osu.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", osu.Username, osu.Gid, err)
	}
	u := &User{Name: osu.Username, UID: uint32(uid), GID: uint32(gid), Home: osu.HomeDir}
	if ids, err := osu.GroupIds(); err == nil {
		for _, g := range ids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				u.Groups = append(u.Groups, uint32(n))
			}
		}
	}
	return u, nil
}

// NameOfUID returns the account name for uid, or the number as a string.
func NameOfUID(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return u.Username
	}
	return strconv.FormatUint(uint64(uid), 10)
}

// NameOfGID returns the group name for gid, or the number as a string.
func NameOfGID(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10)); err == nil {
		return g.Name
	}
	return strconv.FormatUint(uint64(gid), 10)
}

// UsernameFromHeader returns the user an RPC selects with
// "Authorization: Basic base64(<user>:)"; ok is false when the header is
// absent (the default user applies). A malformed header is unauthenticated.
func UsernameFromHeader(h http.Header) (name string, ok bool, err error) {
	v := h.Get("Authorization")
	if v == "" {
		return "", false, nil
	}
	const prefix = "Basic "
	if len(v) < len(prefix) || !strings.EqualFold(v[:len(prefix)], prefix) {
		return "", false, errdefs.Publicf(errdefs.ErrUnauthenticated, "authorization header is not Basic")
	}
	raw, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(v[len(prefix):]))
	if derr != nil {
		return "", false, errdefs.Publicf(errdefs.ErrUnauthenticated, "authorization header: %v", derr)
	}
	name, _, _ = strings.Cut(string(raw), ":")
	if name == "" {
		return "", false, errdefs.Publicf(errdefs.ErrUnauthenticated, "invalid username: ''")
	}
	return name, true, nil
}

// Select resolves the user of a request: the Basic-auth user if present,
// else def.
func (r *Resolver) Select(h http.Header, def string) (*User, error) {
	name, ok, err := UsernameFromHeader(h)
	if err != nil {
		return nil, err
	}
	if !ok {
		name = def
	}
	return r.Lookup(name)
}
