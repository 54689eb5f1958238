package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	moat "github.com/moatsh/moat/sdk/go"
)

// InterpreterPort is the port of the code-interpreter API (envd's Jupyter
// front, E2B's port 49999) inside a sandbox.
const InterpreterPort = 49999

// maxLine bounds one NDJSON line of /execute (a result line carries its
// images, base64).
const maxLine = 32 << 20

// executeRequest is the body of POST /execute, as the E2B code-interpreter
// SDKs send it.
type executeRequest struct {
	Code     string            `json:"code"`
	Language string            `json:"language,omitempty"`
	EnvVars  map[string]string `json:"env_vars,omitempty"`
}

// execLine is one line of the /execute stream: stdout, stderr, result,
// error, number_of_executions, keepalive or end_of_execution.
type execLine struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
	IsMain    bool   `json:"is_main_result"`
	PNG       string `json:"png"`
	JPEG      string `json:"jpeg"`
	Count     int    `json:"execution_count"`
	// Other holds every key, for the formats a result carries besides
	// text and images (html, markdown, json, ...).
	Other map[string]json.RawMessage `json:"-"`
}

// execResult is one result of an execution (a display or the value of the
// last expression).
type execResult struct {
	main    bool
	text    string
	images  []*mcp.ImageContent
	formats []string // the other formats it carried
}

// execution collects one /execute stream.
type execution struct {
	started        bool // the interpreter answered 200
	ended          bool // end_of_execution arrived
	stdout, stderr *capped
	results        []execResult
	errName        string
	errValue       string
	traceback      string
	imageBytes     int
	imagesDropped  int
}

// execute posts code to the sandbox's interpreter through the proxy and
// collects the stream. It returns what arrived even with an error (a
// timeout, a cut stream); ex.started tells whether the code ran at all.
func execute(ctx context.Context, hc *http.Client, base string, sb *moat.Sandbox, in executeRequest, max int) (*execution, error) {
	ex := &execution{stdout: newCapped(max), stderr: newCapped(max)}
	body, err := json.Marshal(in)
	if err != nil {
		return ex, fmt.Errorf("run code: encode: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/execute", bytes.NewReader(body))
	if err != nil {
		return ex, fmt.Errorf("run code: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("E2b-Sandbox-Id", sb.ID)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(InterpreterPort))
	if sb.AccessToken != "" {
		req.Header.Set("X-Access-Token", sb.AccessToken)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return ex, fmt.Errorf("run code in sandbox %s: %w", sb.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		hint := ""
		if resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusNotFound {
			hint = " (is the sandbox running, from a code-interpreter template such as code-interpreter-v1?)"
		}
		return ex, fmt.Errorf("run code in sandbox %s: interpreter answered %s: %s%s", sb.ID, resp.Status,
			strings.TrimSpace(string(msg)), hint)
	}
	ex.started = true
	return ex, ex.read(resp.Body)
}

// read consumes the NDJSON stream until end_of_execution.
func (ex *execution) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		raw := sc.Bytes()
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		var l execLine
		if err := json.Unmarshal(raw, &l); err != nil {
			return fmt.Errorf("run code: bad line from the interpreter: %w", err)
		}
		if l.Type == "result" {
			_ = json.Unmarshal(raw, &l.Other)
		}
		if ex.add(l) {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("run code: read the interpreter's output: %w", err)
	}
	return fmt.Errorf("run code: the interpreter's output ended without end_of_execution")
}

// add takes one line and reports whether it ended the execution.
func (ex *execution) add(l execLine) bool {
	switch l.Type {
	case "stdout":
		_, _ = ex.stdout.Write([]byte(l.Text))
	case "stderr":
		_, _ = ex.stderr.Write([]byte(l.Text))
	case "error":
		ex.errName, ex.errValue, ex.traceback = l.Name, l.Value, l.Traceback
	case "result":
		ex.results = append(ex.results, ex.resultOf(l))
	case "end_of_execution":
		ex.ended = true
		return true
	}
	return false
}

// resultOf turns a result line into a result, its PNG and JPEG images
// decoded (within maxImages for the whole execution).
func (ex *execution) resultOf(l execLine) execResult {
	r := execResult{main: l.IsMain, text: l.Text}
	for _, img := range []struct{ data, mime string }{{l.PNG, "image/png"}, {l.JPEG, "image/jpeg"}} {
		if img.data == "" {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(img.data))
		if err != nil {
			r.formats = append(r.formats, img.mime+" (undecodable)")
			continue
		}
		if ex.imageBytes+len(b) > maxImages {
			ex.imagesDropped++
			continue
		}
		ex.imageBytes += len(b)
		r.images = append(r.images, &mcp.ImageContent{Data: b, MIMEType: img.mime})
	}
	for k, v := range l.Other {
		switch k {
		case "type", "text", "png", "jpeg", "is_main_result", "extra":
		default:
			if len(v) > 0 && string(v) != "null" {
				r.formats = append(r.formats, k)
			}
		}
	}
	sort.Strings(r.formats)
	return r
}

// result renders the execution as tool content: text first, then images.
func (ex *execution) result(max int) *mcp.CallToolResult {
	var parts []string
	var images []mcp.Content
	for _, r := range ex.results {
		label := "Display"
		if r.main {
			label = "Result"
		}
		if r.text != "" {
			parts = append(parts, label+":\n"+truncate(r.text, max))
		}
		if len(r.formats) > 0 {
			parts = append(parts, fmt.Sprintf("(%s also has: %s)", strings.ToLower(label), strings.Join(r.formats, ", ")))
		}
		for _, img := range r.images {
			images = append(images, img)
		}
	}
	if ex.imagesDropped > 0 {
		parts = append(parts, fmt.Sprintf("[%d image(s) left out: over %d bytes of images]", ex.imagesDropped, maxImages))
	}
	parts = append(parts, section("stdout", ex.stdout.String()), section("stderr", ex.stderr.String()))
	res := &mcp.CallToolResult{}
	if ex.errName != "" {
		res.IsError = true
		parts = append(parts, truncate(fmt.Sprintf("%s: %s\n%s", ex.errName, ex.errValue, ex.traceback), max))
	}
	txt := joinNonEmpty(parts...)
	if txt == "" {
		txt = "(no output)"
	}
	res.Content = append([]mcp.Content{&mcp.TextContent{Text: txt}}, images...)
	return res
}
