package filesystem

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/filesystem"
	"github.com/moatsh/moat/api/envd/filesystem/filesystemconnect"
	"github.com/moatsh/moat/internal/testkit"
)

// watchStream reads a WatchDir stream in the background.
type watchStream struct {
	t    *testing.T
	msgs chan *filesystem.WatchDirResponse
	errc chan error
}

func startWatch(t *testing.T, c filesystemconnect.FilesystemClient, req *connect.Request[filesystem.WatchDirRequest]) *watchStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := c.WatchDir(ctx, req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w := &watchStream{t: t, msgs: make(chan *filesystem.WatchDirResponse, 1024), errc: make(chan error, 1)}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; stream.Close() })
	go func() {
		defer close(done)
		for stream.Receive() {
			w.msgs <- stream.Msg()
		}
		w.errc <- stream.Err()
		close(w.msgs)
	}()
	if m := w.next(); m.GetStart() == nil {
		t.Fatalf("first message %v, want start", m)
	}
	return w
}

func (w *watchStream) next() *filesystem.WatchDirResponse {
	w.t.Helper()
	select {
	case m, ok := <-w.msgs:
		if !ok {
			w.t.Fatalf("stream ended: %v", <-w.errc)
		}
		return m
	case <-time.After(10 * time.Second):
		w.t.Fatal("timed out waiting for a watch message")
	}
	return nil
}

// waitFor returns the first filesystem event with name and type; it fails
// when an event named in forbidden arrives first.
func (w *watchStream) waitFor(name string, typ filesystem.EventType, forbidden ...string) *filesystem.FilesystemEvent {
	w.t.Helper()
	for {
		fe := w.next().GetFilesystem()
		if fe == nil {
			continue
		}
		for _, f := range forbidden {
			if fe.GetName() == f {
				w.t.Fatalf("unexpected event %v", fe)
			}
		}
		if fe.GetName() == name && fe.GetType() == typ {
			return fe
		}
	}
}

func TestWatchDir(t *testing.T) {
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		if err := os.Mkdir(filepath.Join(env.home, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		w := startWatch(t, c, connect.NewRequest(&filesystem.WatchDirRequest{Path: "~", IncludeEntry: true}))
		f := filepath.Join(env.home, "a.txt")
		writeFile(t, f, "", 0o644)
		ev := w.waitFor("a.txt", filesystem.EventType_EVENT_TYPE_CREATE)
		if ev.GetEntry().GetPath() != f || ev.GetEntry().GetType() != filesystem.FileType_FILE_TYPE_FILE {
			t.Errorf("create entry = %v", ev.GetEntry())
		}
		if err := os.WriteFile(f, []byte("more"), 0o644); err != nil {
			t.Fatal(err)
		}
		if ev := w.waitFor("a.txt", filesystem.EventType_EVENT_TYPE_WRITE); ev.GetEntry() == nil {
			t.Error("write event without entry")
		}
		if err := os.Chmod(f, 0o600); err != nil {
			t.Fatal(err)
		}
		if ev := w.waitFor("a.txt", filesystem.EventType_EVENT_TYPE_CHMOD); ev.GetEntry().GetMode() != 0o600 {
			t.Errorf("chmod entry = %v", ev.GetEntry())
		}
		if err := os.Rename(f, filepath.Join(env.home, "b.txt")); err != nil {
			t.Fatal(err)
		}
		if ev := w.waitFor("a.txt", filesystem.EventType_EVENT_TYPE_RENAME); ev.Entry != nil {
			t.Errorf("rename event with entry %v", ev.GetEntry())
		}
		w.waitFor("b.txt", filesystem.EventType_EVENT_TYPE_CREATE)
		// Not recursive: changes inside sub are not reported.
		writeFile(t, filepath.Join(env.home, "sub/inner"), "", 0o644)
		if err := os.Remove(filepath.Join(env.home, "b.txt")); err != nil {
			t.Fatal(err)
		}
		if ev := w.waitFor("b.txt", filesystem.EventType_EVENT_TYPE_REMOVE, "sub/inner"); ev.Entry != nil {
			t.Errorf("remove event with entry %v", ev.GetEntry())
		}
	})
}

