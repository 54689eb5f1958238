package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/moatsh/moat/api/envd/filesystem"
	"github.com/moatsh/moat/api/envd/filesystem/filesystemconnect"
	moat "github.com/moatsh/moat/sdk/go"
)

// Bounds of list_files.
const (
	maxDepth   = 5
	maxEntries = 1000
)

type readIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's ID"`
	Path      string `json:"path" jsonschema:"absolute path, or relative to the user's home"`
	User      string `json:"user,omitempty" jsonschema:"account whose permissions apply (default: the sandbox's default user)"`
}

type writeIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's ID"`
	Path      string `json:"path" jsonschema:"absolute path, or relative to the user's home; missing directories are created"`
	Content   string `json:"content" jsonschema:"the file's new content"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"utf8 (default) or base64 (content is base64 of binary data)"`
	User      string `json:"user,omitempty" jsonschema:"account that owns the file (default: the sandbox's default user)"`
}

type listIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's ID"`
	Path      string `json:"path" jsonschema:"directory: absolute, or relative to the user's home"`
	Depth     int    `json:"depth,omitempty" jsonschema:"levels to descend (default 1, at most 5)"`
	User      string `json:"user,omitempty" jsonschema:"account whose permissions apply"`
}

type entryOut struct {
	Name          string `json:"name"`
	Path          string `json:"path"`
	Type          string `json:"type"`
	Size          int64  `json:"size"`
	Permissions   string `json:"permissions,omitempty"`
	SymlinkTarget string `json:"symlink_target,omitempty"`
}

type listFilesOut struct {
	Entries   []entryOut `json:"entries"`
	Truncated bool       `json:"truncated,omitempty"`
}

func (s *server) addFileTools(ms *mcp.Server) {
	no := false
	addTool(s, ms, &mcp.Tool{Name: "read_file", Title: "Read a file",
		Description: "Read a file in a sandbox. Text comes back as text (truncated beyond the server's output limit), " +
			"PNG/JPEG/GIF/WebP images as images, other binary data as base64.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}}, s.readFile)
	addTool(s, ms, &mcp.Tool{Name: "write_file", Title: "Write a file",
		Description: fmt.Sprintf("Create or replace a file in a sandbox (at most %d bytes).", maxWrite),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no}}, s.writeFile)
	addTool(s, ms, &mcp.Tool{Name: "list_files", Title: "List a directory",
		Description: fmt.Sprintf("List a directory in a sandbox (at most %d entries).", maxEntries),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}}, s.listFiles)
}

// filesURL is the envd /files URL of p for user, through the proxy.
func (s *server) filesURL(p, user string) string {
	q := url.Values{"path": {p}}
	if user != "" {
		q.Set("username", user)
	}
	return s.sandboxURL() + "/files?" + q.Encode()
}

// setEnvdHeaders routes a request to the sandbox's envd.
func setEnvdHeaders(h http.Header, sb *moat.Sandbox, user string) {
	h.Set("E2b-Sandbox-Id", sb.ID)
	h.Set("E2b-Sandbox-Port", strconv.Itoa(moat.EnvdPort))
	if sb.AccessToken != "" {
		h.Set("X-Access-Token", sb.AccessToken)
	}
	if user != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
}

