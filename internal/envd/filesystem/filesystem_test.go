package filesystem

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/api/envd/filesystem"
	"github.com/moatsh/moat/api/envd/filesystem/filesystemconnect"
	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/envd/users"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/testkit"
)

type testEnv struct {
	home string
	url  string
	svc  *Service
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	home := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := NewService(state.New(nil), users.NewHostResolver(home), log)
	path, h := svc.Handler()
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(svc.Close) // runs first: ends streams before the server waits on them
	return &testEnv{home: home, url: srv.URL, svc: svc}
}

var codecs = []struct {
	name string
	opts []connect.ClientOption
}{
	{"binary", nil},
	{"json", []connect.ClientOption{connect.WithProtoJSON()}},
}

// forCodecs runs f once per codec with a client of a fresh environment.
func forCodecs(t *testing.T, f func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient)) {
	for _, cd := range codecs {
		t.Run(cd.name, func(t *testing.T) {
			env := newTestEnv(t)
			f(t, env, filesystemconnect.NewFilesystemClient(http.DefaultClient, env.url, cd.opts...))
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func asUser[T any](msg *T, name string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(name+":")))
	return req
}

func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", code)
	}
	if got := connect.CodeOf(err); got != code {
		t.Fatalf("got code %v (%v), want %v", got, err, code)
	}
}

func writeFile(t *testing.T, path, data string, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestStat(t *testing.T) {
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		ctx := ctxT(t)
		file := filepath.Join(env.home, "f.txt")
		writeFile(t, file, "hello", 0o644)
		xattrs := unix.Setxattr(file, "user.e2b.color", []byte("blue"), 0) == nil
		_ = unix.Setxattr(file, "user.other", []byte("x"), 0)
		dir := filepath.Join(env.home, "d")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		mustSymlink(t, "f.txt", filepath.Join(env.home, "lf"))
		mustSymlink(t, dir, filepath.Join(env.home, "ld"))
		mustSymlink(t, "nowhere", filepath.Join(env.home, "dangling"))
		owner := users.NameOfUID(uint32(os.Getuid()))

		tests := []struct {
			path, wantPath, wantPerm string
			wantType                 filesystem.FileType
			wantMode                 uint32
			wantTarget               string
		}{
			{file, file, "-rw-r--r--", filesystem.FileType_FILE_TYPE_FILE, 0o644, ""},
			{"f.txt", file, "-rw-r--r--", filesystem.FileType_FILE_TYPE_FILE, 0o644, ""},
			{"~/f.txt", file, "-rw-r--r--", filesystem.FileType_FILE_TYPE_FILE, 0o644, ""},
			{dir, dir, "drwxr-xr-x", filesystem.FileType_FILE_TYPE_DIRECTORY, 0o755, ""},
			// A symlink has the target's mode bits (0 when it dangles), as in
			// E2B's stat_test.go, but its own permissions string.
			{"lf", filepath.Join(env.home, "lf"), "Lrwxrwxrwx", filesystem.FileType_FILE_TYPE_FILE, 0o644, file},
			{"ld", filepath.Join(env.home, "ld"), "Lrwxrwxrwx", filesystem.FileType_FILE_TYPE_DIRECTORY, 0o755, dir},
			{"dangling", filepath.Join(env.home, "dangling"), "Lrwxrwxrwx", filesystem.FileType_FILE_TYPE_UNSPECIFIED, 0, filepath.Join(env.home, "nowhere")},
		}
		for _, tt := range tests {
			res, err := c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: tt.path}))
			if err != nil {
				t.Fatalf("Stat(%q): %v", tt.path, err)
			}
			e := res.Msg.GetEntry()
			if e.GetPath() != tt.wantPath || e.GetName() != filepath.Base(tt.wantPath) || e.GetType() != tt.wantType ||
				e.GetPermissions() != tt.wantPerm || e.GetMode() != tt.wantMode || e.GetOwner() != owner || e.GetGroup() == "" {
				t.Errorf("Stat(%q) = %v", tt.path, e)
			}
			if e.GetSymlinkTarget() != tt.wantTarget || (tt.wantTarget != "") != (e.SymlinkTarget != nil) {
				t.Errorf("Stat(%q) target = %v, want %q", tt.path, e.SymlinkTarget, tt.wantTarget)
			}
			if d := time.Since(e.GetModifiedTime().AsTime()); d < 0 || d > time.Minute {
				t.Errorf("Stat(%q) mtime %v", tt.path, e.GetModifiedTime().AsTime())
			}
		}
		res, err := c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: file}))
		if err != nil {
			t.Fatal(err)
		}
		if e := res.Msg.GetEntry(); e.GetSize() != 5 {
			t.Errorf("size = %d", e.GetSize())
		} else if md := e.GetMetadata(); xattrs && (len(md) != 1 || md["color"] != "blue") {
			t.Errorf("metadata = %v", md)
		}
		// As in E2B, a symlink reports its target's metadata.
		res, err = c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "lf"}))
		if err != nil {
			t.Fatal(err)
		}
		if md := res.Msg.GetEntry().GetMetadata(); xattrs && md["color"] != "blue" {
			t.Errorf("symlink metadata = %v", md)
		}
	})
}