func TestWatchDirRecursive(t *testing.T) {
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		root := filepath.Join(env.home, "w")
		if err := os.MkdirAll(filepath.Join(root, "old/deep"), 0o755); err != nil {
			t.Fatal(err)
		}
		w := startWatch(t, c, connect.NewRequest(&filesystem.WatchDirRequest{Path: "w", Recursive: true}))
		writeFile(t, filepath.Join(root, "old/deep/x"), "", 0o644)
		if ev := w.waitFor("old/deep/x", filesystem.EventType_EVENT_TYPE_CREATE); ev.Entry != nil {
			t.Errorf("entry without include_entry: %v", ev.GetEntry())
		}
		if err := os.Mkdir(filepath.Join(root, "new"), 0o755); err != nil {
			t.Fatal(err)
		}
		w.waitFor("new", filesystem.EventType_EVENT_TYPE_CREATE)
		writeFile(t, filepath.Join(root, "new/y"), "", 0o644)
		w.waitFor("new/y", filesystem.EventType_EVENT_TYPE_CREATE)
		if err := os.WriteFile(filepath.Join(root, "new/y"), []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		w.waitFor("new/y", filesystem.EventType_EVENT_TYPE_WRITE)
		if err := os.Rename(filepath.Join(root, "new"), filepath.Join(root, "moved")); err != nil {
			t.Fatal(err)
		}
		w.waitFor("new", filesystem.EventType_EVENT_TYPE_RENAME)
		w.waitFor("moved", filesystem.EventType_EVENT_TYPE_CREATE)
		writeFile(t, filepath.Join(root, "moved/z"), "", 0o644)
		w.waitFor("moved/z", filesystem.EventType_EVENT_TYPE_CREATE)
		if err := os.RemoveAll(filepath.Join(root, "old")); err != nil {
			t.Fatal(err)
		}
		w.waitFor("old/deep/x", filesystem.EventType_EVENT_TYPE_REMOVE)
		w.waitFor("old", filesystem.EventType_EVENT_TYPE_REMOVE)
	})
}

func TestWatchDirErrors(t *testing.T) {
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		writeFile(t, filepath.Join(env.home, "f.txt"), "", 0o644)
		tests := []struct {
			path string
			code connect.Code
		}{
			{"missing", connect.CodeNotFound},
			{"f.txt", connect.CodeInvalidArgument},
			{"a\x00b", connect.CodeInvalidArgument},
		}
		for _, tt := range tests {
			stream, err := c.WatchDir(ctxT(t), connect.NewRequest(&filesystem.WatchDirRequest{Path: tt.path}))
			if err == nil {
				if stream.Receive() {
					t.Fatalf("WatchDir(%q) sent %v", tt.path, stream.Msg())
				}
				err = stream.Err()
				stream.Close()
			}
			wantCode(t, err, tt.code)
		}
	})
}

func TestWatchDirKeepalive(t *testing.T) {
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		req := connect.NewRequest(&filesystem.WatchDirRequest{Path: env.home})
		req.Header().Set("Keepalive-Ping-Interval", "1")
		w := startWatch(t, c, req)
		// The header is honoured: without it the first keepalive comes
		// after 90 s, far past next's 10 s.
		if m := w.next(); m.GetKeepalive() == nil {
			t.Fatalf("got %v, want keepalive", m)
		}
	})
}

func TestWatchDirEndsOnClose(t *testing.T) {
	env := newTestEnv(t)
	c := filesystemconnect.NewFilesystemClient(http.DefaultClient, env.url)
	w := startWatch(t, c, connect.NewRequest(&filesystem.WatchDirRequest{Path: env.home}))
	env.svc.Close()
	select {
	case _, ok := <-w.msgs:
		if ok {
			t.Fatal("message after Close")
		}
		if err := <-w.errc; connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("stream error %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stream still open after Close")
	}
	_, err := c.CreateWatcher(ctxT(t), connect.NewRequest(&filesystem.CreateWatcherRequest{Path: env.home}))
	wantCode(t, err, connect.CodeUnavailable)
}

