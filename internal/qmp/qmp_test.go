package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// fakeQEMU serves one QMP connection on a unix socket: it greets, accepts
// qmp_capabilities and answers each command with handle's reply (an object
// with "return" or "error"); the "event" command emits an event first.
// A command sent with a file descriptor gets the file's first line back.
func fakeQEMU(t *testing.T, handle func(cmd string, args json.RawMessage) map[string]any) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.AcceptUnix()
		if err != nil {
			return
		}
		defer c.Close()
		w := json.NewEncoder(c)
		_ = w.Encode(map[string]any{"QMP": map[string]any{"version": map[string]any{}, "capabilities": []string{}}})
		buf, oob := make([]byte, 4096), make([]byte, 256)
		var pending []byte
		for {
			n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
			if err != nil {
				return
			}
			var fdLine string
			if oobn > 0 {
				msgs, _ := syscall.ParseSocketControlMessage(oob[:oobn])
				for _, m := range msgs {
					fds, _ := syscall.ParseUnixRights(&m)
					for _, fd := range fds {
						f := os.NewFile(uintptr(fd), "passed")
						line, _ := bufio.NewReader(f).ReadString('\n')
						f.Close()
						fdLine = line
					}
				}
			}
			pending = append(pending, buf[:n]...)
			dec := json.NewDecoder(bytesReader(&pending))
			var req struct {
				Execute   string          `json:"execute"`
				Arguments json.RawMessage `json:"arguments"`
				ID        string          `json:"id"`
			}
			for dec.Decode(&req) == nil {
				var reply map[string]any
				switch {
				case req.Execute == "qmp_capabilities":
					reply = map[string]any{"return": map[string]any{}}
				case fdLine != "":
					reply = map[string]any{"return": fdLine}
				case req.Execute == "event":
					_ = w.Encode(map[string]any{"event": "STOP", "data": map[string]any{}, "timestamp": map[string]any{"seconds": time.Now().Unix(), "microseconds": 0}})
					reply = map[string]any{"return": map[string]any{}}
				case req.Execute == "hangup":
					return
				default:
					reply = handle(req.Execute, req.Arguments)
				}
				reply["id"] = req.ID
				_ = w.Encode(reply)
			}
			pending = pending[:0]
		}
	}()
	return sock
}

type sliceReader struct{ b *[]byte }

func (r sliceReader) Read(p []byte) (int, error) {
	if len(*r.b) == 0 {
		return 0, errors.New("eof")
	}
	n := copy(p, *r.b)
	*r.b = (*r.b)[n:]
	return n, nil
}

func bytesReader(b *[]byte) sliceReader { return sliceReader{b} }

func TestExecute(t *testing.T) {
	sock := fakeQEMU(t, func(cmd string, args json.RawMessage) map[string]any {
		switch cmd {
		case "query-status":
			return map[string]any{"return": map[string]any{"status": "running", "running": true}}
		case "echo":
			var a map[string]any
			_ = json.Unmarshal(args, &a)
			return map[string]any{"return": a}
		default:
			return map[string]any{"error": map[string]any{"class": "CommandNotFound", "desc": "The command " + cmd + " has not been found"}}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		name      string
		cmd       string
		args      any
		wantKey   string
		wantValue any
		wantClass string
	}{
		{name: "return value", cmd: "query-status", wantKey: "status", wantValue: "running"},
		{name: "arguments", cmd: "echo", args: map[string]any{"x": "y"}, wantKey: "x", wantValue: "y"},
		{name: "error reply", cmd: "nope", wantClass: "CommandNotFound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out map[string]any
			err := c.Execute(ctx, tc.cmd, tc.args, &out)
			if tc.wantClass != "" {
				var qe *Error
				if !errors.As(err, &qe) || qe.Class != tc.wantClass {
					t.Fatalf("err = %v, want class %s", err, tc.wantClass)
				}
				return
			}
			if err != nil || out[tc.wantKey] != tc.wantValue {
				t.Fatalf("out = %v, err = %v", out, err)
			}
		})
	}
}

func TestEventsFilesAndClose(t *testing.T) {
	sock := fakeQEMU(t, func(string, json.RawMessage) map[string]any { return map[string]any{"return": map[string]any{}} })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	since := time.Now().Add(-time.Second)
	if err := c.Execute(ctx, "event", nil, nil); err != nil {
		t.Fatal(err)
	}
	if ev, err := c.WaitEvent(ctx, "STOP", since); err != nil || ev.Name != "STOP" {
		t.Fatalf("WaitEvent = %+v, %v", ev, err)
	}
	if evs := c.Events(); len(evs) != 1 {
		t.Fatalf("Events = %+v", evs)
	}
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("through SCM_RIGHTS\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got string
	if err := c.ExecuteFile(ctx, "getfd", map[string]any{"fdname": "x"}, &got, f); err != nil || got != "through SCM_RIGHTS\n" {
		t.Fatalf("ExecuteFile = %q, %v", got, err)
	}
	if err := c.Execute(ctx, "hangup", nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("command on a closed connection: %v, want ErrClosed", err)
	}
	if err := c.Execute(ctx, "query-status", nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	if _, err := c.WaitEvent(ctx, "RESUME", since); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitEvent after close: %v", err)
	}
}

func TestDialTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, filepath.Join(t.TempDir(), "none.sock")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial = %v", err)
	}
}