// TestMetadataNotUTF8: metadata set inside the sandbox with bytes that are
// not UTF-8 is left out instead of failing Stat and ListDir (a proto map
// of strings cannot carry it), as E2B's ReadMetadata does.
func TestMetadataNotUTF8(t *testing.T) {
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		ctx := ctxT(t)
		file := filepath.Join(env.home, "bin.txt")
		writeFile(t, file, "x", 0o644)
		if err := unix.Setxattr(file, "user.e2b.ok", []byte("fine"), 0); err != nil {
			t.Skipf("no user xattrs: %v", err)
		}
		if err := unix.Setxattr(file, "user.e2b.bad", []byte{0xff, 0xfe}, 0); err != nil {
			t.Fatal(err)
		}
		res, err := c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: file}))
		if err != nil {
			t.Fatalf("Stat: %v", err)
		}
		if md := res.Msg.GetEntry().GetMetadata(); len(md) != 1 || md["ok"] != "fine" {
			t.Fatalf("metadata = %q", md)
		}
		list, err := c.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: env.home}))
		if err != nil {
			t.Fatalf("ListDir: %v", err)
		}
		if n := len(list.Msg.GetEntries()); n != 1 {
			t.Fatalf("ListDir = %d entries", n)
		}
	})
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestStatErrors(t *testing.T) {
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		ctx := ctxT(t)
		writeFile(t, filepath.Join(env.home, "f.txt"), "x", 0o644)
		tests := []struct {
			name string
			req  *connect.Request[filesystem.StatRequest]
			code connect.Code
		}{
			{"missing", connect.NewRequest(&filesystem.StatRequest{Path: "missing"}), connect.CodeNotFound},
			{"under a file", connect.NewRequest(&filesystem.StatRequest{Path: "f.txt/x"}), connect.CodeNotFound},
			{"NUL byte", connect.NewRequest(&filesystem.StatRequest{Path: "a\x00b"}), connect.CodeInvalidArgument},
			{"other home", connect.NewRequest(&filesystem.StatRequest{Path: "~bob/x"}), connect.CodeInvalidArgument},
			{"unknown user", asUser(&filesystem.StatRequest{Path: "f.txt"}, "no-such-user-moat"), connect.CodeUnauthenticated},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := c.Stat(ctx, tt.req)
				wantCode(t, err, tt.code)
				if tt.code == connect.CodeNotFound && !strings.Contains(err.Error(), "file not found: ") {
					t.Errorf("message %q", err)
				}
			})
		}
	})
}