func TestPollingWatcher(t *testing.T) {
	idRE := regexp.MustCompile(`^w[a-z0-9]{20}$`)
	forCodecs(t, func(t *testing.T, env *testEnv, c filesystemconnect.FilesystemClient) {
		ctx := ctxT(t)
		res, err := c.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: env.home, Recursive: true, IncludeEntry: true}))
		if err != nil {
			t.Fatal(err)
		}
		id := res.Msg.GetWatcherId()
		if !idRE.MatchString(id) {
			t.Errorf("watcher id %q", id)
		}
		writeFile(t, filepath.Join(env.home, "p.txt"), "data", 0o644)
		seen := map[filesystem.EventType]*filesystem.FilesystemEvent{}
		defer func() {
			if t.Failed() {
				t.Logf("events so far: %v", seen)
			}
		}()
		testkit.WaitFor(t, 10*time.Second, "the watcher's create and chmod events of p.txt", func() bool {
			evs, err := c.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id}))
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs.Msg.GetEvents() {
				if ev.GetName() == "p.txt" {
					seen[ev.GetType()] = ev
				}
			}
			return seen[filesystem.EventType_EVENT_TYPE_CREATE] != nil && seen[filesystem.EventType_EVENT_TYPE_CHMOD] != nil
		})
		if seen[filesystem.EventType_EVENT_TYPE_CREATE].GetEntry().GetName() != "p.txt" {
			t.Errorf("create event = %v", seen[filesystem.EventType_EVENT_TYPE_CREATE])
		}
		evs, err := c.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil || len(evs.Msg.GetEvents()) != 0 {
			t.Errorf("second poll = %v, %v; want cleared", evs.Msg.GetEvents(), err)
		}
		if _, err := c.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id})); err != nil {
			t.Fatal(err)
		}
		_, err = c.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id}))
		wantCode(t, err, connect.CodeNotFound)
		_, err = c.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id}))
		wantCode(t, err, connect.CodeNotFound)
		_, err = c.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "missing"}))
		wantCode(t, err, connect.CodeNotFound)
		_, err = c.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: filepath.Join(env.home, "p.txt")}))
		wantCode(t, err, connect.CodeInvalidArgument)
	})
}

// TestRawJSON posts exactly what the JS SDK sends and checks the JSON it
// parses: proto3 JSON names, enum names, int64 as a string, RFC 3339 times.
func TestRawJSON(t *testing.T) {
	env := newTestEnv(t)
	dir := filepath.Join(env.home, "j")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "f.txt"), "hello", 0o644)
	post := func(method, body string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, env.url+"/filesystem.Filesystem/"+method, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Protocol-Version", "1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, b
	}
	res, body := post("ListDir", `{"path":"`+dir+`","depth":1}`)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d %s: %s", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	var out struct {
		Entries []map[string]any `json:"entries"`
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Entries) != 1 {
		t.Fatalf("body %s: %v", body, err)
	}
	e := out.Entries[0]
	if e["type"] != "FILE_TYPE_FILE" || e["size"] != "5" || e["name"] != "f.txt" || e["permissions"] != "-rw-r--r--" ||
		e["mode"] != float64(0o644) || e["path"] != filepath.Join(dir, "f.txt") {
		t.Errorf("entry %v", e)
	}
	if mt, ok := e["modifiedTime"].(string); !ok {
		t.Errorf("modifiedTime %v", e["modifiedTime"])
	} else if _, err := time.Parse(time.RFC3339Nano, mt); err != nil {
		t.Errorf("modifiedTime %q: %v", mt, err)
	}

	res, body = post("Stat", `{"path":"`+dir+`/missing"}`)
	var cerr struct{ Code, Message string }
	if err := json.Unmarshal(body, &cerr); err != nil || res.StatusCode != http.StatusNotFound || cerr.Code != "not_found" {
		t.Errorf("missing: status %d body %s", res.StatusCode, body)
	}
}

// TestRawJSONStream checks the enveloped JSON of a WatchDir stream as the
// SDKs read it: {"start":{}} first, then lowerCamelCase events.
func TestRawJSONStream(t *testing.T) {
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	payload := []byte(`{"path":"` + env.home + `","includeEntry":true}`)
	frame := append([]byte{0, 0, 0, 0, 0}, payload...)
	binary.BigEndian.PutUint32(frame[1:5], uint32(len(payload)))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.url+"/filesystem.Filesystem/WatchDir", strings.NewReader(string(frame)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	readMsg := func() string {
		t.Helper()
		var hdr [5]byte
		if _, err := io.ReadFull(res.Body, hdr[:]); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(res.Body, b); err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if m := readMsg(); m != `{"start":{}}` {
		t.Fatalf("first message %s", m)
	}
	writeFile(t, filepath.Join(env.home, "n.txt"), "", 0o644)
	m := readMsg()
	var ev struct {
		Filesystem struct {
			Name, Type string
			Entry      map[string]any
		}
	}
	if err := json.Unmarshal([]byte(m), &ev); err != nil || ev.Filesystem.Name != "n.txt" ||
		ev.Filesystem.Type != "EVENT_TYPE_CREATE" || ev.Filesystem.Entry["type"] != "FILE_TYPE_FILE" {
		t.Errorf("event %s (%v)", m, err)
	}
}