// envdError describes an envd answer other than 200.
func envdError(what string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var e struct {
		Message string `json:"message"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &e) == nil && e.Message != "" {
		msg = e.Message
	}
	return fmt.Errorf("%s: %s: %s", what, resp.Status, msg)
}

var imageTypes = map[string]string{".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
	".gif": "image/gif", ".webp": "image/webp"}

func (s *server) readFile(ctx context.Context, in readIn) (*mcp.CallToolResult, any, error) {
	if in.Path == "" {
		return nil, nil, errors.New("path is required")
	}
	sb, err := s.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.filesURL(in.Path, in.User), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", in.Path, err)
	}
	setEnvdHeaders(req.Header, sb, "")
	resp, err := s.httpClient().Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", in.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, envdError("read "+in.Path, resp)
	}
	limit := max(s.cfg.MaxOutput, maxImages)
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", in.Path, err)
	}
	size := int64(len(data))
	if resp.ContentLength > size {
		size = resp.ContentLength
	}
	return fileContent(in.Path, data, size, s.cfg.MaxOutput), nil, nil
}

// fileContent renders a file's first bytes (data) of size: an image, text
// or base64, truncated to max.
func fileContent(p string, data []byte, size int64, max int) *mcp.CallToolResult {
	if mime, ok := imageTypes[strings.ToLower(path.Ext(p))]; ok && int64(len(data)) == size && len(data) <= maxImages {
		return &mcp.CallToolResult{Content: []mcp.Content{
			text("%s: %s, %d bytes", p, mime, size), &mcp.ImageContent{Data: data, MIMEType: mime}}}
	}
	head := data[:min(len(data), max)]
	if utf8.Valid(trimCutRune(head)) && !bytes.ContainsRune(head, 0) {
		t := string(trimCutRune(head))
		if int64(len(t)) < size {
			t += fmt.Sprintf("\n[truncated: %d of %d bytes shown]", len(t), size)
		}
		return textResult(t)
	}
	raw := data[:min(len(data), max*3/4)]
	note := fmt.Sprintf("%s: binary, %d bytes; base64", p, size)
	if int64(len(raw)) < size {
		note += fmt.Sprintf(" of the first %d bytes", len(raw))
	}
	return textResult(note + ":\n" + base64.StdEncoding.EncodeToString(raw))
}

// trimCutRune drops a rune cut in two at the end of b.
func trimCutRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax-1 && len(b) > 0; i++ {
		if r, size := utf8.DecodeLastRune(b); r != utf8.RuneError || size != 1 {
			break
		}
		b = b[:len(b)-1]
	}
	return b
}

func (s *server) writeFile(ctx context.Context, in writeIn) (*mcp.CallToolResult, any, error) {
	if in.Path == "" {
		return nil, nil, errors.New("path is required")
	}
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf8", "utf-8", "text":
	case "base64":
		b, err := base64.StdEncoding.DecodeString(in.Content)
		if err != nil {
			return nil, nil, fmt.Errorf("content: not base64: %w", err)
		}
		data = b
	default:
		return nil, nil, fmt.Errorf("encoding %q: want utf8 or base64", in.Encoding)
	}
	if len(data) > maxWrite {
		return nil, nil, fmt.Errorf("content of %d bytes: at most %d", len(data), maxWrite)
	}
	sb, err := s.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.filesURL(in.Path, in.User), bytes.NewReader(data))
	if err != nil {
		return nil, nil, fmt.Errorf("write %s: %w", in.Path, err)
	}
	setEnvdHeaders(req.Header, sb, "")
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := s.httpClient().Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("write %s: %w", in.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, envdError("write "+in.Path, resp)
	}
	var written []struct {
		Path string `json:"path"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&written)
	where := in.Path
	if len(written) == 1 && written[0].Path != "" {
		where = written[0].Path
	}
	return textResult(fmt.Sprintf("Wrote %d bytes to %s.", len(data), where)), nil, nil
}

func (s *server) listFiles(ctx context.Context, in listIn) (*mcp.CallToolResult, listFilesOut, error) {
	if in.Path == "" {
		return nil, listFilesOut{}, errors.New("path is required")
	}
	depth := in.Depth
	if depth <= 0 {
		depth = 1
	}
	if depth > maxDepth {
		return nil, listFilesOut{}, fmt.Errorf("depth %d: at most %d", depth, maxDepth)
	}
	sb, err := s.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, listFilesOut{}, err
	}
	fc := filesystemconnect.NewFilesystemClient(s.httpClient(), s.sandboxURL(), connect.WithProtoJSON())
	req := connect.NewRequest(&filesystem.ListDirRequest{Path: in.Path, Depth: uint32(depth)})
	setEnvdHeaders(req.Header(), sb, in.User)
	resp, err := fc.ListDir(ctx, req)
	if err != nil {
		return nil, listFilesOut{}, fmt.Errorf("list %s: %w", in.Path, err)
	}
	out := listFilesOut{Entries: []entryOut{}}
	var b strings.Builder
	entries := resp.Msg.GetEntries()
	fmt.Fprintf(&b, "%d entries in %s", len(entries), in.Path)
	if len(entries) > maxEntries {
		entries, out.Truncated = entries[:maxEntries], true
		fmt.Fprintf(&b, " (the first %d listed)", maxEntries)
	}
	b.WriteString("\n")
	for _, e := range entries {
		o := entryOut{Name: e.GetName(), Path: e.GetPath(), Type: fileType(e.GetType()), Size: e.GetSize(),
			Permissions: e.GetPermissions(), SymlinkTarget: e.GetSymlinkTarget()}
		out.Entries = append(out.Entries, o)
		fmt.Fprintf(&b, "%s %10d  %s", o.Permissions, o.Size, o.Path)
		if o.Type == "dir" {
			b.WriteString("/")
		}
		if o.SymlinkTarget != "" {
			b.WriteString(" -> " + o.SymlinkTarget)
		}
		b.WriteString("\n")
	}
	return textResult(truncate(b.String(), s.cfg.MaxOutput)), out, nil
}

func fileType(t filesystem.FileType) string {
	switch t {
	case filesystem.FileType_FILE_TYPE_FILE:
		return "file"
	case filesystem.FileType_FILE_TYPE_DIRECTORY:
		return "dir"
	case filesystem.FileType_FILE_TYPE_SYMLINK:
		return "symlink"
	default:
		return "other"
	}
}