func TestListDir(t *testing.T) {
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		ctx := ctxT(t)
		d := filepath.Join(env.home, "d")
		for _, p := range []string{"sub/deep"} {
			if err := os.MkdirAll(filepath.Join(d, p), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range []string{"a.txt", "sub/b.txt", "sub/deep/c.txt"} {
			writeFile(t, filepath.Join(d, p), p, 0o644)
		}
		mustSymlink(t, d, filepath.Join(env.home, "link"))
		mustSymlink(t, "a.txt", filepath.Join(d, "la"))

		tests := []struct {
			path  string
			depth uint32
			base  string
			want  []string
		}{
			{"d", 0, d, []string{"a.txt", "la", "sub"}},
			{d, 1, d, []string{"a.txt", "la", "sub"}},
			{"~/d", 2, d, []string{"a.txt", "la", "sub", "sub/b.txt", "sub/deep"}},
			{"d", 5, d, []string{"a.txt", "la", "sub", "sub/b.txt", "sub/deep", "sub/deep/c.txt"}},
			{"link", 1, filepath.Join(env.home, "link"), []string{"a.txt", "la", "sub"}},
		}
		for _, tt := range tests {
			res, err := c.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: tt.path, Depth: tt.depth}))
			if err != nil {
				t.Fatalf("ListDir(%q, %d): %v", tt.path, tt.depth, err)
			}
			var got []string
			for _, e := range res.Msg.GetEntries() {
				rel, err := filepath.Rel(tt.base, e.GetPath())
				if err != nil || e.GetName() != filepath.Base(rel) {
					t.Errorf("entry %v not under %s", e, tt.base)
				}
				got = append(got, rel)
				wantType := filesystem.FileType_FILE_TYPE_FILE
				if strings.HasPrefix(filepath.Base(rel), "sub") || filepath.Base(rel) == "deep" {
					wantType = filesystem.FileType_FILE_TYPE_DIRECTORY
				}
				if e.GetType() != wantType {
					t.Errorf("entry %s type %v", rel, e.GetType())
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("ListDir(%q, %d) = %v, want %v", tt.path, tt.depth, got, tt.want)
			}
		}
	})
}

func TestListDirErrors(t *testing.T) {
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		ctx := ctxT(t)
		writeFile(t, filepath.Join(env.home, "f.txt"), "x", 0o644)
		mustSymlink(t, "loop2", filepath.Join(env.home, "loop1"))
		mustSymlink(t, "loop1", filepath.Join(env.home, "loop2"))
		tests := []struct {
			path string
			code connect.Code
		}{
			{"f.txt", connect.CodeInvalidArgument},
			{"missing", connect.CodeNotFound},
			{"loop1", connect.CodeFailedPrecondition},
			{"/x\x00", connect.CodeInvalidArgument},
		}
		for _, tt := range tests {
			_, err := c.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: tt.path, Depth: 1}))
			wantCode(t, err, tt.code)
		}
	})
}

func TestMakeDir(t *testing.T) {
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		ctx := ctxT(t)
		res, err := c.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "x/y/z"}))
		if err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(env.home, "x/y/z")
		if e := res.Msg.GetEntry(); e.GetPath() != want || e.GetType() != filesystem.FileType_FILE_TYPE_DIRECTORY {
			t.Errorf("entry = %v", e)
		}
		if fi, err := os.Stat(filepath.Join(env.home, "x")); err != nil || !fi.IsDir() {
			t.Errorf("parent not created: %v", err)
		}
		_, err = c.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: want}))
		wantCode(t, err, connect.CodeAlreadyExists)
		writeFile(t, filepath.Join(env.home, "f.txt"), "x", 0o644)
		_, err = c.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "f.txt"}))
		wantCode(t, err, connect.CodeInvalidArgument)
		_, err = c.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "f.txt/sub"}))
		wantCode(t, err, connect.CodeInvalidArgument)
	})
}

// TestMakeDirChownsToUser checks that directories created for another
// account belong to it (needs root to chown).
func TestMakeDirChownsToUser(t *testing.T) {
	testkit.RequireRoot(t) // chown
	nobody, err := users.NewResolver().Lookup("nobody")
	testkit.RequireNoErr(t, err, "the nobody account")
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		ctx := ctxT(t)
		target := filepath.Join(env.home, "n1/n2")
		res, err := c.MakeDir(ctx, asUser(&filesystem.MakeDirRequest{Path: target}, "nobody"))
		if err != nil {
			t.Fatal(err)
		}
		if e := res.Msg.GetEntry(); e.GetOwner() != "nobody" || e.GetGroup() != users.NameOfGID(nobody.GID) {
			t.Errorf("entry owner %s:%s", e.GetOwner(), e.GetGroup())
		}
		for _, p := range []string{filepath.Join(env.home, "n1"), target} {
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil || st.Uid != nobody.UID || st.Gid != nobody.GID {
				t.Errorf("%s owned by %d:%d (%v)", p, st.Uid, st.Gid, err)
			}
		}
		// Move creates the destination's parents for the user too.
		writeFile(t, filepath.Join(env.home, "f"), "x", 0o644)
		if _, err := c.Move(ctx, asUser(&filesystem.MoveRequest{Source: filepath.Join(env.home, "f"), Destination: filepath.Join(env.home, "m1/f")}, "nobody")); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(env.home, "m1"), &st); err != nil || st.Uid != nobody.UID {
			t.Errorf("m1 owned by %d (%v)", st.Uid, err)
		}
	})
}

