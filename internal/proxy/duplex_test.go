package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// A streaming call answers before its request body has been sent (envd's
// StreamInput, a WatchDir started while the client still writes): the proxy
// must keep copying the body upstream after it has started the response.
func TestProxyFullDuplex(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d %v", n, err)
	}))
	front := httptest.NewServer(New(Config{Resolver: fakeResolver{"iopen": {state: "running"}}}))
	t.Cleanup(func() { // a broken proxy leaves handlers blocked: cut them loose
		front.CloseClientConnections()
		backend.CloseClientConnections()
		front.Close()
		backend.Close()
	})

	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", front.URL+"/process.Process/StreamInput", pr)
	req.Header.Set(HeaderSandboxID, "iopen")
	req.Header.Set(HeaderSandboxPort, strconv.Itoa(portOf(t, backend)))
	type result struct {
		resp *http.Response
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		got <- result{resp, err}
	}()
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	if _, err := pw.Write(chunk); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no response headers while the body was still open")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.resp.Body.Close()
	// The response has started; the rest of the body must still get through
	// (without full duplex nobody reads it any more and the writes block).
	wrote := make(chan error, 1)
	go func() {
		for i := 0; i < 15; i++ {
			if _, err := pw.Write(chunk); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- pw.Close()
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("write after response started: %v", err)
		}
	case <-time.After(5 * time.Second):
		pw.CloseWithError(io.ErrClosedPipe)
		t.Fatal("request body stalled after the response started")
	}
	body, err := io.ReadAll(r.resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d <nil>", 16*len(chunk)); string(body) != want {
		t.Fatalf("backend saw %q, want %q", body, want)
	}
}
