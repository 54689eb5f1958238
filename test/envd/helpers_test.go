package envd_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"
)

// client does no transparent decompression, so tests see envd's encoding.
var client = &http.Client{
	Timeout:   2 * time.Minute,
	Transport: &http.Transport{DisableCompression: true},
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// errBody is envd's JSON error.
type errBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (r response) err(t testing.TB) errBody {
	t.Helper()
	var e errBody
	if ct := r.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Fatalf("error content type = %q, body %q", ct, r.Body)
	}
	if err := json.Unmarshal(r.Body, &e); err != nil {
		t.Fatalf("error body %q: %v", r.Body, err)
	}
	if e.Code != r.Status {
		t.Fatalf("error body code %d != status %d", e.Code, r.Status)
	}
	return e
}

func do(t testing.TB, method, url string, hdr map[string]string, body io.Reader) response {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// part is one multipart part.
type part struct {
	name, filename string
	data           []byte
}

// multipartBody builds the body the SDK sends: parts named "file" whose
// filename is the destination path (kept verbatim, slashes included).
func multipartBody(t testing.TB, parts ...part) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="`+p.name+`"; filename="`+strings.ReplaceAll(p.filename, `"`, `\"`)+`"`)
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(p.data)
	}
	mw.Close()
	return mw.FormDataContentType(), &buf
}

type entry struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata"`
}

func entries(t testing.TB, r response) []entry {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("upload: %d %s", r.Status, r.Body)
	}
	var out []entry
	if err := json.Unmarshal(r.Body, &out); err != nil {
		t.Fatalf("upload answer %q: %v", r.Body, err)
	}
	return out
}