func TestMove(t *testing.T) {
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		ctx := ctxT(t)
		writeFile(t, filepath.Join(env.home, "f.txt"), "hello", 0o644)
		res, err := c.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: "f.txt", Destination: "new/dir/g.txt"}))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(env.home, "new/dir/g.txt")
		if e := res.Msg.GetEntry(); e.GetPath() != dst || e.GetName() != "g.txt" || e.GetSize() != 5 || e.GetType() != filesystem.FileType_FILE_TYPE_FILE {
			t.Errorf("entry = %v", e)
		}
		if _, err := os.Lstat(filepath.Join(env.home, "f.txt")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("source still there: %v", err)
		}
		if b, err := os.ReadFile(dst); err != nil || string(b) != "hello" {
			t.Errorf("destination = %q, %v", b, err)
		}
		_, err = c.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: "f.txt", Destination: "h.txt"}))
		wantCode(t, err, connect.CodeNotFound)
		_, err = c.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: dst, Destination: "a\x00"}))
		wantCode(t, err, connect.CodeInvalidArgument)
	})
}

func TestRemove(t *testing.T) {
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		ctx := ctxT(t)
		if err := os.MkdirAll(filepath.Join(env.home, "d/sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(env.home, "d/sub/f"), "x", 0o644)
		writeFile(t, filepath.Join(env.home, "g"), "x", 0o644)
		for _, p := range []string{"d", filepath.Join(env.home, "g"), "missing", "missing/too"} {
			if _, err := c.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: p})); err != nil {
				t.Errorf("Remove(%q): %v", p, err)
			}
		}
		for _, p := range []string{"d", "g"} {
			if _, err := os.Lstat(filepath.Join(env.home, p)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s still there: %v", p, err)
			}
		}
		_, err := c.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: "\x00"}))
		wantCode(t, err, connect.CodeInvalidArgument)
	})
}

// TestPermissionDenied: envd does no per-user checks of its own, but what
// the OS denies it (here: creating a directory in sysfs) is permission_denied.
func TestPermissionDenied(t *testing.T) {
	target := fmt.Sprintf("/sys/moat-filesystem-test-%d", os.Getpid())
	if err := os.Mkdir(target, 0o755); err == nil {
		_ = os.Remove(target)
		t.Skip("by design: this system lets us create directories in /sys")
	} else if !errors.Is(err, fs.ErrPermission) {
		t.Skipf("by design: mkdir in /sys fails with %v here, not a permission error", err)
	}
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		_, err := c.MakeDir(ctxT(t), connect.NewRequest(&filesystem.MakeDirRequest{Path: target}))
		wantCode(t, err, connect.CodePermissionDenied)
	})
}

func TestOSErrorKinds(t *testing.T) {
	tests := []struct {
		err  error
		kind error
	}{
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}, errdefs.ErrNotFound},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EACCES}, errdefs.ErrPermissionDenied},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EPERM}, errdefs.ErrPermissionDenied},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EROFS}, errdefs.ErrPermissionDenied},
		{&fs.PathError{Op: "mkdir", Path: "/x", Err: syscall.EEXIST}, errdefs.ErrAlreadyExists},
		{&fs.PathError{Op: "stat", Path: "/x", Err: syscall.ELOOP}, errdefs.ErrFailedPrecondition},
		{&fs.PathError{Op: "mkdir", Path: "/x", Err: syscall.ENOTDIR}, errdefs.ErrInvalidArgument},
		{&fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}, errdefs.ErrNoSpace},
		{&fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOMEM}, errdefs.ErrResourceExhausted},
		{&fs.PathError{Op: "read", Path: "/x", Err: syscall.EIO}, errdefs.ErrInternal},
	}
	for _, tt := range tests {
		got := osError("op", "/x", tt.err)
		if !errors.Is(got, tt.kind) {
			t.Errorf("osError(%v) = %v, want kind %v", tt.err, got, tt.kind)
		}
	}
}

func TestEntryInfoNotFound(t *testing.T) {
	_, err := EntryInfo(filepath.Join(t.TempDir(), "missing"))
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("err = %v", err)
	}
}
